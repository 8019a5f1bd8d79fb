import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Principal } from '../../shared/principal.js';
import { ATTEMPT_STATEMENTS } from '../src/qc/jobs/context.js';
import { dropFeatureQueues, RELAY_TASKS, relayOutbox, releaseLocksOfLostPools } from '../src/qc/jobs/relay.js';
import { createQcService } from '../src/qc/service.js';
import * as sql from '../src/qc/queries.js';
import { EXPORT_QUEUES } from '../src/qc/states.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { prepareQueue } from './qc-harness.js';

/**
 * The graphile named queues of the QC exports (qc/states.ts EXPORT_QUEUES): as few as graphile's job
 * fetch can afford to lock, one per feature's exports in approval order, and never left locked by a
 * worker process that is gone.
 */
let db: TestDatabase;
const reviewer: Principal = { id: 'queue-reviewer', role: 'reviewer', via: 'jwt', name: 'Queue Reviewer' };

beforeAll(async () => {
  db = await createTestDatabase();
  await prepareQueue(db);
});
afterAll(async () => {
  await db?.close();
});

/** `count` features submitted for review, ids `prefix` + n. */
async function submitted(prefix: string, count: number): Promise<string[]> {
  await db.pool.query(
    `INSERT INTO features.features (id, name, kategorie, geom)
     SELECT $1::text || i, 'Queue ' || i, 'friedhof', ST_SetSRID(ST_MakePoint(13 + i * 0.01, 52), 4326) FROM generate_series(1, $2::int) AS i`,
    [prefix, count],
  );
  await db.pool.query(`UPDATE features.features SET status = 'in_qc' WHERE starts_with(id, $1::text)`, [prefix]);
  await db.pool.query(
    `INSERT INTO qc.transitions (feature_id, action, from_status, to_status, version, actor)
     SELECT id, 'submit', 'draft', 'in_qc', version, 'queue-submitter' FROM features.features WHERE starts_with(id, $1::text)`,
    [prefix],
  );
  return Array.from({ length: count }, (_, i) => `${prefix}${i + 1}`);
}

/** A graphile job in `queue`, locked by `pool` since `minutesAgo`, its queue too. */
async function lockedJob(queue: string, pool: string, minutesAgo: number, payload: Record<string, unknown> = {}): Promise<string> {
  const { rows } = await db.pool.query<{ id: string }>(`SELECT id FROM graphile_worker.add_job('qc_agency_notice', $1::json, queue_name => $2::text)`, [JSON.stringify(payload), queue]);
  const at = `now() - make_interval(mins => ${Number(minutesAgo)})`;
  await db.pool.query(`UPDATE graphile_worker._private_jobs SET locked_by = $2::text, locked_at = ${at} WHERE id = $1::bigint`, [rows[0]!.id, pool]);
  await db.pool.query(`UPDATE graphile_worker._private_job_queues SET locked_by = $2::text, locked_at = ${at} WHERE queue_name = $1::text`, [queue, pool]);
  return rows[0]!.id;
}

const lockOf = async (jobId: string) =>
  (await db.pool.query<{ job: string | null; queue: string | null }>(
    `SELECT j.locked_by AS job, q.locked_by AS queue FROM graphile_worker._private_jobs j LEFT JOIN graphile_worker._private_job_queues q ON q.id = j.job_queue_id WHERE j.id = $1::bigint`,
    [jobId],
  )).rows[0];

