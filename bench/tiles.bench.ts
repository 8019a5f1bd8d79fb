/**
 * Vector tile benchmark (`npm run bench -- tiles`).
 *
 * GET /api/tiles/:z/:x/:y.mvt on the 100 000-feature grid (bench/feature-grid.ts, the API benchmark's
 * data) against the raw ST_AsMVT query for the same tile read through `pg` in this process — same
 * database, same run, interleaved with the order alternating. p50 and p99 of each, and their ratio.
 * Target: API p50 ≤ 1.2× raw SQL p50. Three tiles: a street-level one (~1 200 features), a district
 * (~14 000) and the whole grid's region (~56 000). The API is measured twice per round: a miss (an
 * untimed write to one feature of the tile first, so the server-side cache must build it again: the
 * honest cold figure) and then a hit (the same tile again, unchanged: what a second visitor gets).
 * Also the fingerprint query alone (what a hit costs in the database) and the 304 answer to a
 * revalidation with the tile's ETag.
 *
 * The API runs in this process (its own cost: HTTP, Fastify's route and hooks, the fingerprint query before a build)
 * and as its own process (services/api/src/server.ts, plus the process hop on the same two cores).
 * Database:
 * BENCH_DATABASE_URL or TEST_DATABASE_URL (a PostGIS with protobuf-c; a scratch database is created
 * and dropped). The embedded PGlite has no ST_AsMVT, so without either the benchmark says so and
 * stops. BENCH_QUICK=1 shortens every phase.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { createApp } from '../services/api/src/app.js';
import { createAuthenticator } from '../services/api/src/auth/index.js';
import { API_SESSION_SETTINGS, createPool } from '../services/api/src/db/pool.js';
import { fingerprintQuery, rawTileQuery } from '../services/api/src/tiles/queries.js';
import { closeGracefully, listen } from '../services/shared/http-server.js';
import { serveApp } from '../services/api/src/http/server.js';
import { GRID_TOTAL } from './feature-grid.js';
import { openGridDatabase } from './grid-database.js';
import { median, percentile, printTable, ratio } from './stats.js';
import { baselinePool, startApiProcess } from './support.js';

const quick = process.env.BENCH_QUICK === '1';

/** Tiles over the grid (0–10°E, 0–1°N): which, and how many interleaved rounds each. */
const TILES = [
  { label: 'z10 street', z: 10, x: 526, y: 510, rounds: quick ? 20 : 100 },
  { label: 'z8 district', z: 8, x: 131, y: 127, rounds: quick ? 10 : 30 },
  { label: 'z6 region', z: 6, x: 32, y: 31, rounds: quick ? 4 : 10 },
];

const keepAlive = new Agent({ keepAlive: true, maxSockets: 1 });

function httpGet(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: Buffer; etag: string | undefined; cache: string | undefined }> {
  return new Promise((resolve, reject) => {
    get(url, { agent: keepAlive, headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks), etag: response.headers.etag, cache: /cache;desc=(\w+)/.exec(String(response.headers['server-timing']))?.[1] }));
      response.on('error', reject);
    }).on('error', reject);
  });
}

async function timeIt(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await work();
  return performance.now() - started;
}

