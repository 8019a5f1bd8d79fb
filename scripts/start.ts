/**
 * `npm start`: the platform locally. With DATABASE_URL unset the API runs on the embedded PGlite +
 * PostGIS database in DATA_DIR/pglite (created and migrated on first start). Prints the URLs and how
 * long the start took; Ctrl-C (SIGINT) or SIGTERM stops everything cleanly.
 * Exit codes: 0 stopped cleanly, 1 failed, 2 bad configuration.
 */
import { runMain } from '../services/shared/config.js';
import { createLogger } from '../services/shared/logger.js';
import { startApi } from '../services/api/src/boot.js';
import { loadApiConfig } from '../services/api/src/config.js';

runMain(async () => {
  const started = performance.now();
  const config = loadApiConfig();
  const logger = createLogger('platform', { level: config.logLevel });
  const api = await startApi(config, logger.child({ component: 'api' }));
  const readyMs = Math.round(performance.now() - started);
  logger.info({ readyMs, api: `http://localhost:${api.port}/api/features`, docs: `http://localhost:${api.port}/api/docs/` }, 'platform ready');

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'stopping');
    api.close().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, 'stop failed');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
});
