/**
 * `npm run api`: the feature API alone. Configuration from the environment (see config.ts);
 * SIGTERM/SIGINT drain in-flight requests, close the pool and exit 0.
 * Exit codes: 0 stopped cleanly, 1 failed, 2 bad configuration.
 */
import { runMain } from '../../shared/config.js';
import { createLogger } from '../../shared/logger.js';
import { startApi } from './boot.js';
import { loadApiConfig } from './config.js';
import { stopOnSignals } from '../../shared/shutdown.js';

runMain(async () => {
  const config = loadApiConfig();
  const logger = createLogger('api', { level: config.logLevel });
  const api = await startApi(config, logger);
  stopOnSignals(logger, () => api.close());
});
