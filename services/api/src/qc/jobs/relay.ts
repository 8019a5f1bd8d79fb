import type { Logger } from 'pino';
import type { Queryable } from '../../db/pool.js';
import * as sql from '../queries.js';
import { JOB_TASKS, inExportQueue } from '../states.js';

/**
 * The outbox relay (migrations 015, 030): the jobs a transition, a re-run or a give-back put into
 * qc.job_outbox become graphile-worker jobs, one batch job per named queue and round (queries.ts
 * relayJobs; tasks.ts runJobBatch runs them). Each round is one statement (take outbox rows with SKIP
 * LOCKED and delete them, one add_jobs), so a job is relayed exactly once even with several workers
 * relaying at once, and a worker killed mid-round leaves its rows in the outbox for the next round.
 */
/** Jobs a round relays at most: a graphile batch job holds at most this many (tasks.ts runJobBatch). */
export const RELAY_LIMIT = 1000;
/** Every task, and whether its jobs go into their feature's export queue: what relayJobs groups by. */
export const RELAY_TASKS = JOB_TASKS.map((task) => ({ task, inQueue: inExportQueue(task) }));

/**
 * Removes the per-feature named queues of earlier releases (`osm_export:<feature id>`,
 * `wikibase_export:<feature id>`; states.ts EXPORT_QUEUES says why) once no job is in them: graphile
 * keeps a queue's row after its last job, and every job fetch locks each free one. Answers how many.
 */
export async function dropFeatureQueues(db: Queryable): Promise<number> {
  const { rowCount } = await db.query(
    `DELETE FROM graphile_worker._private_job_queues q
     WHERE q.locked_at IS NULL AND (starts_with(q.queue_name, 'osm_export:') OR starts_with(q.queue_name, 'wikibase_export:'))
       AND NOT EXISTS (SELECT 1 FROM graphile_worker._private_jobs j WHERE j.job_queue_id = q.id)`,
  );
  return rowCount ?? 0;
}

/**
 * A graphile pool holds locks only while it runs a job, and from its fetch to the attempt's start or
 * from the attempt's end to graphile's completion it holds them with no qc.jobs row `running` for it
 * (a few statements). A process killed in such a moment leaves no running row, so
 * releaseJobsOfDeadWorkers (worker.ts) cannot tell its pool, and graphile keeps the job and its named
 * queue locked for 4 hours — with a queue shared by 1/EXPORT_QUEUES of all features (states.ts), that
 * would hold up all their exports. So: locks a pool has held for LOST_POOL_AFTER_MS while no job of a
 * live process (qc.worker_processes beating) runs under it are released (force_unlock_workers).
 * Answers the pools released.
 */
export async function releaseLocksOfLostPools(db: Queryable, afterMs = LOST_POOL_AFTER_MS): Promise<string[]> {
  const { rows } = await db.query(
    `WITH held AS (
       SELECT locked_by AS pool FROM graphile_worker._private_jobs WHERE locked_at < now() - make_interval(secs => $1::float8 / 1000)
       UNION
       SELECT locked_by FROM graphile_worker._private_job_queues WHERE locked_at < now() - make_interval(secs => $1::float8 / 1000)
     ), lost AS (
       SELECT h.pool FROM held h
       WHERE NOT EXISTS (SELECT 1 FROM qc.jobs j JOIN qc.worker_processes p ON p.id = j.process_id
                         WHERE j.status = 'running' AND j.graphile_worker_id = h.pool
                           AND p.heartbeat_at > now() - make_interval(secs => $1::float8 / 1000))
     ), released AS (
       SELECT graphile_worker.force_unlock_workers(array_agg(pool)) FROM lost HAVING count(*) > 0
     )
     SELECT coalesce((SELECT array_agg(pool) FROM lost), '{}') AS pools FROM (SELECT count(*) FROM released) r`,
    [afterMs],
  );
  return (rows[0] as { pools: string[] }).pools;
}

/** Far longer than the few statements a live pool holds a lock without a running job, far shorter than graphile's 4 hours. */
const LOST_POOL_AFTER_MS = 5 * 60_000;

/** Relay every waiting outbox row; returns how many were relayed. */
export async function relayOutbox(db: Queryable, defaultMaxAttempts = 12): Promise<number> {
  let total = 0;
  for (;;) {
    const query = sql.relayJobs(RELAY_LIMIT, RELAY_TASKS, defaultMaxAttempts);
    const { rows } = await db.query(query.text, query.values);
    const round = rows[0] as { relayed: number; more: boolean };
    total += round.relayed;
    if (!round.more) return total;
  }
}

export interface Relay {
  /** Relay now (debounced with a round already running). */
  nudge(): void;
  stop(): Promise<void>;
}

/**
 * Relay every `intervalMs`, and at once when nudged; a failed round is logged and tried again. The
 * first round removes the per-feature queues of earlier releases first (dropFeatureQueues; one still
 * holding a job goes at the next start), and about once a minute a round releases what lost graphile
 * pools hold (releaseLocksOfLostPools).
 */
export function startRelay(db: Queryable, options: { intervalMs: number; logger: Logger }): Relay {
  let stopped = false;
  let first = true;
  let running: Promise<void> | null = null;
  let again = false;
  let timer: NodeJS.Timeout | undefined;
  let sweptAt = 0;
  const relayRound = async (): Promise<number> => {
    if (first) {
      first = false;
      const dropped = await dropFeatureQueues(db);
      if (dropped > 0) options.logger.info({ dropped }, 'removed the per-feature graphile queues of an earlier release');
    }
    // About once a minute, whatever the poll interval.
    if (Date.now() - sweptAt >= 60_000) {
      sweptAt = Date.now();
      const pools = await releaseLocksOfLostPools(db);
      if (pools.length > 0) options.logger.warn({ pools }, 'released the graphile locks of a worker process that stopped between a job fetch and its attempt');
    }
    return relayOutbox(db);
  };
  const round = (): void => {
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    clearTimeout(timer);
    running = relayRound()
      .then((count) => {
        if (count > 0) options.logger.debug({ count }, 'relayed QC jobs to the queue');
      })
      .catch((error: unknown) => options.logger.warn({ err: error }, 'relaying QC jobs failed; tried again'))
      .finally(() => {
        running = null;
        if (stopped) return;
        if (again) {
          again = false;
          round();
          return;
        }
        timer = setTimeout(round, options.intervalMs);
        timer.unref();
      });
  };
  round();
  return {
    nudge: round,
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}
