/**
 * The review desk benchmarks' data set: a QC queue of features in_qc with their submit transitions.
 * Shared by qc-desk.bench.ts (API level) and qc-desk-web.bench.ts (in the browser).
 */
import type pg from 'pg';
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
