import type { Logger } from 'pino';
import type { Queryable } from '../../db/pool.js';
import * as sql from '../queries.js';
import { JOB_TASKS, TASK_IDENTIFIERS, inExportQueue } from '../states.js';

/**
 * The outbox relay (migration 015): qc.jobs rows written by a transition become graphile-worker jobs.
 * Each round is one statement (claim with SKIP LOCKED, mark relayed, one add_jobs), so a row is
 * relayed exactly once even with several workers relaying at once, and a worker killed mid-round
 * leaves its rows unrelayed for the next round.
 */
const RELAY_LIMIT = 500;
const TASKS = JOB_TASKS.map((task) => ({ task, identifier: TASK_IDENTIFIERS[task], inQueue: inExportQueue(task) }));

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

/** Relay every waiting outbox row; returns how many were relayed. */
export async function relayOutbox(db: Queryable, defaultMaxAttempts = 12): Promise<number> {
  let total = 0;
  for (;;) {
    const query = sql.relayJobs(RELAY_LIMIT, TASKS, defaultMaxAttempts);
    const { rows } = await db.query(query.text, query.values);
    const relayed = (rows[0] as { relayed: number }).relayed;
    total += relayed;
    if (relayed < RELAY_LIMIT) return total;
  }
}

export interface Relay {
  /** Relay now (debounced with a round already running). */
  nudge(): void;
  stop(): Promise<void>;
}

/**
 * Relay every `intervalMs`, and at once when nudged; a failed round is logged and tried again. The
 * first round removes the per-feature queues of earlier releases first (dropFeatureQueues); one
 * still holding a job then goes at the next start.
 */
export function startRelay(db: Queryable, options: { intervalMs: number; logger: Logger }): Relay {
  let stopped = false;
  let first = true;
  let running: Promise<void> | null = null;
  let again = false;
  let timer: NodeJS.Timeout | undefined;
  const relayRound = async (): Promise<number> => {
    if (first) {
      first = false;
      const dropped = await dropFeatureQueues(db);
      if (dropped > 0) options.logger.info({ dropped }, 'removed the per-feature graphile queues of an earlier release');
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
