/**
 * Feature API benchmark (`npm run bench -- api`). Every figure is a ratio against a baseline measured
 * in the same run, interleaved (alternating order), so machine-load drift hits both sides alike.
 *
 * 1. bbox listing, 1 000 and 10 000 of 100 000 features: GET /api/features (each feature's GeoJSON
 *    stored at write time, the page only concatenates it) against today's on-the-fly raw SQL building
 *    the same FeatureCollection with json_build_object/ST_AsGeoJSON, read through `pg` in this
 *    process (the parsed features are compared first). Targets: ≤ 0.6× (1 000) and ≤ 0.5× (10 000).
 *    The API's connections run with API_SESSION_SETTINGS (db/pool.ts: jit off, work_mem 16MB); the
 *    baseline is shown with the server's defaults (as it ran) and with those settings too.
 * 2. single-feature GET (16 clients, autocannon) against a bare node:http server running the same SQL
 *    and the same body (the API adds its nosniff and Vary headers), both in this process. Target
 *    ≥ 0.8× its throughput. Also printed:
 *    this process's CPU per request on each side, steadier than req/s on a loaded machine.
 * 3. POST (16 clients) against 16 workers running the raw transaction of the former five statements
 *    (BEGIN, set_config, ST_IsValid, INSERT, COMMIT). Target ≥ 0.8× its throughput.
 * (JWT against anonymous GETs: `npm run bench -- auth`. The API before and after the Fastify move, and
 * against the same SQL behind bare node:http, each in a process of its own: `npm run bench -- framework`.)
 *
 * Database: BENCH_DATABASE_URL or TEST_DATABASE_URL (a PostgreSQL superuser URL; a scratch database
 * is created and dropped) or, when neither is set, an in-memory embedded PGlite in this process.
 * BENCH_QUICK=1 shortens every phase (for a smoke run). BENCH_API_PARTS=listing,get,post runs only
 * the named parts (default: all three).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, createServer, get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';
import { pino } from 'pino';
import { createApp } from '../services/api/src/app.js';
import { migrate } from '../services/api/src/db/migrate.js';
import { createAuthenticator } from '../services/api/src/auth/index.js';
import { API_SESSION_SETTINGS, createPool } from '../services/api/src/db/pool.js';
import { closeGracefully, listen } from '../services/shared/http-server.js';
import { loadOrCreateDevKeys } from '../services/api/src/auth/dev-keys.js';
import { listConditions } from '../services/api/src/features/queries.js';
import { serveApp } from '../services/api/src/http/server.js';
import { isDeepStrictEqual } from 'node:util';
import type { Bbox } from '../services/shared/features/schema.js';
import { GRID_TOTAL, gridBbox, seedFeatureGrid } from './feature-grid.js';
import { median, peakRssMiB, percentile, printTable, ratio } from './stats.js';
import { openBenchDatabase, startApiProcess } from './support.js';

const quick = process.env.BENCH_QUICK === '1';
const parts = new Set((process.env.BENCH_API_PARTS ?? 'listing,get,post').split(',').map((part) => part.trim()));
const TOTAL = GRID_TOTAL;

/**
 * How a feature's GeoJSON was built before it was stored (migration 006): on the fly, per row, per
 * query. The same text as the stored one, so the two sides are compared on identical output.
 */
const ON_THE_FLY_FEATURE = `json_build_object(
    'type', 'Feature', 'id', f.id,
    'geometry', ST_AsGeoJSON(CASE WHEN ST_GeometryType(f.geom) IN ('ST_Polygon', 'ST_MultiPolygon') THEN ST_ForcePolygonCCW(f.geom) ELSE f.geom END, 9)::json,
    'properties', json_strip_nulls(json_build_object(
      'name', f.name, 'kategorie', f.kategorie, 'adresse', f.adresse, 'telefon', f.telefon,
      'status', f.status, 'version', f.version,
      'createdBy', f.created_by, 'createdAt', to_char(f.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
      'updatedBy', f.updated_by, 'updatedAt', to_char(f.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))))`;

/** The baseline: the same FeatureCollection straight from SQL built on the fly, no HTTP, no framework. */
function rawSql(bbox: Bbox, limit: number): { text: string; values: unknown[] } {
  const values: unknown[] = [];
  const conditions = listConditions({ bbox }, values);
  values.push(limit);
  return {
    text: `SELECT json_build_object('type', 'FeatureCollection',
             'features', coalesce(json_agg(${ON_THE_FLY_FEATURE} ORDER BY f.id), '[]'::json))::text AS collection
           FROM (SELECT * FROM features.features f WHERE ${conditions.join(' AND ')} ORDER BY f.id LIMIT $${values.length}::int) f`,
    values,
  };
}

