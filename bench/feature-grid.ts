/**
 * The benchmarks' data set: 100 000 features on a 1 000 × 100 grid of small squares (5-position
 * polygons, 0.005° wide, 0.01° apart, from 0°E 0°N), ids f000000… in grid order, the three kategorien
 * in turn. Shared by api.bench.ts (bbox listing) and tiles.bench.ts (vector tiles).
 */
import type pg from 'pg';
import type { Bbox } from '../services/shared/features/schema.js';
import { migrate } from '../services/api/src/db/migrate.js';

export const GRID_TOTAL = 100_000;
export const GRID_COLUMNS = 1_000;
export const GRID_STEP = 0.01;

/** Migrate and insert the grid, in batches so PGlite's memory stays flat. */
export async function seedFeatureGrid(pool: pg.Pool, total = GRID_TOTAL): Promise<void> {
  await migrate(pool);
  const batch = 10_000;
  for (let start = 0; start < total; start += batch) {
    await pool.query(
      `INSERT INTO features.features (id, name, kategorie, adresse, geom)
       SELECT 'f' || lpad(i::text, 6, '0'), 'Feature ' || i, (ARRAY['friedhof','blumenbeet','denkmal'])[1 + i % 3],
              'Musterstraße ' || i || ', 12345 Musterstadt',
              ST_MakeEnvelope((i % $3::int) * $4::float8, (i / $3::int) * $4::float8,
                              (i % $3::int) * $4::float8 + $4::float8 / 2, (i / $3::int) * $4::float8 + $4::float8 / 2, 4326)
       FROM generate_series($1::int, $2::int) AS i`,
      [start, Math.min(total, start + batch) - 1, GRID_COLUMNS, GRID_STEP],
    );
  }
  await pool.query('ANALYZE features.features');
}

/** A bbox covering the first `rows` grid rows and `columns` grid columns: exactly rows × columns features. */
export function gridBbox(columns: number, rows: number): Bbox {
  return { minLon: -GRID_STEP / 4, minLat: -GRID_STEP / 4, maxLon: (columns - 1) * GRID_STEP + GRID_STEP / 4, maxLat: (rows - 1) * GRID_STEP + GRID_STEP / 4 };
}
