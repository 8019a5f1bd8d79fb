/**
 * OGC API – Features benchmark (`npm run bench -- ogcapi`).
 *
 * 1. What the standard path costs a GDAL user: `ogr2ogr -f GPKG … OAPIF:<api>/ogcapi features` (paging
 *    through every feature over HTTP) against the same `ogr2ogr` reading the same features from a raw
 *    GeoJSON file on disk — same run, interleaved, the order alternating. Reported as a ratio.
 * 2. /ogcapi/collections/features/items against /api/features for the same bbox page (1 000 and
 *    10 000 features): the OGC envelope and links over the same query layer. Reported as a ratio.
 *
 * The API runs as its own process. Database: BENCH_DATABASE_URL or TEST_DATABASE_URL (a scratch
 * database is created and dropped) or an in-memory PGlite. BENCH_QUICK=1 shortens every phase. Part 1
 * is skipped with one line when ogr2ogr (Debian gdal-bin) is missing.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { migrate } from '../services/api/src/db/migrate.js';
import { FEATURE_JSON } from '../services/api/src/features/queries.js';
import { median, percentile, printTable, ratio } from './stats.js';
import { openBenchDatabase, startApiProcess } from './support.js';

const run = promisify(execFile);
const quick = process.env.BENCH_QUICK === '1';
const TOTAL = quick ? 12_000 : 20_000;
const COLUMNS = 1_000;
const STEP = 0.01;

async function seed(pool: pg.Pool): Promise<void> {
  await migrate(pool);
  // Polygons (5-position squares) and points alternating on a grid, ids in grid order.
  await pool.query(
    `INSERT INTO features.features (id, name, kategorie, adresse, geom)
     SELECT 'f' || lpad(i::text, 6, '0'), 'Feature ' || i, (ARRAY['friedhof','blumenbeet','denkmal'])[1 + i % 3],
            'Musterstraße ' || i || ', 12345 Musterstadt',
            CASE WHEN i % 2 = 0
              THEN ST_MakeEnvelope((i % $2::int) * $3::float8, (i / $2::int) * $3::float8, (i % $2::int) * $3::float8 + $3::float8 / 2, (i / $2::int) * $3::float8 + $3::float8 / 2, 4326)
              ELSE ST_SetSRID(ST_MakePoint((i % $2::int) * $3::float8, (i / $2::int) * $3::float8), 4326) END
     FROM generate_series(0, $1::int - 1) AS i`,
    [TOTAL, COLUMNS, STEP],
  );
  await pool.query('ANALYZE features.features');
}

const keepAlive = new Agent({ keepAlive: true, maxSockets: 1 });

function httpGet(url: string, keep = false): Promise<{ bytes: number; body?: Buffer }> {
  return new Promise((resolve, reject) => {
    get(url, { agent: keepAlive }, (response) => {
      const chunks: Buffer[] = [];
      let bytes = 0;
      response.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        if (keep) chunks.push(chunk);
      });
      response.on('end', () => (response.statusCode === 200 ? resolve({ bytes, ...(keep ? { body: Buffer.concat(chunks) } : {}) }) : reject(new Error(`GET ${url}: ${response.statusCode}`))));
      response.on('error', reject);
    }).on('error', reject);
  });
}

async function timeIt(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await work();
  return performance.now() - started;
}

/** Run two measurements alternately, `iterations` times each. */
async function interleaved(iterations: number, a: () => Promise<unknown>, b: () => Promise<unknown>): Promise<[number[], number[]]> {
  const ta: number[] = [];
  const tb: number[] = [];
  for (let i = 0; i < iterations; i++) {
    if (i % 2 === 0) {
      ta.push(await timeIt(a));
      tb.push(await timeIt(b));
    } else {
      tb.push(await timeIt(b));
      ta.push(await timeIt(a));
    }
  }
  return [ta, tb];
}

async function featureCount(gpkg: string): Promise<number> {
  const { stdout } = await run('ogrinfo', ['-so', '-ro', gpkg, 'features']);
  return Number(/Feature Count: (\d+)/.exec(stdout)?.[1] ?? Number.NaN);
}

