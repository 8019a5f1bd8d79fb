/**
 * `npm run worker`: the QC worker as its own process (for more throughput or isolation; the API
 * also runs one in-process unless WORKER_ENABLED=false). Needs DATABASE_URL; the same QC variables
 * as the API (docs/qc.md). SIGTERM/SIGINT let running jobs finish, then exit 0.
 * Exit codes: 0 stopped cleanly, 1 failed, 2 bad configuration.
 */
import { ConfigError, runMain } from '../../../shared/config.js';
import { createLogger } from '../../../shared/logger.js';
import { loadWorkerConfig } from '../config.js';
import { migrate } from '../db/migrate.js';
import { createPool } from '../db/pool.js';
import { startQcWorker } from './worker.js';
import { stopOnSignals } from '../../../shared/shutdown.js';

runMain(async () => {
  const config = loadWorkerConfig();
  if (!config.databaseUrl) throw new ConfigError('DATABASE_URL: required for the stand-alone worker (the embedded database belongs to the API process)');
  const logger = createLogger('qc-worker', { level: config.logLevel });
  const pool = createPool(config.databaseUrl, { logger, max: config.worker.concurrency + 3 });
  await migrate(pool, { logger });
  const worker = await startQcWorker({ pool, settings: config.exports, worker: config.worker, logger });
  stopOnSignals(logger, () => worker.stop().then(() => pool.end()));
});