// --- the API process --------------------------------------------------------------------------------

async function startApiInProcess(databaseUrl: string, dataDir: string): Promise<{ base: string; stop(): Promise<void> }> {
  // As server.ts configures it for PostgreSQL (boot.ts): the API's session settings.
  const db = createPool(databaseUrl, { max: 10, settings: API_SESSION_SETTINGS });
  const authenticator = await createAuthenticator({ production: false, dataDir });
  const server = await serveApp(createApp({ db, config: { rateLimit: { writesPerMinute: 0 } }, authenticator, logger: pino({ level: 'silent' }) }));
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

/**
 * `pool` runs the baseline as it ran before (server defaults); `tunedPool` runs the same SQL with the
 * API's session settings (jit off, work_mem), shown alongside so the gain of the settings alone is
 * visible and not credited to the stored text.
 */
async function compareListing(pool: pg.Pool, tunedPool: pg.Pool, where: string, base: string, columns: number, rows: number, iterations: number) {
  const bbox = gridBbox(columns, rows);
  const expected = columns * rows;
  const query = rawSql(bbox, expected);
  const url = `${base}/api/features?bbox=${bbox.minLon},${bbox.minLat},${bbox.maxLon},${bbox.maxLat}&limit=${expected}`;

  // Same features from both, or the comparison means nothing.
  const apiBody = JSON.parse((await httpGet(url, { keep: true })).body!.toString('utf8')) as { features: unknown[] };
  const sqlBody = JSON.parse((await pool.query<{ collection: string }>(query.text, query.values)).rows[0]!.collection) as { features: unknown[] };
  if (apiBody.features.length !== expected || !isDeepStrictEqual(apiBody.features, sqlBody.features)) {
    throw new Error(`API and SQL disagree for ${expected} features (${apiBody.features.length} vs ${sqlBody.features.length})`);
  }

  const api: number[] = [];
  const apiDb: number[] = [];
  const sql: number[] = [];
  const tunedSql: number[] = [];
  let bytes = 0;
  for (let i = 0; i < iterations; i++) {
    // Interleaved, the order alternating, so drift in machine load and garbage collection left by
    // the previous run hit both sides alike.
    const viaApi = async () => api.push(await timeIt(async () => (bytes = (await httpGet(url, { onServerTiming: (ms) => apiDb.push(ms) })).bytes)));
    const viaSql = async () => sql.push(await timeIt(() => pool.query(query.text, query.values)));
    const viaTunedSql = async () => tunedSql.push(await timeIt(() => tunedPool.query(query.text, query.values)));
    if (i % 2 === 0) {
      await viaApi();
      await viaSql();
      await viaTunedSql();
    } else {
      await viaTunedSql();
      await viaSql();
      await viaApi();
    }
  }
  // Each round's own ratio (its API run against its SQL run, back to back): a slow moment of a shared
  // machine lands on both halves of one round, so the median of these moves less than the ratio of
  // the two medians. Same measurement, steadier estimate.
  const paired = api.map((ms, i) => ms / sql[i]!);
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
    'API / SQL (median of rounds)': `${median(paired).toFixed(2)}×`,
    'raw SQL, API settings, ms': median(tunedSql).toFixed(1),
    'API / SQL with API settings': ratio(median(api), median(tunedSql)),
    target: expected >= 10_000 ? '≤ 0.50×' : '≤ 0.60×',
  };
}

/** A bare node:http server answering GET /api/features/:id with the same SQL and headers as the API. */
async function startBareServer(databaseUrl: string): Promise<{ base: string; stop(): Promise<void> }> {
  const db = createPool(databaseUrl, { max: 10 });
  const server = createServer((req, res) => {
    const id = decodeURIComponent((req.url ?? '').slice('/api/features/'.length));
    db.query<{ version: number; featureJson: string }>('SELECT f.version, f.geojson AS "featureJson" FROM features.features f WHERE f.id = $1::text', [id]).then(
      ({ rows }) => {
        const row = rows[0];
        if (!row) {
          res.writeHead(404).end();
          return;
        }
        res.writeHead(200, { 'Content-Type': 'application/geo+json; charset=utf-8', ETag: `"${row.version}"`, 'Cache-Control': 'no-cache' }).end(row.featureJson);
      },
      () => res.writeHead(500).end(),
    );
  });
  const port = await listen(server, 0, '127.0.0.1');
  return {
    base: `http://127.0.0.1:${port}`,
    async stop() {
      await closeGracefully(server, 1_000);
      await db.end();
    },
  };
}