async function startApiInProcess(databaseUrl: string, dataDir: string): Promise<{ base: string; stop(): Promise<void> }> {
  // The API's session settings, as services/api/src/boot.ts gives them on a PostgreSQL server.
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

async function compareTile(pool: pg.Pool, where: string, base: string, tile: (typeof TILES)[number]) {
  const url = `${base}/api/tiles/${tile.z}/${tile.x}/${tile.y}.mvt`;
  const query = rawTileQuery(tile.z, tile.x, tile.y);
  const raw = async () => (await pool.query<{ tile: Buffer }>(query.text, query.values)).rows[0]!.tile;

  // The same bytes from both, or the comparison means nothing.
  const viaApi = await httpGet(url);
  const viaSql = await raw();
  if (viaApi.status !== 200 || !viaApi.body.equals(viaSql)) throw new Error(`API and SQL disagree on ${url} (${viaApi.status}, ${viaApi.body.length} vs ${viaSql.length} bytes)`);
  if (viaSql.length < 1000) throw new Error(`${url} is almost empty (${viaSql.length} bytes): the tile misses the grid`);

  // A miss is forced by an untimed no-op UPDATE of one feature of the tile: its row gets a new stamp
  // (migration 018), the fingerprint changes, the API builds the tile again. The raw query runs
  // after the same write, so both read the same rows.
  const touch = async () => {
    const touched = await pool.query(
      `UPDATE features.features SET name = name WHERE id = (SELECT id FROM features.tile_features WHERE geom && ST_TileEnvelope($1::int, $2::int, $3::int) LIMIT 1)`,
      [tile.z, tile.x, tile.y],
    );
    if (touched.rowCount !== 1) throw new Error(`no feature to touch in ${url}`);
  };
  const fingerprint = fingerprintQuery(tile.z, tile.x, tile.y);
  const miss: number[] = [];
  const hit: number[] = [];
  const sql: number[] = [];
  const fingerprints: number[] = [];
  const revalidated: number[] = [];
  for (let i = 0; i < tile.rounds; i++) {
    await touch();
    const missRun = async () => {
      const started = performance.now();
      const answer = await httpGet(url);
      miss.push(performance.now() - started);
      if (answer.cache !== 'miss') throw new Error(`expected a miss after a write, got ${answer.cache}`);
    };
    const sqlRun = async () => sql.push(await timeIt(raw));
    if (i % 2 === 0) {
      await missRun();
      await sqlRun();
    } else {
      await sqlRun();
      await missRun();
    }
    const started = performance.now();
    const again = await httpGet(url);
    hit.push(performance.now() - started);
    if (again.cache !== 'hit') throw new Error(`expected a hit for an unchanged tile, got ${again.cache}`);
    fingerprints.push(await timeIt(() => pool.query(fingerprint.text, fingerprint.values)));
    revalidated.push(
      await timeIt(async () => {
        const answer = await httpGet(url, { 'if-none-match': again.etag! });
        if (answer.status !== 304) throw new Error(`revalidation answered ${answer.status}`);
      }),
    );
  }
  return {
    API: where,
    tile: `${tile.label} ${tile.z}/${tile.x}/${tile.y}`,
    KiB: (viaSql.length / 1024).toFixed(0),
    rounds: tile.rounds,
    'SQL p50/p99 ms': `${median(sql).toFixed(1)} / ${percentile(sql, 99).toFixed(1)}`,
    'miss p50/p99 ms': `${median(miss).toFixed(1)} / ${percentile(miss, 99).toFixed(1)}`,
    'miss/SQL p50, p99': `${ratio(median(miss), median(sql))}, ${ratio(percentile(miss, 99), percentile(sql, 99))}`,
    'hit p50/p99 ms': `${median(hit).toFixed(1)} / ${percentile(hit, 99).toFixed(1)}`,
    'hit/SQL p50, p99': `${ratio(median(hit), median(sql))}, ${ratio(percentile(hit, 99), percentile(sql, 99))}`,
    'fingerprint p50 ms (÷SQL)': `${median(fingerprints).toFixed(1)} (${ratio(median(fingerprints), median(sql))})`,
    '304 p50 ms': median(revalidated).toFixed(1),
    target: 'p50 ≤ 1.2×',
  };
}

async function main(): Promise<void> {
  if (!process.env.BENCH_DATABASE_URL && !process.env.TEST_DATABASE_URL) {
    console.log('tiles: skipped — the embedded PGlite has no ST_AsMVT; set BENCH_DATABASE_URL or TEST_DATABASE_URL to a PostGIS server');
    return;
  }
  const started = performance.now();
  const database = await openGridDatabase('tiles');
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-tiles-'));
  const pool = baselinePool(database);
  let inProcess: Awaited<ReturnType<typeof startApiInProcess>> | undefined;
  let own: Awaited<ReturnType<typeof startApiProcess>> | undefined;
  try {
    console.log(`database: ${database.kind}, ${GRID_TOTAL.toLocaleString('en')} features, ready in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    inProcess = await startApiInProcess(database.url, dataDir);
    own = await startApiProcess({ DATABASE_URL: database.url, DATA_DIR: dataDir, WORKER_ENABLED: 'false' });
    const rows = [];
    for (const [where, base] of [['in process', inProcess.base], ['own process', own.base]] as const) {
      for (const tile of TILES) rows.push(await compareTile(pool, where, base, tile));
    }
    console.log('\nvector tiles: API (a miss after a write, then a cache hit) vs raw ST_AsMVT through pg (same tile, same bytes, interleaved):');
    printTable(rows);
  } finally {
    keepAlive.destroy();
    await inProcess?.stop();
    await own?.stop();
    await pool.end();
    await database.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
