import { run, type Runner } from 'graphile-worker';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { graphileLogger } from '../src/qc/queue.js';
import { graphileOptions } from '../src/qc/worker.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { prepareQueue, waitFor } from './qc-harness.js';

/**
 * The QC worker runs graphile-worker with options of its own (qc/worker.ts graphileOptions: batched
 * completion). A feature's exports rely on graphile's named queues running one job at a time, in order
 * (qc/states.ts EXPORT_QUEUES); graphile's localQueue broke that in 0.17.3 (graphile/worker#621). Here
 * graphile runs with the QC worker's options, 4 at once, a probe task in place of the QC tasks: jobs
 * of three named queues and jobs of none, all due at once. Every job of a named queue must start after
 * the one before it in that queue has ended, while jobs of different queues do run side by side.
 */
let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase();
  await prepareQueue(db);
  pool = new pg.Pool({ connectionString: db.url, max: 8 });
  pool.on('error', () => undefined);
});
afterAll(async () => {
  await pool?.end();
  await db?.close();
});

interface Probe {
  queue: string | null;
  n: number;
}

describe('graphile with the QC worker\'s options', () => {
  it('runs the jobs of one named queue one at a time, in order, and jobs of different queues side by side', async () => {
    const queues = ['exports:1', 'exports:2', 'exports:3'];
    const perQueue = 8;
    const specs: { queue: string | null; n: number }[] = [];
    for (let n = 0; n < perQueue; n++) {
      for (const queue of queues) specs.push({ queue, n });
      specs.push({ queue: null, n });
    }
    // One add_jobs call, all due, in order a millisecond apart: a fetch of several jobs finds several of each queue.
    await pool.query(
      `SELECT graphile_worker.add_jobs(array_agg(ROW('qc_probe', json_build_object('queue', s.queue, 'n', s.n), s.queue, now() - make_interval(secs => (1000 - s.i) / 1000.0), 1, NULL, NULL, NULL)::graphile_worker.job_spec ORDER BY s.i))
       FROM jsonb_to_recordset($1::jsonb) AS s(queue text, n int, i int)`,
      [JSON.stringify(specs.map((spec, i) => ({ ...spec, i })))],
    );

    const running = new Map<string, number>();
    let runningTotal = 0;
    let maxTotal = 0;
    const overlaps: string[] = [];
    const order = new Map<string, number[]>();
    let done = 0;
    const runner: Runner = await run({
      pgPool: pool,
      ...graphileOptions({ concurrency: 4, pollIntervalMs: 100, heartbeatMs: 500 }),
      logger: graphileLogger(pino({ level: 'silent' })),
      taskList: {
        async qc_probe(payload) {
          const { queue, n } = payload as Probe;
          runningTotal++;
          maxTotal = Math.max(maxTotal, runningTotal);
          if (queue !== null) {
            if ((running.get(queue) ?? 0) > 0) overlaps.push(`${queue} #${n}`);
            running.set(queue, (running.get(queue) ?? 0) + 1);
            order.set(queue, [...(order.get(queue) ?? []), n]);
          }
          // Long enough that a second job of the queue, if fetched with this one, starts before it ends.
          await new Promise((resolve) => setTimeout(resolve, 30));
          if (queue !== null) running.set(queue, running.get(queue)! - 1);
          runningTotal--;
          done++;
        },
      },
    });
    try {
      await waitFor('every probe job', async () => done === specs.length, 30_000);
    } finally {
      await runner.stop();
    }
    expect(overlaps).toEqual([]);
    for (const queue of queues) expect(order.get(queue)).toEqual(Array.from({ length: perQueue }, (_, n) => n));
    // Not a worker that ran one job at a time anyway.
    expect(maxTotal).toBeGreaterThanOrEqual(3);
    const { rows } = await pool.query<{ left: number }>(`SELECT count(*)::int AS left FROM graphile_worker._private_jobs`);
    expect(rows[0]!.left).toBe(0);
  });
});
