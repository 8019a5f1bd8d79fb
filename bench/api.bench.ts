/**
 * Feature API benchmark (`npm run bench -- api`).
 *
 * 1. bbox listing: GET /api/features?bbox=…&limit=N returning 1 000 and 10 000 of 100 000 features,
 *    against the raw SQL producing the same GeoJSON FeatureCollection read through `pg` in this
 *    process — same database, same run, interleaved. Target: API median ≤ 1.25× raw SQL median.
 * 2. single-feature GET and POST with 16 concurrent clients (autocannon): throughput, p50/p99
 *    latency, peak RSS of the API process.
 *
 * The API runs as its own process (`services/api/src/server.ts`) so its RSS is its own. Database:
 * BENCH_DATABASE_URL or TEST_DATABASE_URL (a PostgreSQL superuser URL; a scratch database is created
 * and dropped) or, when neither is set, an in-memory embedded PGlite in this process.
 * BENCH_QUICK=1 shortens every phase (for a smoke run).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, createServer, get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';
import { pino } from 'pino';
import { createApp } from '../services/api/src/app.js';
import { createAuthenticator } from '../services/api/src/auth/index.js';
import { createPool } from '../services/api/src/db/pool.js';
import { closeGracefully, listen } from '../services/shared/http-server.js';
import { loadOrCreateDevKeys } from '../services/api/src/auth/dev-keys.js';
import { FEATURE_JSON, listConditions } from '../services/api/src/features/queries.js';
import type { Bbox } from '../services/shared/features/schema.js';
import { GRID_TOTAL, gridBbox, seedFeatureGrid } from './feature-grid.js';
import { median, peakRssMiB, percentile, printTable, ratio } from './stats.js';
import { openBenchDatabase, startApiProcess } from './support.js';

const quick = process.env.BENCH_QUICK === '1';
const TOTAL = GRID_TOTAL;
const seed = (pool: pg.Pool) => seedFeatureGrid(pool);
const bboxFor = gridBbox;

// --- database ---------------------------------------------------------------------------------------

/** The baseline: the same FeatureCollection straight from SQL, no HTTP, no Express. */
function rawSql(bbox: Bbox, limit: number): { text: string; values: unknown[] } {
  const values: unknown[] = [];
  const conditions = listConditions({ bbox }, values);
  values.push(limit);
  return {
    text: `SELECT json_build_object('type', 'FeatureCollection',
             'features', coalesce(json_agg(${FEATURE_JSON} ORDER BY f.id), '[]'::json))::text AS collection
           FROM (SELECT * FROM features.features f WHERE ${conditions.join(' AND ')} ORDER BY f.id LIMIT $${values.length}::int) f`,
    values,
  };
}

// --- the API process --------------------------------------------------------------------------------

async function startApiInProcess(databaseUrl: string, dataDir: string): Promise<{ base: string; stop(): Promise<void> }> {
  const db = createPool(databaseUrl, { max: 10 });
  const authenticator = await createAuthenticator({ production: false, dataDir });
  const server = createServer(createApp({ db, config: { rateLimit: { writesPerMinute: 0 } }, authenticator, logger: pino({ level: 'silent' }) }));
  const port = await listen(server, 0, '127.0.0.1');
  return {
    base: `http://127.0.0.1:${port}`,
    async stop() {
      await closeGracefully(server, 1_000);
      await db.end();
    },
  };
}

// --- measurements -----------------------------------------------------------------------------------

/**
 * GET a URL with node:http (a lean client, as a server-side consumer would use) and read the whole
 * body; keeps it only when asked, so the client's own copying is not billed to the API.
 */
function httpGet(url: string, options: { keep?: boolean; onServerTiming?: (dbMs: number) => void } = {}): Promise<{ bytes: number; body?: Buffer }> {
  return new Promise((resolve, reject) => {
    get(url, { agent: keepAlive }, (response) => {
      const chunks: Buffer[] = [];
      let bytes = 0;
      const timing = /db;dur=([\d.]+)/.exec(String(response.headers['server-timing'] ?? ''));
      if (timing) options.onServerTiming?.(Number(timing[1]));
      response.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        if (options.keep) chunks.push(chunk);
      });
      response.on('end', () =>
        response.statusCode === 200 ? resolve({ bytes, ...(options.keep ? { body: Buffer.concat(chunks) } : {}) }) : reject(new Error(`GET ${url}: ${response.statusCode}`)),
      );
      response.on('error', reject);
    }).on('error', reject);
  });
}
const keepAlive = new Agent({ keepAlive: true, maxSockets: 1 });

async function timeIt(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await work();
  return performance.now() - started;
}

