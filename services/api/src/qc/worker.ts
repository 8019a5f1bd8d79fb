import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { run, type Runner, type RunnerOptions } from 'graphile-worker';
import type { Logger } from 'pino';
import { withTransaction, type Db } from '../db/pool.js';
import type { ExportsSettings } from '../exports/config.js';
import { startNoticeMailer } from '../notifications/contributor-notice.js';
import { createSmtpMailer, type Mailer } from '../notifications/mailer.js';
import { relayOutbox, startRelay, type Relay } from './jobs/relay.js';
import { queueForRelay } from './queries.js';
import { graphileLogger, migrateQueue } from './queue.js';
import { qcTaskList } from './jobs/tasks.js';

/**
 * The QC worker: graphile-worker running the side-effect tasks, in the API process (WORKER_ENABLED)
 * or on its own (`npm run worker`).
 *
 * Crash recovery: graphile-worker keeps a job locked by a worker that died for 4 hours. Every worker
 * process therefore registers in qc.worker_processes and beats a heartbeat; a job left `running` by a
 * process whose heartbeat is older than 3 beats is unlocked (graphile_worker.force_unlock_workers)
 * and runs again at once. The exporters' journals make that re-run recover, not repeat, an export
 * the remote side had already accepted.
 */
export interface WorkerSettings {
  concurrency: number;
  pollIntervalMs: number;
  heartbeatMs: number;
  /** graphile's batched completion (graphileOptions); on unless false. Off only to measure against (bench/). */
  batching?: boolean;
}

/**
 * How the QC worker runs graphile-worker (startQcWorker; qc-queue-batching.test.ts runs graphile with
 * the same options to check that a named queue's jobs still run one at a time, in order).
 *
 * Batched completion: the completions of the jobs that end within COMPLETE_JOB_BATCH_DELAY_MS go to the
 * database in one statement (graphile's `completeJobBatchDelay`); a stop flushes them. A job's
 * completion, and the unlock of its named queue, come up to that much later. A worker killed in between
 * leaves the job locked with its outcome recorded: handed back with the process's running jobs, or
 * else after relay.ts LOST_POOL_AFTER_MS, it runs again, finds the outcome and does nothing.
 *
 * Not set: graphile's `localQueue` (one fetch locking several jobs for the pool). In 0.17.3 it runs
 * jobs of one named queue side by side (graphile/worker#621). 0.18.0 fixes that (#622: a fetch keeps
 * the first job of each named queue) but needs Node 22; with the fix applied here the local queue took
 * a fetch cut down to fewer jobs than its size for an empty database and waited for the next poll, so
 * the QC jobs, whose export queues hold a feature's Wikibase export behind its OSM export, drained
 * about 50 times slower and cost more CPU (docs/api.md "An approval with its jobs").
 */
export function graphileOptions(worker: WorkerSettings): Pick<RunnerOptions, 'concurrency' | 'pollInterval' | 'noHandleSignals' | 'noPreparedStatements' | 'crontab' | 'preset'> {
  return {
    concurrency: worker.concurrency,
    pollInterval: worker.pollIntervalMs,
    noHandleSignals: true,
    // graphile's statements (the job fetch above all) go as named prepared statements, planned once per
    // connection: the embedded database gives each connection its own names (db/pglite-server.ts), and
    // the Kubernetes target's PgBouncer runs in session mode (infra/k8s/postgres.ts).
    noPreparedStatements: false,
    crontab: '',
    ...(worker.batching === false ? {} : { preset: { worker: { completeJobBatchDelay: COMPLETE_JOB_BATCH_DELAY_MS } } }),
  };
}

/**
 * Long enough to gather the completions of the jobs a worker of concurrency 2–4 ends at about the same
 * time (100 ms measured no better), short enough not to hold up the next job of a named queue.
 */
const COMPLETE_JOB_BATCH_DELAY_MS = 20;

export interface QcWorkerDeps {
  /** A pool of its own: graphile holds one connection for LISTEN and one per concurrent job. */
  pool: Db;
  settings: ExportsSettings;
  worker: WorkerSettings;
  logger: Logger;
  /** Injected by tests; by default from SMTP_URL. */
  mailer?: Mailer | null;
}

export interface QcWorker {
  processId: string;
  /** Relay the outbox now (qc.jobs rows written by transitions → graphile jobs); it also runs every poll interval. */
  relayNow(): void;
  /** Graceful: running jobs finish (graphile's abort after its timeout), then the process unregisters. */
  stop(): Promise<void>;
}

export { relayOutbox };