async function gdalComparison(pool: pg.Pool, base: string, dir: string) {
  const available = await run('ogr2ogr', ['--version']).then(
    () => true,
    () => false,
  );
  if (!available) {
    console.log('skipping the GDAL comparison: ogr2ogr is not installed (apt-get install gdal-bin)');
    return [];
  }
  // The raw file: the very features /ogcapi serves, as one GeoJSON FeatureCollection built by PostGIS.
  const raw = join(dir, 'features.geojson');
  const { rows } = await pool.query<{ collection: string }>(
    `SELECT json_build_object('type', 'FeatureCollection', 'features', json_agg(${FEATURE_JSON} ORDER BY f.id))::text AS collection FROM features.features f`,
  );
  writeFileSync(raw, rows[0]!.collection);
  const out = join(dir, 'out.gpkg');
  const fromFile = async () => {
    rmSync(out, { force: true });
    await run('ogr2ogr', ['-f', 'GPKG', out, raw, '-nln', 'features']);
  };
  const results = [];
  for (const pageSize of [1_000, 10_000]) {
    const fromApi = async () => {
      rmSync(out, { force: true });
      await run('ogr2ogr', ['-f', 'GPKG', out, `OAPIF:${base}/ogcapi`, 'features', '-oo', `PAGE_SIZE=${pageSize}`]);
    };
    // Both paths must produce every feature, or the comparison means nothing.
    await fromApi();
    const viaApi = await featureCount(out);
    await fromFile();
    const viaFile = await featureCount(out);
    if (viaApi !== TOTAL || viaFile !== TOTAL) throw new Error(`GDAL read ${viaApi} features through OAPIF and ${viaFile} from the file, expected ${TOTAL}`);
    const [api, file] = await interleaved(quick ? 2 : 6, fromApi, fromFile);
    results.push({
      path: `ogr2ogr OAPIF: (pages of ${pageSize})`,
      features: TOTAL,
      'OAPIF median ms': median(api).toFixed(0),
      'GeoJSON file median ms': median(file).toFixed(0),
      'OAPIF p90 ms': percentile(api, 90).toFixed(0),
      'OAPIF / file (median)': ratio(median(api), median(file)),
    });
  }
  return results;
}

async function listingComparison(base: string, limit: number, iterations: number) {
  // A bbox covering the first limit / COLUMNS grid rows: exactly `limit` features.
  const rowsNeeded = Math.ceil(limit / COLUMNS);
  const bbox = `${-STEP / 4},${-STEP / 4},${(COLUMNS - 1) * STEP + STEP / 4},${(rowsNeeded - 1) * STEP + STEP / 4}`;
  const api = `${base}/api/features?bbox=${bbox}&limit=${limit}`;
  const ogc = `${base}/ogcapi/collections/features/items?bbox=${bbox}&limit=${limit}`;
  const apiBody = JSON.parse((await httpGet(api, true)).body!.toString('utf8')) as { features: unknown[] };
  const ogcBody = JSON.parse((await httpGet(ogc, true)).body!.toString('utf8')) as { features: unknown[] };
  if (ogcBody.features.length !== limit || JSON.stringify(ogcBody.features) !== JSON.stringify(apiBody.features)) {
    throw new Error(`/ogcapi and /api/features disagree for ${limit} features`);
  }
  const [tOgc, tApi] = await interleaved(iterations, () => httpGet(ogc), () => httpGet(api));
  return {
    listing: 'bbox page',
    features: limit,
    '/ogcapi median ms': median(tOgc).toFixed(1),
    '/api/features median ms': median(tApi).toFixed(1),
    '/ogcapi p90 ms': percentile(tOgc, 90).toFixed(1),
    '/ogcapi / /api (median)': ratio(median(tOgc), median(tApi)),
  };
}

async function main(): Promise<void> {
  const database = await openBenchDatabase('ogcapi');
  const dir = mkdtempSync(join(tmpdir(), 'bench-ogcapi-'));
  const pool = new pg.Pool({ connectionString: database.url, max: 2 });
  let api: Awaited<ReturnType<typeof startApiProcess>> | undefined;
  try {
    console.log(`database: ${database.kind}; seeding ${TOTAL.toLocaleString('en')} features (half polygons, half points)…`);
    await seed(pool);
    api = await startApiProcess({ DATABASE_URL: database.url, DATA_DIR: dir });

    console.log('\nGDAL: the whole layer through OGC API – Features vs from a GeoJSON file (interleaved):');
    printTable(await gdalComparison(pool, api.base, dir));

    console.log('\n/ogcapi items vs /api/features, same bbox page (interleaved):');
    printTable([await listingComparison(api.base, 1_000, quick ? 6 : 40), await listingComparison(api.base, 10_000, quick ? 3 : 16)]);
  } finally {
    keepAlive.destroy();
    await api?.stop();
    await pool.end();
    await database.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
