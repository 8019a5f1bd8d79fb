import { createServer } from 'node:http';
import { runMain } from '../../../services/shared/config.js';
import { closeGracefully, listen } from '../../../services/shared/http-server.js';
import { createLogger } from '../../../services/shared/logger.js';
import { createOryClients } from '../../../services/shared/ory/clients.js';
import { createIdentityApp } from './app.js';
import { loadIdentityAppConfig } from './config.js';
import { createLoginRateLimitPool, ensureLoginRateLimitTable, PostgresRateLimitStore } from './rate-limit-store.js';
import { stopOnSignals } from '../../../services/shared/shutdown.js';

/** `npm run identity`: the login/consent/logout app. Listens, drains on SIGTERM, nothing else. */
runMain(async () => {
  const config = loadIdentityAppConfig();
  const logger = createLogger('identity', { level: config.logLevel });
  const ory = createOryClients({ kratosPublicUrl: config.kratosPublicInternalUrl, kratosAdminUrl: config.kratosAdminUrl, hydraAdminUrl: config.hydraAdminUrl });
  // The login limits' counters: in the login database when there is one (shared by every replica),
  // else in this process. The table is made before the first request can count.
  const limitsDb = config.loginDatabaseUrl ? createLoginRateLimitPool(config.loginDatabaseUrl, logger) : undefined;
  if (limitsDb) await ensureLoginRateLimitTable(limitsDb);
  const rateLimitStore = limitsDb ? () => new PostgresRateLimitStore(limitsDb) : undefined;
  const server = createServer(createIdentityApp({ ory, config, logger, ...(rateLimitStore ? { rateLimitStore } : {}) }));
  const port = await listen(server, config.port);
  logger.info({ port, loginLimits: limitsDb ? 'postgresql' : 'memory' }, 'identity app listening');
  stopOnSignals(logger, async () => {
    await closeGracefully(server);
    await limitsDb?.end();
  });
});
