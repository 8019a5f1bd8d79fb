import { z } from 'zod';
import { parseEnv, runMain } from '../../services/shared/config.js';
import { createLogger } from '../../services/shared/logger.js';
import { DEFAULT_SOCKET } from './protocol.js';
import { siteEnvOf } from './site-env.js';
import { startControlServer, Supervisor } from './supervisor.js';

/**
 * Entry point of a site container: one deploy target's site under the supervisor, restartable by that
 * target's builder through the control socket (protocol.ts). The container runs as the target's site
 * user with no capabilities, so nothing here switches users: the site runs as the supervisor does.
 * Configured by environment alone (a read-only container takes no uploaded files). The site itself gets
 * none of the supervisor's environment: only PATH, NODE_ENV, HOME, PORT, HOST and what the stack
 * declares for it as `SITE_ENV_<NAME>` (passed on as `<NAME>`: the web app's API and sign-in URLs).
 * Exit codes: 0 stopped by a signal, 1 failure, 2 bad environment.
 */
const Env = z.object({
  /** The target's service name (serviceNameOf in services/shared/targets.ts), e.g. astro-main. */
  SITE_SERVICE: z.string().regex(/^astro-[a-z0-9._-]+$/i, 'a site service name such as astro-main'),
  SITE_PORT: z.coerce.number().int().min(1024).max(65535),
  /** The target's deploy directory; the site runs in <SITE_DEPLOY_DIR>/live[/<SITE_DIR>]. */
  SITE_DEPLOY_DIR: z.string().min(1),
  SITE_DIR: z.string().regex(/^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/, 'a relative folder such as services/web').optional(),
  SITES_CONTROL_SOCKET: z.string().min(1).default(DEFAULT_SOCKET),
  SITES_HOST: z.string().default('0.0.0.0'),
  SITE_START_COMMAND: z.string().min(1).default('npm start'),
  SITE_READY_TIMEOUT_SECONDS: z.coerce.number().int().positive().default(30),
  LOG_LEVEL: z.string().default('info'),
});

runMain(async () => {
  const env = parseEnv(Env);
  const siteEnv = siteEnvOf(process.env);
  const logger = createLogger('site', { level: env.LOG_LEVEL });
  const site = { service: env.SITE_SERVICE, port: env.SITE_PORT, deployDir: env.SITE_DEPLOY_DIR, ...(env.SITE_DIR ? { siteDir: env.SITE_DIR } : {}) };
  const supervisor = new Supervisor({
    sites: [site],
    startCommand: env.SITE_START_COMMAND.split(' ').filter(Boolean),
    host: env.SITES_HOST,
    logger,
    readyTimeoutMs: env.SITE_READY_TIMEOUT_SECONDS * 1000,
    // The site's whole environment: nothing of the supervisor's. HOME on the container's tmpfs (npm writes logs there).
    env: { ...siteEnv, PATH: process.env.PATH, NODE_ENV: 'production', HOME: process.env.HOME ?? '/tmp' },
  });
  const server = await startControlServer(env.SITES_CONTROL_SOCKET, supervisor, logger);
  await supervisor.startAll();
  logger.info({ site: site.service, port: site.port, socket: env.SITES_CONTROL_SOCKET }, 'site supervisor ready');
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  server.close();
  await supervisor.stopAll();
});