export async function startQcWorker(deps: QcWorkerDeps): Promise<QcWorker> {
  const { pool, logger } = deps;
  const processId = `${hostname()}-${process.pid}-${randomBytes(4).toString('hex')}`;
  const log = logger.child({ worker: processId });
  // A connection lost while idle in graphile's hands must not crash the process; the pool replaces it.
  pool.on('connect', (client) => client.on('error', (error) => log.warn({ err: error }, 'QC worker database connection failed')));
  await migrateQueue(pool, log);
  await pool.query(`INSERT INTO qc.worker_processes (id) VALUES ($1::text)`, [processId]);

  const beat = async () => {
    await pool.query(`UPDATE qc.worker_processes SET heartbeat_at = now() WHERE id = $1::text`, [processId]);
    await releaseJobsOfDeadWorkers(pool, processId, deps.worker.heartbeatMs * 3, log);
  };
  await beat();
  let beating: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    beating = beat().catch((error: unknown) => log.warn({ err: error }, 'QC worker heartbeat failed'));
  }, deps.worker.heartbeatMs);
  timer.unref();

  const mailer = deps.mailer === undefined ? createSmtpMailer(deps.settings.mail, deps.settings.httpTimeoutMs) : deps.mailer;
  let runner: Runner;
  try {
    runner = await run({
      pgPool: pool,
      ...graphileOptions(deps.worker),
      logger: graphileLogger(log),
      taskList: qcTaskList({
        db: pool,
        settings: deps.settings,
        mailer,
        logger: log,
        processId,
      }),
    });
  } catch (error) {
    clearInterval(timer);
    throw error;
  }
  // The outbox relay: transitions write qc.jobs rows only; this turns them into graphile jobs.
  const relay: Relay = startRelay(pool, { intervalMs: deps.worker.pollIntervalMs, logger: log });
  // Contributors' e-mails about decisions on their submissions (qc.notices, migration 022).
  const notices = startNoticeMailer(pool, mailer, { intervalMs: deps.worker.pollIntervalMs, reviewLink: deps.settings.reviewers.reviewLink, logger: log });
  log.info({ concurrency: deps.worker.concurrency }, 'QC worker started');

  return {
    processId,
    relayNow: () => relay.nudge(),
    async stop() {
      clearInterval(timer);
      await relay.stop();
      await notices.stop();
      await beating;
      await runner.stop();
      await pool.query(`DELETE FROM qc.worker_processes WHERE id = $1::text`, [processId]).catch(() => undefined);
      log.info('QC worker stopped');
    },
  };
}

/** Hand jobs of processes that stopped beating back to the queue; returns how many. */
export async function releaseJobsOfDeadWorkers(pool: Db, self: string, staleMs: number, logger?: Logger): Promise<number> {
  // One transaction: a job is marked for a re-run exactly when graphile's lock on it is released.
  const { workerIds, count } = await withTransaction(pool, async (client) => {
    const { rows } = await client.query(
    `WITH dead AS (
       SELECT j.id, j.graphile_worker_id FROM qc.jobs j
       LEFT JOIN qc.worker_processes p ON p.id = j.process_id
       WHERE j.status = 'running' AND j.process_id IS DISTINCT FROM $1::text
         AND (p.id IS NULL OR p.heartbeat_at < now() - make_interval(secs => $2::float8 / 1000))
       FOR UPDATE OF j SKIP LOCKED
     ), released AS (
       UPDATE qc.jobs j SET status = 'retrying', last_error = 'the worker process stopped during the attempt', process_id = NULL,
              updated_at = clock_timestamp()
       FROM dead WHERE j.id = dead.id
       RETURNING j.id, j.batch_id, dead.graphile_worker_id
     ), outbox AS (
       -- A row claimed into an OSM batch by another job's graphile job has none of its own held:
       -- back into the outbox, so the relay queues it again (it reads its journal first).
       ${queueForRelay('(SELECT id FROM released WHERE batch_id IS NOT NULL AND graphile_worker_id IS NULL)')}
     )
     SELECT coalesce(array_agg(DISTINCT graphile_worker_id) FILTER (WHERE graphile_worker_id IS NOT NULL), '{}') AS "workerIds",
            count(*)::int AS count FROM released`,
    [self, staleMs],
    );
    const released = rows[0] as { workerIds: string[]; count: number };
    if (released.workerIds.length > 0) await client.query(`SELECT graphile_worker.force_unlock_workers($1::text[])`, [released.workerIds]);
    return released;
  });
  await pool.query(`DELETE FROM qc.worker_processes WHERE heartbeat_at < now() - make_interval(secs => $1::float8 / 1000) * 10`, [staleMs]);
  if (count > 0) logger?.warn({ jobs: count, workerIds }, 'released QC jobs of a worker process that stopped');
  return count;
}
