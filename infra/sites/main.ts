import { join } from 'node:path';
import { z } from 'zod';
import { parseEnv, runMain } from '../../services/shared/config.js';
import { createLogger } from '../../services/shared/logger.js';
import { loadTargets, serviceNameOf } from '../../services/shared/targets.js';
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
  LOG_LEVEL: z.string().default('info'),
});

runMain(async () => {
  const env = parseEnv(Env);
  const logger = createLogger('sites', { level: env.LOG_LEVEL });
  const sites = loadTargets(env.TARGETS_FILE).map((t) => ({ service: serviceNameOf(t), port: t.port, deployDir: join(env.DEPLOY_ROOT, t.deployPath) }));
  const supervisor = new Supervisor({
    sites,
    startCommand: env.SITE_START_COMMAND.split(' ').filter(Boolean),
    host: env.SITES_HOST,
    logger,
    readyTimeoutMs: env.SITE_READY_TIMEOUT_SECONDS * 1000,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, NODE_ENV: 'production' },
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