async function compareListing(pool: pg.Pool, where: string, base: string, columns: number, rows: number, iterations: number) {
  const bbox = bboxFor(columns, rows);
  const expected = columns * rows;
  const query = rawSql(bbox, expected);
  const url = `${base}/api/features?bbox=${bbox.minLon},${bbox.minLat},${bbox.maxLon},${bbox.maxLat}&limit=${expected}`;

  // Same features from both, or the comparison means nothing.
  const apiBody = JSON.parse((await httpGet(url, { keep: true })).body!.toString('utf8')) as { features: unknown[] };
  const sqlBody = JSON.parse((await pool.query<{ collection: string }>(query.text, query.values)).rows[0]!.collection) as { features: unknown[] };
  if (apiBody.features.length !== expected || JSON.stringify(apiBody.features) !== JSON.stringify(sqlBody.features)) {
    throw new Error(`API and SQL disagree for ${expected} features (${apiBody.features.length} vs ${sqlBody.features.length})`);
  }

  const api: number[] = [];
  const apiDb: number[] = [];
  const sql: number[] = [];
  let bytes = 0;
  for (let i = 0; i < iterations; i++) {
    // Interleaved, the order alternating, so drift in machine load and garbage collection left by
    // the previous run hit both sides alike.
    const viaApi = async () => api.push(await timeIt(async () => (bytes = (await httpGet(url, { onServerTiming: (ms) => apiDb.push(ms) })).bytes)));
    const viaSql = async () => sql.push(await timeIt(() => pool.query(query.text, query.values)));
    if (i % 2 === 0) {
      await viaApi();
      await viaSql();
    } else {
      await viaSql();
      await viaApi();
    }
  }
  return {
    API: where,
    features: expected,
    'body MiB': (bytes / 1024 / 1024).toFixed(2),
    'API median ms': median(api).toFixed(1),
    'raw SQL median ms': median(sql).toFixed(1),
    'of which API query ms': median(apiDb).toFixed(1),
    'API p90 ms': percentile(api, 90).toFixed(1),
    'raw SQL p90 ms': percentile(sql, 90).toFixed(1),
    'API / SQL (median)': ratio(median(api), median(sql)),
    target: '≤ 1.25×',
  };
}

async function load(name: string, options: autocannon.Options, apiPid: number) {
  const result = await autocannon({ connections: 16, duration: quick ? 3 : 10, ...options });
  return {
    scenario: name,
    'req/s': Math.round(result.requests.average),
    'p50 ms': result.latency.p50,
    'p99 ms': result.latency.p99,
    'non-2xx': result.non2xx,
    errors: result.errors,
    'API peak RSS MiB': (await peakRssMiB(apiPid)).toFixed(0),
  };
}

async function main(): Promise<void> {
  const database = await openBenchDatabase('api');
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-api-'));
  const pool = new pg.Pool({ connectionString: database.url, max: 4 });
  let api: Awaited<ReturnType<typeof startApiProcess>> | undefined;
  let inProcess: Awaited<ReturnType<typeof startApiInProcess>> | undefined;
  try {
    console.log(`database: ${database.kind}; seeding ${TOTAL.toLocaleString('en')} features…`);
    const seeded = await timeIt(() => seed(pool));
    console.log(`seeded in ${(seeded / 1000).toFixed(1)} s`);
    api = await startApiProcess({ DATABASE_URL: database.url, DATA_DIR: dataDir });

    // The API twice: in this process (its own cost: HTTP, Express, validation, forwarding the
    // text) and as its own process (plus a process hop competing for the same two cores).
    inProcess = await startApiInProcess(database.url, dataDir);
    console.log('\nbbox listing vs raw SQL (same GeoJSON, interleaved runs):');
    const listing = [];
    for (const [where, base] of [['in process', inProcess.base], ['own process', api.base]] as const) {
      listing.push(await compareListing(pool, where, base, 100, 10, quick ? 5 : 60));
      listing.push(await compareListing(pool, where, base, 1_000, 10, quick ? 3 : 20));
    }
    await inProcess.stop();
    inProcess = undefined;
    printTable(listing);

    const token = await (await loadOrCreateDevKeys(dataDir)).sign({ sub: 'bench', role: 'admin' });
    console.log('\nsingle features, 16 concurrent clients:');
    const results = [
      await load('GET /api/features/:id', { url: `${api.base}/api/features/f050000` }, api.child.pid!),
      await load(
        'POST /api/features',
        {
          url: `${api.base}/api/features`,
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            type: 'Feature',
            geometry: { type: 'Polygon', coordinates: [[[13.0, 52.0], [13.1, 52.0], [13.1, 52.1], [13.0, 52.1], [13.0, 52.0]]] },
            properties: { name: 'Benchmark', kategorie: 'blumenbeet', telefon: '+49 30 123' },
          }),
        },
        api.child.pid!,
      ),
    ];
    printTable(results);
    if (results.some((r) => r['non-2xx'] > 0 || r.errors > 0)) throw new Error('some load requests failed');
  } finally {
    keepAlive.destroy();
    await inProcess?.stop();
    await api?.stop();
    await pool.end();
    await database.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
