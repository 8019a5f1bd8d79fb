/**
 * `npm run worker`: the QC worker as its own process (for more throughput or isolation; the API
 * also runs one in-process unless WORKER_ENABLED=false). Needs DATABASE_URL; the same QC variables
 * as the API (docs/qc.md). SIGTERM/SIGINT let running jobs finish, then exit 0.
 * Exit codes: 0 stopped cleanly, 1 failed, 2 bad configuration.
 */
import { hostname } from 'node:os';
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
  if (process.argv.includes('--health')) {
    const probe = createPool(config.databaseUrl, { logger, max: 1 });
    try {
      const beating = await probe.query(
        `SELECT 1 FROM qc.worker_processes WHERE starts_with(id, $1::text) AND heartbeat_at > now() - make_interval(secs => $2::float8 / 1000)`,
        [`${hostname()}-`, config.worker.heartbeatMs * 3],
      );
      process.exitCode = beating.rowCount ? 0 : 1;
    } finally {
      await probe.end();
    }
    return;
  }
  const pool = createPool(config.databaseUrl, { logger, max: config.worker.concurrency + 3 });
  await migrate(pool, { logger });
  const worker = await startQcWorker({ pool, settings: config.exports, worker: config.worker, logger });
  stopOnSignals(logger, () => worker.stop().then(() => pool.end()));
});
