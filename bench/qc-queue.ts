/**
 * The QC benchmarks' data sets and set-up:
 * - the review desk's queue of features in_qc with their submit transitions (seedQueue,
 *   reportDecisionToNext), shared by qc-desk.bench.ts (API level) and qc-desk-web.bench.ts (browser);
 * - the approvals' (seedSubmissions, approveWithoutQueue, inFlight), shared by qc.bench.ts and
 *   growth.bench.ts, so both compare the QC service against the same baseline.
 */
import type pg from 'pg';
import { query, withTransaction } from '../services/api/src/db/pool.js';
import { noticeOfDecision } from '../services/api/src/qc/notices.js';
import * as qcSql from '../services/api/src/qc/queries.js';
import type { Principal } from '../services/shared/principal.js';
import { median, percentile, printTable, ratio } from './stats.js';

/** `count` features in_qc with their submit transitions, oldest first in id order. */
export async function seedQueue(pool: pg.Pool, count: number): Promise<string[]> {
  await pool.query(
    `INSERT INTO features.features (id, name, kategorie, adresse, geom)
     SELECT 'q' || lpad(i::text, 6, '0'), 'Warteschlange ' || i, (ARRAY['friedhof','blumenbeet','denkmal'])[1 + i % 3],
            CASE WHEN i % 2 = 0 THEN 'Musterstraße ' || i END,
            ST_SetSRID(ST_MakePoint(13.1 + (i % 100) * 0.005, 52.4 + (i / 100) * 0.001), 4326)
     FROM generate_series(1, $1::int) AS i`,
    [count],
  );
  await pool.query(`UPDATE features.features SET status = 'in_qc' WHERE id LIKE 'q%'`);
  await pool.query(
    `INSERT INTO qc.transitions (feature_id, action, from_status, to_status, version, actor, comment, created_at)
     SELECT id, 'submit', 'draft', 'in_qc', version, 'bench-contributor', 'bitte prüfen',
            now() - interval '1 day' + (substr(id, 2)::int * interval '1 second')
     FROM features.features WHERE id LIKE 'q%' ORDER BY id`,
  );
  await pool.query('ANALYZE');
  return Array.from({ length: count }, (_, i) => `q${String(i + 1).padStart(6, '0')}`);
}

/**
 * Both desk benchmarks' report: decision + next item against the decision alone, p50 and p99. Fails when
 * the rounds drained the queue below its size, since the figures would then no longer be "at a queue of".
 */
export async function reportDecisionToNext(
  pool: pg.Pool,
  run: { title: string; queue: number; rounds: number; withNext: number[]; alone: number[] },
): Promise<void> {
  const { withNext, alone } = run;
  const left = Number((await pool.query<{ count: string }>(`SELECT count(*) FROM features.features WHERE status = 'in_qc'`)).rows[0]!.count);
  console.log(`\n${run.title}, queue of ${run.queue.toLocaleString('en')}+ (${left} left), ${run.rounds} rounds interleaved:`);
  printTable([
    {
      'decide + next p50 ms': median(withNext).toFixed(1),
      'decide alone p50 ms': median(alone).toFixed(1),
      'decide + next p99 ms': percentile(withNext, 99).toFixed(1),
      'decide alone p99 ms': percentile(alone, 99).toFixed(1),
      'p50 ratio': ratio(median(withNext), median(alone)),
      'p99 ratio': ratio(percentile(withNext, 99), percentile(alone, 99)),
    },
  ]);
  if (left < run.queue) throw new Error(`the queue fell below ${run.queue} (${left})`);
}

/** The reviewer the approval benchmarks decide as; the features were submitted by 'bench-submitter'. */
export const BENCH_REVIEWER: Principal = { id: 'bench-reviewer', role: 'reviewer', via: 'jwt', name: 'Bench Reviewer' };

/**
 * `count` features submitted for review by 'bench-submitter' (status in_qc, with their submit
 * transition), ids `prefix` + six digits, points `step`° apart eastwards from `origin`, in 100 rows
 * 0.001° apart (nearby approvals share an OSM batch, qc/jobs/osm-batch.ts).
 */
export async function seedSubmissions(pool: pg.Pool, prefix: string, count: number, place: { origin?: [number, number]; step?: number } = {}): Promise<string[]> {
  const [lon, lat] = place.origin ?? [13, 52];
  await pool.query(
    `INSERT INTO features.features (id, name, kategorie, geom)
     SELECT $1::text || lpad(i::text, 6, '0'), 'Prüfung ' || $1::text || i, 'friedhof',
            ST_SetSRID(ST_MakePoint($3::float8 + i * $5::float8, $4::float8 + (i % 100) * 0.001), 4326)
     FROM generate_series(1, $2::int) AS i`,
    [prefix, count, lon, lat, place.step ?? 0.001],
  );
  await pool.query(`UPDATE features.features SET status = 'in_qc' WHERE id LIKE $1::text || '%'`, [prefix]);
  await pool.query(
    `INSERT INTO qc.transitions (feature_id, action, from_status, to_status, version, actor)
     SELECT id, 'submit', 'draft', 'in_qc', version, 'bench-submitter' FROM features.features WHERE id LIKE $1::text || '%'`,
    [prefix],
  );
  return Array.from({ length: count }, (_, i) => `${prefix}${String(i + 1).padStart(6, '0')}`);
}

/**
 * The baseline approval: the QC service's transaction (qc/service.ts) without the queue — lock the
 * feature, change its status, record the transition and the submitter's notice (shown in the app,
 * GET /api/qc/notices, whether or not it is ever mailed) — with the service's own statements, less
 * the qc.jobs outbox rows the service writes in the transition's statement.
 */
export async function approveWithoutQueue(pool: pg.Pool, featureId: string, reviewer: Principal = BENCH_REVIEWER): Promise<void> {
  await withTransaction(pool, async (client) => {
    // The statements as the service runs them (db/pool.ts query: named ones prepared once per connection).
    const current = (await query(client, qcSql.lockForTransition(featureId))).rows[0] as { version: number; snapshot: unknown; submittedBy: string | null };
    await query(client, qcSql.setStatus(featureId, 'in_qc', 'approved'));
    const insert = qcSql.insertTransition({ featureId, action: 'approve', from: 'in_qc', to: 'approved', version: current.version, actor: reviewer.id!, actorName: reviewer.name ?? null, comment: null, snapshot: current.snapshot });
    const transitionId = String((await query(client, insert)).rows[0].id);
    await noticeOfDecision(client, { featureId, transitionId, action: 'approve', reason: null, actor: reviewer.id!, actorName: reviewer.name ?? null, recipient: current.submittedBy });
  }, { actor: reviewer.id });
}

/** Runs `work` over `items`, `parallel` at a time; answers the elapsed milliseconds. */
export async function inFlight<T>(items: readonly T[], parallel: number, work: (item: T) => Promise<unknown>): Promise<number> {
  const queue = [...items];
  const started = performance.now();
  await Promise.all(Array.from({ length: parallel }, async () => {
    for (let item = queue.shift(); item !== undefined; item = queue.shift()) await work(item);
  }));
  return performance.now() - started;
}
