import { z } from 'zod';
import { parseEnv, runMain } from '../../services/shared/config.js';
import { listen } from '../../services/shared/http-server.js';
import { createLogger } from '../../services/shared/logger.js';
import { createEgressProxy } from './proxy.js';

/**
 * Entry point of the egress proxy container (proxy.ts). Exit codes: 0 stopped by a signal, 1 failure,
 * 2 bad environment.
 */
const destinations = z
  .string()
  .default('')
  .transform((v) => v.split(/[\s,]+/).filter(Boolean))
  .pipe(z.array(z.string().regex(/^[a-z0-9.-]+:\d{1,5}$/i, 'host:port')));

const Env = z.object({
  EGRESS_PORT: z.coerce.number().int().min(1).max(65535).default(3128),
  EGRESS_HOST: z.string().default('0.0.0.0'),
  /** Destinations anyone on a build network may reach: the package registry. */
  EGRESS_OPEN: destinations,
  /** Destinations only the builders' git fetch may reach (with EGRESS_GIT_TOKEN): the git hosts. */
  EGRESS_WITH_CREDENTIAL: destinations,
  EGRESS_GIT_TOKEN: z.string().min(16).optional(),
  LOG_LEVEL: z.string().default('info'),
});

runMain(async () => {
  const env = parseEnv(Env);
  const logger = createLogger('egress', { level: env.LOG_LEVEL });
  const server = createEgressProxy({ open: env.EGRESS_OPEN, withCredential: env.EGRESS_WITH_CREDENTIAL, ...(env.EGRESS_GIT_TOKEN ? { token: env.EGRESS_GIT_TOKEN } : {}), logger });
  const port = await listen(server, env.EGRESS_PORT, env.EGRESS_HOST);
  logger.info({ port, open: env.EGRESS_OPEN, withCredential: env.EGRESS_WITH_CREDENTIAL }, 'egress proxy listening');
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', () => resolve());
    process.once('SIGINT', () => resolve());
  });
  server.close();
  server.closeAllConnections();
});
