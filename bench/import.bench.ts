/**
 * `npm run bench -- import`: importing 10 000 features from a GeoJSON file through POST /api/imports
 * (the API as its own process: upload, GDAL's ogr2ogr, mapping, zod and PostGIS validation of every
 * row, one transaction with the history note) against a baseline measured in the same run,
 * interleaved: the same 10 000 rows, already valid, written by plain multi-row INSERTs (1 000 rows a
 * statement) in one transaction straight into the database. Target: the import within 15 s.
 * On PGlite unless BENCH_DATABASE_URL or TEST_DATABASE_URL names a PostgreSQL server. BENCH_QUICK=1:
 * 2 rounds instead of 3. Needs GDAL (ogr2ogr), as imports do.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { missingGdal } from '../services/api/src/imports/convert.js';
import { demoCity } from '../services/api/src/imports/demo.js';
import { plainInsert, type ImportRow } from '../services/api/src/imports/queries.js';
import { withTransaction } from '../services/api/src/db/pool.js';
import { median, printTable, ratio } from './stats.js';
import { baselinePool, openBenchDatabase, startApiProcess } from './support.js';

const FEATURES = 10_000;
const ROUNDS = process.env.BENCH_QUICK === '1' ? 2 : 3;
const TARGET_MS = 15_000;

const missing = await missingGdal();
if (missing) {
  console.log(`skipped: ${missing}`);
  process.exit(0);
}

const city = demoCity(FEATURES);
const file = Buffer.from(JSON.stringify({ type: 'FeatureCollection', features: city.rows.map((r) => ({ type: 'Feature', geometry: r.geometry, properties: r.attributes })) }));
const rows: ImportRow[] = city.rows.map((r) => ({
  name: String(r.attributes.name),
  kategorie: String(r.attributes.kategorie),
  adresse: (r.attributes.adresse as string | null) ?? null,
  telefon: (r.attributes.telefon as string | null) ?? null,
  geometry: JSON.stringify(r.geometry),
}));

const database = await openBenchDatabase('import');
const dataDir = mkdtempSync(join(tmpdir(), 'bench-import-'));
const api = await startApiProcess({ DATABASE_URL: database.url, DATA_DIR: dataDir, NODE_ENV: 'development', WORKER_ENABLED: 'false' });
const pool = baselinePool(database);
try {
  const { token } = (await (await fetch(`${api.base}/api/dev/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ role: 'contributor', sub: 'bench' }) })).json()) as { token: string };
  const empty = () => pool.query('TRUNCATE features.features');

  async function viaImport(): Promise<number> {
    await empty();
    const started = performance.now();
    const response = await fetch(`${api.base}/api/imports?filename=city.geojson`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' }, body: file });
    const body = (await response.json()) as { imported?: number; detail?: string };
    if (response.status !== 201 || body.imported !== FEATURES) throw new Error(`import: ${response.status} ${JSON.stringify(body).slice(0, 300)}`);
    return performance.now() - started;
  }
  async function viaInsert(): Promise<number> {
    await empty();
    const started = performance.now();
    await withTransaction(pool, async (client) => {
      for (let i = 0; i < rows.length; i += 1_000) await client.query(plainInsert(rows.slice(i, i + 1_000), 'bench'));
    });
    return performance.now() - started;
  }

  const imports: number[] = [];
  const inserts: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    // Each round rotates the order, so neither side always runs on a warmer database.
    if (round % 2 === 0) {
      imports.push(await viaImport());
      inserts.push(await viaInsert());
    } else {
      inserts.push(await viaInsert());
      imports.push(await viaImport());
    }
  }
  const [importMs, insertMs] = [median(imports), median(inserts)];
  console.log(`importing ${FEATURES} features from GeoJSON (${(file.length / 1024 / 1024).toFixed(1)} MiB) on ${database.kind}, ${ROUNDS} rounds interleaved`);
  printTable([
    { what: 'POST /api/imports (GDAL, validation, history note)', 'median ms': Math.round(importMs), runs: imports.map(Math.round).join(', '), 'vs baseline': ratio(importMs, insertMs), target: `≤ ${TARGET_MS} ms: ${importMs <= TARGET_MS ? 'met' : 'missed'}` },
    { what: 'baseline: multi-row INSERT of the same rows', 'median ms': Math.round(insertMs), runs: inserts.map(Math.round).join(', '), 'vs baseline': '1.00×', target: '' },
  ]);
} finally {
  await pool.end();
  await api.stop();
  await database.close();
  rmSync(dataDir, { recursive: true, force: true });
}
