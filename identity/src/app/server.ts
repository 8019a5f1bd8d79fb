import { createServer } from 'node:http';
import { runMain } from '../../../services/shared/config.js';
import { closeGracefully, listen } from '../../../services/shared/http-server.js';
import { createLogger } from '../../../services/shared/logger.js';
import { createOryClients } from '../../../services/shared/ory/clients.js';
import { createIdentityApp } from './app.js';
import { loadIdentityAppConfig } from './config.js';
import { stopOnSignals } from '../../../services/shared/shutdown.js';

/** `npm run identity`: the login/consent/logout app. Listens, drains on SIGTERM, nothing else. */
runMain(async () => {
  const config = loadIdentityAppConfig();
  const logger = createLogger('identity', { level: config.logLevel });
  const ory = createOryClients({ kratosPublicUrl: config.kratosPublicInternalUrl, kratosAdminUrl: config.kratosAdminUrl, hydraAdminUrl: config.hydraAdminUrl });
  const server = createServer(createIdentityApp({ ory, config, logger }));
  const port = await listen(server, config.port);
  logger.info({ port }, 'identity app listening');
  stopOnSignals(logger, () => closeGracefully(server));
});
