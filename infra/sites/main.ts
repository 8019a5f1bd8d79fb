import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { z } from 'zod';
import { parseEnv, runMain } from '../../services/shared/config.js';
import { createLogger } from '../../services/shared/logger.js';
import { ConfigError } from '../../services/shared/config.js';
import { loadTargets, serviceNameOf, siteUserOf } from '../../services/shared/targets.js';
import { DEFAULT_SOCKET } from './protocol.js';
import { startControlServer, Supervisor } from './supervisor.js';

/**
 * Entry point of the sites container: every deploy target's site under one supervisor, restartable by
 * the webhook container through the control socket (protocol.ts). Exit codes: 0 stopped by a signal,
 * 1 failure, 2 bad environment.
 */
const Env = z.object({
  TARGETS_FILE: z.string().min(1),
  DEPLOY_ROOT: z.string().min(1),
  SITES_CONTROL_SOCKET: z.string().min(1).default(DEFAULT_SOCKET),
  SITES_HOST: z.string().default('0.0.0.0'),
  SITE_START_COMMAND: z.string().min(1).default('npm start'),
  SITE_READY_TIMEOUT_SECONDS: z.coerce.number().int().positive().default(30),
  /** users: every site as its target's site user (the supervisor runs as root); none: as the supervisor. */
  SITES_ISOLATION: z.enum(['users', 'none']).optional(),
  LOG_LEVEL: z.string().default('info'),
});

function unixUser(name: string): { name: string; uid: number; gid: number } {
  try {
    const id = (flag: string) => Number(execFileSync('id', [flag, name], { encoding: 'utf8' }).trim());
    return { name, uid: id('-u'), gid: id('-g') };
  } catch {
    throw new ConfigError(`site user ${name} does not exist; create it with npm run host -- users --apply`);
  }
}

runMain(async () => {
  const env = parseEnv(Env);
  const logger = createLogger('sites', { level: env.LOG_LEVEL });
  const isolation = env.SITES_ISOLATION ?? (process.getuid?.() === 0 ? 'users' : 'none');
  if (isolation === 'users' && process.getuid?.() !== 0) throw new ConfigError('SITES_ISOLATION=users: the supervisor must run as root to start each site as its own user');
  const sites = loadTargets(env.TARGETS_FILE).map((t) => ({
    service: serviceNameOf(t),
    port: t.port,
    deployDir: join(env.DEPLOY_ROOT, t.deployPath),
    ...(t.siteDir ? { siteDir: t.siteDir } : {}),
    ...(isolation === 'users' ? { user: unixUser(siteUserOf(t)) } : {}),
  }));
  const supervisor = new Supervisor({
    sites,
    startCommand: env.SITE_START_COMMAND.split(' ').filter(Boolean),
    host: env.SITES_HOST,
    logger,
    readyTimeoutMs: env.SITE_READY_TIMEOUT_SECONDS * 1000,
    // No HOME of the supervisor's: a site reads nothing of it.
    env: { PATH: process.env.PATH, NODE_ENV: 'production' },
  });
  const server = await startControlServer(env.SITES_CONTROL_SOCKET, supervisor, logger);
  await supervisor.startAll();
  logger.info({ sites: sites.map((s) => s.service), socket: env.SITES_CONTROL_SOCKET }, 'sites supervisor ready');
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  server.close();
  await supervisor.stopAll();
});
