/**
 * The review desk benchmarks' data set: a QC queue of features in_qc with their submit transitions.
 * Shared by qc-desk.bench.ts (API level) and qc-desk-web.bench.ts (in the browser).
 */
import type pg from 'pg';

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