const POLYGON = { type: 'Polygon', coordinates: [[[13.0, 52.0], [13.1, 52.0], [13.1, 52.1], [13.0, 52.1], [13.0, 52.0]]] };

/** 16 workers, each running the former five-statement transaction of a POST in a loop, for `seconds`. */
async function rawTransactions(pool: pg.Pool, seconds: number): Promise<Throughput> {
  const geometry = JSON.stringify(POLYGON);
  const deadline = performance.now() + seconds * 1000;
  let done = 0;
  const worker = async () => {
    while (performance.now() < deadline) {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query("SELECT set_config('app.actor', $1::text, true)", ['bench']);
        await client.query('SELECT ST_IsValid(g) AS valid, ST_IsValidReason(g) AS reason FROM ST_GeomFromGeoJSON($1::text) AS g', [geometry]);
        await client.query(
          `INSERT INTO features.features AS f (id, name, kategorie, adresse, telefon, geom, created_by)
           VALUES (gen_random_uuid()::text, $1::text, 'blumenbeet', NULL, '+49 30 123', ST_SetSRID(ST_GeomFromGeoJSON($2::text), 4326), 'bench')
           RETURNING f.id, f.version, f.geojson`,
          ['Benchmark', geometry],
        );
        await client.query('COMMIT');
        done++;
      } finally {
        client.release();
      }
    }
  };
  const started = performance.now();
  const cpu = process.cpuUsage();
  await Promise.all(Array.from({ length: 16 }, worker));
  return { perSecond: done / ((performance.now() - started) / 1000), cpuMicros: cpuMicrosSince(cpu) / done };
}

/**
 * Requests (or transactions) per second, and this process's CPU time per request. Both sides run in
 * this process (servers, autocannon, pg), so the CPU figure compares their Node-side cost; on a loaded
 * machine it is steadier than the throughput, which also depends on what the database gets.
 */
interface Throughput {
  perSecond: number;
  cpuMicros: number;
}

function cpuMicrosSince(start: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(start);
  return used.user + used.system;
}

