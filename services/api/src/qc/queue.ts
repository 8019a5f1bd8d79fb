import { Logger as GraphileLogger, runMigrations } from 'graphile-worker';
import type pg from 'pg';
import type { Logger } from 'pino';

/**
 * What the API needs of graphile-worker without running the QC worker: its schema, which every API
 * process migrates at start (the QC routes queue jobs with graphile_worker.add_job), and its logging.
 * Apart from worker.ts so that boot.ts loads the worker (its tasks, exporters and mailer) only when
 * WORKER_ENABLED.
 */

/** graphile-worker's own schema (graphile_worker.*); safe to run from several processes at once. */
export async function migrateQueue(pool: pg.Pool, logger?: Logger): Promise<void> {
  await runMigrations({ pgPool: pool, ...(logger ? { logger: graphileLogger(logger) } : {}) });
}

/** graphile-worker's log lines as pino's, with the scope graphile names. */
export function graphileLogger(logger: Logger): GraphileLogger {
  return new GraphileLogger((scope) => (level, message, meta) => {
    const method = level === 'error' ? 'error' : level === 'warning' ? 'warn' : level === 'info' ? 'info' : 'debug';
    logger[method]({ graphile: scope, ...meta }, message);
  });
}