describe('the QC export queues', () => {
  it('100 approvals use at most EXPORT_QUEUES queues; a feature\'s OSM and Wikibase export share one, OSM first; the agency notice is in none', async () => {
    const service = createQcService(db.pool, { maxAttempts: 12 });
    const ids = await submitted('qq-', 100);
    for (const id of ids) await service.approve(reviewer, id, null);
    expect(await relayOutbox(db.pool)).toBe(300);
    // One graphile batch job per named queue; its entries in id order.
    const { rows } = await db.pool.query<{ featureId: string; task: string; queue: string | null; graphileJob: string }>(
      `SELECT q.feature_id AS "featureId", q.task, jq.queue_name AS queue, j.id AS "graphileJob"
       FROM graphile_worker._private_jobs j CROSS JOIN LATERAL json_array_elements(j.payload) WITH ORDINALITY AS e(entry, n)
       JOIN qc.jobs q ON q.id = (e.entry->>'jobId')::bigint
       LEFT JOIN graphile_worker._private_job_queues jq ON jq.id = j.job_queue_id
       WHERE starts_with(q.feature_id, 'qq-') ORDER BY j.run_at, j.id, e.n`,
    );
    expect(rows).toHaveLength(300);
    expect(new Set(rows.map((r) => r.graphileJob)).size).toBe(new Set(rows.map((r) => r.queue)).size);
    const queues = new Set(rows.map((r) => r.queue).filter((q) => q !== null));
    expect(queues.size).toBeGreaterThan(EXPORT_QUEUES / 2);
    expect(queues.size).toBeLessThanOrEqual(EXPORT_QUEUES);
    for (const q of queues) expect(q).toMatch(/^exports:\d+$/);
    expect(rows.filter((r) => r.task === 'agency_notice').every((r) => r.queue === null)).toBe(true);
    for (const id of ids) {
      const mine = rows.filter((r) => r.featureId === id && r.task !== 'agency_notice');
      expect(mine.map((r) => r.task)).toEqual(['osm_export', 'wikibase_export']);
      expect(mine[0]!.queue).toBe(mine[1]!.queue);
    }
  });

  it('the empty per-feature queues of an earlier release are dropped; one still holding a job, and the export queues, stay', async () => {
    await db.pool.query(`INSERT INTO graphile_worker._private_job_queues (queue_name) VALUES ('osm_export:old-1'), ('wikibase_export:old-2'), ('exports:7') ON CONFLICT DO NOTHING`);
    await db.pool.query(`SELECT graphile_worker.add_job('qc_osm_export', '{"jobId": 0}'::json, queue_name => 'osm_export:old-3')`);
    expect(await dropFeatureQueues(db.pool)).toBe(2);
    const { rows } = await db.pool.query<{ name: string }>(`SELECT queue_name AS name FROM graphile_worker._private_job_queues WHERE queue_name IN ('osm_export:old-1', 'wikibase_export:old-2', 'osm_export:old-3', 'exports:7') ORDER BY 1`);
    expect(rows.map((r) => r.name)).toEqual(['exports:7', 'osm_export:old-3']);
  });

  it('what a pool that is gone holds without a running job is released after five minutes; a live worker\'s running job, and a recent lock, are kept', async () => {
    const lost = await lockedJob('exports:1', 'pool-lost', 6);
    const recent = await lockedJob('exports:2', 'pool-recent', 1);
    // A live worker process (beating) running a job under its pool since six minutes.
    const [featureId] = await submitted('ql-', 1);
    await db.pool.query(`INSERT INTO qc.worker_processes (id) VALUES ('live-process')`);
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO qc.jobs (transition_id, feature_id, version, task, status, process_id, graphile_worker_id)
       SELECT t.id, t.feature_id, t.version, 'osm_export', 'running', 'live-process', 'pool-live' FROM qc.transitions t WHERE t.feature_id = $1::text
       RETURNING id`,
      [featureId],
    );
    const live = await lockedJob('exports:3', 'pool-live', 6, { jobId: Number(rows[0]!.id) });

    expect(await releaseLocksOfLostPools(db.pool)).toEqual(['pool-lost']);
    expect(await lockOf(lost)).toEqual({ job: null, queue: null });
    expect(await lockOf(recent)).toEqual({ job: 'pool-recent', queue: 'pool-recent' });
    expect(await lockOf(live)).toEqual({ job: 'pool-live', queue: 'pool-live' });

    // The live process stops beating: its pool's locks go too.
    await db.pool.query(`UPDATE qc.worker_processes SET heartbeat_at = now() - interval '6 minutes' WHERE id = 'live-process'`);
    expect(await releaseLocksOfLostPools(db.pool)).toEqual(['pool-live']);
    expect(await lockOf(live)).toEqual({ job: null, queue: null });
  });
});

describe('the outbox (qc.job_outbox, migration 030)', () => {
  /** One relay round of at most `limit` jobs: what it relayed, and the QC job ids of the graphile jobs it added. */
  const round = async (limit: number) => {
    const before = Number((await db.pool.query<{ max: string | null }>(`SELECT max(id) FROM graphile_worker._private_jobs`)).rows[0]!.max ?? 0);
    const query = sql.relayJobs(limit, RELAY_TASKS, 12);
    const { relayed, more } = (await db.pool.query<{ relayed: number; more: boolean }>(query.text, query.values)).rows[0]!;
    const { rows } = await db.pool.query<{ jobId: string }>(
      `SELECT (e.entry->>'jobId') AS "jobId" FROM graphile_worker._private_jobs j CROSS JOIN LATERAL json_array_elements(j.payload) AS e(entry) WHERE j.id > $1::bigint`,
      [before],
    );
    return { relayed, more, jobIds: rows.map((r) => Number(r.jobId)).sort((a, b) => a - b) };
  };

  it('an approval queues one outbox row naming its jobs; a round takes whole rows, oldest first, up to its limit of jobs, and deletes them; the rest wait for the next', async () => {
    await relayOutbox(db.pool);
    const service = createQcService(db.pool, { maxAttempts: 12 });
    const jobsOf: number[][] = [];
    for (const id of await submitted('qo-', 3)) jobsOf.push((await service.approve(reviewer, id, null)).jobs.map((j) => j.id));
    const { rows: outbox } = await db.pool.query<{ jobIds: number[] }>(`SELECT job_ids::int[] AS "jobIds" FROM qc.job_outbox ORDER BY id`);
    expect(outbox.map((r) => r.jobIds)).toEqual(jobsOf);
    // The row versions of the jobs (xmin: the transaction that wrote each), to show the relay never writes them.
    const versions = async () => (await db.pool.query(`SELECT id, status, xmin::text FROM qc.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`, [jobsOf.flat()])).rows;
    const written = await versions();
    expect(new Set(written.map((r) => r.status))).toEqual(new Set(['queued']));
    // A limit of 4 jobs: the first row (3 jobs) fits, the second would not.
    expect(await round(4)).toEqual({ relayed: 3, more: true, jobIds: jobsOf[0] });
    expect(await round(7)).toEqual({ relayed: 6, more: false, jobIds: [...jobsOf[1]!, ...jobsOf[2]!] });
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM qc.job_outbox`)).rows[0].n).toBe(0);
    expect(await round(1000)).toEqual({ relayed: 0, more: false, jobIds: [] });
    // The job rows are only read: the same row versions as the approval wrote.
    expect(await versions()).toEqual(written);
  });

  it('a job queued by a release before 030 (relayed_at NULL, no outbox row; while an upgrade rolls) is relayed too, once, and marked relayed', async () => {
    await relayOutbox(db.pool);
    const [featureId] = await submitted('qlegacy-', 1);
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO qc.jobs (transition_id, feature_id, version, task, max_attempts)
       SELECT t.id, t.feature_id, t.version, 'reviewer_notice', 12 FROM qc.transitions t WHERE t.feature_id = $1::text RETURNING id`,
      [featureId],
    );
    const legacy = Number(rows[0]!.id);
    expect(await round(1000)).toEqual({ relayed: 1, more: true, jobIds: [legacy] });
    expect(await round(1000)).toEqual({ relayed: 0, more: false, jobIds: [] });
    expect((await db.pool.query(`SELECT relayed_at IS NOT NULL AS marked FROM qc.jobs WHERE id = $1::bigint`, [legacy])).rows).toEqual([{ marked: true }]);
  });
});

describe('an attempt\'s two statements (qc/jobs/context.ts)', () => {
  /** Every plan node that reads qc.jobs as `j` (the batch's own jobs), as "node type on index". */
  const readsOfJobs = (plan: Record<string, unknown>): string[] => {
    const found: string[] = [];
    const stack = [plan];
    for (let node = stack.pop(); node; node = stack.pop()) {
      const reads = node['Relation Name'] === 'jobs' && node['Alias'] === 'j';
      // A bitmap heap scan names its index on its child (the update itself, ModifyTable, reads nothing).
      if (reads && node['Node Type'] === 'Bitmap Heap Scan') found.push(...((node['Plans'] as Record<string, unknown>[]) ?? []).map((c) => `${String(c['Node Type'])} on ${String(c['Index Name'] ?? '-')}`));
      else if (reads && node['Node Type'] !== 'ModifyTable') found.push(`${String(node['Node Type'])} on ${String(node['Index Name'] ?? '-')}`);
      stack.push(...(((node['Plans'] as Record<string, unknown>[] | undefined) ?? [])));
    }
    return found;
  };

  it('start and finish read their jobs by the primary key, however many jobs wait or are done (generic plans: not the status index, not the table)', async () => {
    const [featureId] = await submitted('qplan-', 1);
    // 3 000 jobs waiting and 3 000 done, then the batch of 20 waiting ones an attempt starts and finishes.
    await db.pool.query(
      `INSERT INTO qc.jobs (transition_id, feature_id, version, task, max_attempts, status, relayed_at)
       SELECT t.id, t.feature_id, t.version, 'agency_notice', 12, CASE WHEN i % 2 = 0 THEN 'queued' ELSE 'skipped' END, now()
       FROM qc.transitions t CROSS JOIN generate_series(1, 6000) AS i WHERE t.feature_id = $1::text`,
      [featureId],
    );
    const { rows } = await db.pool.query<{ id: string }>(`SELECT id FROM qc.jobs WHERE feature_id = $1::text AND status = 'queued' ORDER BY id LIMIT 20`, [featureId]);
    const batch = rows.map((r) => Number(r.id));
    const client = await db.pool.connect();
    try {
      await client.query('ANALYZE qc.jobs');
      await client.query('BEGIN');
      // What a connection runs after its first executions of a named statement (and at once with PGlite's defaults).
      await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
      await client.query(`PREPARE qplan_start(bigint[], text, text, boolean) AS ${ATTEMPT_STATEMENTS.start}`);
      await client.query(`PREPARE qplan_finish(jsonb) AS ${ATTEMPT_STATEMENTS.finish}`);
      // EXPLAIN takes no bind parameters: the values as literals.
      const planOf = async (execute: string) => ((await client.query(`EXPLAIN (FORMAT JSON) ${execute}`)).rows[0]['QUERY PLAN'][0].Plan as Record<string, unknown>);
      const start = readsOfJobs(await planOf(`EXECUTE qplan_start('{${batch.join(',')}}', 'p', 'w', false)`));
      const finish = readsOfJobs(await planOf(`EXECUTE qplan_finish(${client.escapeLiteral(JSON.stringify(batch.map((id) => ({ id, status: 'skipped' }))))})`));
      expect(start.length).toBeGreaterThan(0);
      expect(finish.length).toBeGreaterThan(0);
      for (const read of [...start, ...finish]) expect(read).toMatch(/jobs_pkey$/);
    } finally {
      await client.query('ROLLBACK').catch(() => undefined);
      await client.query('DEALLOCATE ALL').catch(() => undefined);
      client.release();
    }
  });
});