async function autocannonRps(options: autocannon.Options): Promise<Throughput> {
  const cpu = process.cpuUsage();
  const result = await autocannon({ connections: 16, duration: quick ? 2 : 5, ...options });
  const cpuMicros = cpuMicrosSince(cpu) / Math.max(1, result.requests.total);
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${String(options.url)}: ${result.non2xx} non-2xx answers, ${result.errors} errors`);
  return { perSecond: result.requests.average, cpuMicros };
}

/** Rounds of A then B, B then A, …; the median throughput and CPU per request of each side, and their ratios. */
async function interleaved(name: string, api: () => Promise<Throughput>, baseline: () => Promise<Throughput>, baselineName: string, target: string) {
  const a: Throughput[] = [];
  const b: Throughput[] = [];
  for (let round = 0; round < (quick ? 2 : 4); round++) {
    if (round % 2 === 0) {
      a.push(await api());
      b.push(await baseline());
    } else {
      b.push(await baseline());
      a.push(await api());
    }
  }
  const rate = (t: Throughput[]) => median(t.map((x) => x.perSecond));
  const cpu = (t: Throughput[]) => median(t.map((x) => x.cpuMicros));
  return {
    scenario: name,
    'API req/s (median)': Math.round(rate(a)),
    baseline: baselineName,
    'baseline req/s (median)': Math.round(rate(b)),
    'API / baseline': ratio(rate(a), rate(b)),
    target,
    'API CPU µs/req': Math.round(cpu(a)),
    'baseline CPU µs/req': Math.round(cpu(b)),
  };
}

/**
 * Several sides measured in rounds, the order rotating each round so each side runs first, middle and
 * last alike; the median throughput and CPU per request of each, and its ratio to the baseline side.
 */
async function interleavedSides(sides: Array<[name: string, run: () => Promise<Throughput>]>, baselineName: string, target: string) {
  const results = new Map<string, Throughput[]>(sides.map(([name]) => [name, []]));
  const rounds = quick ? sides.length : 2 * sides.length;
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < sides.length; i++) {
      const [name, run] = sides[(round + i) % sides.length]!;
      results.get(name)!.push(await run());
    }
  }
  const rate = (name: string) => median(results.get(name)!.map((x) => x.perSecond));
  const cpu = (name: string) => median(results.get(name)!.map((x) => x.cpuMicros));
  return sides.map(([name]) => ({
    side: name,
    'req/s (median)': Math.round(rate(name)),
    [`/ ${baselineName}`]: ratio(rate(name), rate(baselineName)),
    target: name === baselineName ? '' : target,
    'CPU µs/req': Math.round(cpu(name)),
  }));
}

async function main(): Promise<void> {
  const database = await openBenchDatabase('api');
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-api-'));
  const pool = new pg.Pool({ connectionString: database.url, max: 4 });
  const tunedPool = createPool(database.url, { max: 2, settings: API_SESSION_SETTINGS });
  let api: Awaited<ReturnType<typeof startApiProcess>> | undefined;
  let inProcess: Awaited<ReturnType<typeof startApiInProcess>> | undefined;
  try {
    if (parts.has('listing') || parts.has('get')) {
      console.log(`database: ${database.kind}; seeding ${TOTAL.toLocaleString('en')} features…`);
      const seeded = await timeIt(() => seedFeatureGrid(pool));
      console.log(`seeded in ${(seeded / 1000).toFixed(1)} s`);
    } else {
      // POST alone needs the schema only.
      console.log(`database: ${database.kind}`);
      await migrate(pool);
    }
    // The API twice: in this process (its own cost: HTTP, Fastify, validation, forwarding the
    // text) and as its own process (plus a process hop competing for the same two cores).
    inProcess = await startApiInProcess(database.url, dataDir);
    if (parts.has('listing')) {
      api = await startApiProcess({ DATABASE_URL: database.url, DATA_DIR: dataDir });
      console.log('\nbbox listing vs raw SQL (same GeoJSON, interleaved runs):');
      const listing = [];
      for (const [where, base] of [['in process', inProcess.base], ['own process', api.base]] as const) {
        // 1 000 features take milliseconds a round: enough rounds for a steady median even in quick mode.
        listing.push(await compareListing(pool, tunedPool, where, base, 100, 10, quick ? 25 : 80));
        listing.push(await compareListing(pool, tunedPool, where, base, 1_000, 10, quick ? 3 : 20));
      }
      printTable(listing);
    }

    const token = await (await loadOrCreateDevKeys(dataDir)).sign({ sub: 'bench', role: 'admin' });
    const bare = await startBareServer(database.url);
    const rawPool = new pg.Pool({ connectionString: database.url, max: 16 });
    try {
      const inProc = inProcess;
      if (parts.has('get')) {
        console.log('\nsingle features, 16 concurrent clients, API in this process (interleaved rounds):');
        const getUrl = '/api/features/f050000';
        await autocannonRps({ url: `${inProc.base}${getUrl}`, duration: 1 }); // warm-up
        await autocannonRps({ url: `${bare.base}${getUrl}`, duration: 1 });
        printTable([
          await interleaved(
            'GET /api/features/:id',
            () => autocannonRps({ url: `${inProc.base}${getUrl}` }),
            () => autocannonRps({ url: `${bare.base}${getUrl}` }),
            'bare node:http, same SQL',
            '≥ 0.80×',
          ),
        ]);
      }
      if (parts.has('post')) {
        console.log('\nPOST /api/features, 16 concurrent clients, API in this process (interleaved rounds):');
        const post = (base: string) => () =>
          autocannonRps({
            url: `${base}/api/features`,
            method: 'POST',
            headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
            body: JSON.stringify({ type: 'Feature', geometry: POLYGON, properties: { name: 'Benchmark', kategorie: 'blumenbeet', telefon: '+49 30 123' } }),
          });
        await post(inProc.base)(); // warm-up
        printTable(
          await interleavedSides(
            [
              ['API', post(inProc.base)],
              ['raw 5-statement transaction', () => rawTransactions(rawPool, quick ? 2 : 5)],
            ],
            'raw 5-statement transaction',
            '≥ 0.80×',
          ),
        );
      }
    } finally {
      await bare.stop();
      await rawPool.end();
    }
    if (api) console.log(`API process peak RSS: ${(await peakRssMiB(api.child.pid!)).toFixed(0)} MiB`);
  } finally {
    keepAlive.destroy();
    await inProcess?.stop();
    await api?.stop();
    await pool.end();
    await tunedPool.end();
    await database.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
