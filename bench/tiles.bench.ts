/**
 * Vector tile benchmark (`npm run bench -- tiles`).
 *
 * GET /api/tiles/:z/:x/:y.mvt on the 100 000-feature grid (bench/feature-grid.ts, the API benchmark's
 * data) against the raw ST_AsMVT query for the same tile read through `pg` in this process — same
 * database, same run, interleaved with the order alternating. p50 and p99 of each, and their ratio.
 * Target: API p50 ≤ 1.2× raw SQL p50. Three tiles: a street-level one (~1 200 features), a district
 * (~14 000) and the whole grid's region (~56 000). Also the 304 answer to a revalidation with the
 * tile's ETag.
 *
 * The API runs in this process (its own cost: HTTP, Express, the MD5 of the tile for the ETag)
 * and as its own process (services/api/src/server.ts, plus the process hop on the same two cores).
 * Database:
 * BENCH_DATABASE_URL or TEST_DATABASE_URL (a PostGIS with protobuf-c; a scratch database is created
 * and dropped). The embedded PGlite has no ST_AsMVT, so without either the benchmark says so and
 * stops. BENCH_QUICK=1 shortens every phase.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, createServer, get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { createApp } from '../services/api/src/app.js';
import { createAuthenticator } from '../services/api/src/auth/index.js';
import { createPool } from '../services/api/src/db/pool.js';
import { rawTileQuery } from '../services/api/src/tiles/queries.js';
import { closeGracefully, listen } from '../services/shared/http-server.js';
import { GRID_TOTAL } from './feature-grid.js';
import { openGridDatabase } from './grid-database.js';
import { median, percentile, printTable, ratio } from './stats.js';
import { startApiProcess } from './support.js';

const quick = process.env.BENCH_QUICK === '1';

/** Tiles over the grid (0–10°E, 0–1°N): which, and how many interleaved rounds each. */
const TILES = [
  { label: 'z10 street', z: 10, x: 526, y: 510, rounds: quick ? 20 : 200 },
  { label: 'z8 district', z: 8, x: 131, y: 127, rounds: quick ? 10 : 30 },
  { label: 'z6 region', z: 6, x: 32, y: 31, rounds: quick ? 4 : 10 },
];

const keepAlive = new Agent({ keepAlive: true, maxSockets: 1 });

function httpGet(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: Buffer; etag: string | undefined }> {
  return new Promise((resolve, reject) => {
    get(url, { agent: keepAlive, headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks), etag: response.headers.etag }));
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

async function compareTile(pool: pg.Pool, where: string, base: string, tile: (typeof TILES)[number]) {
  const url = `${base}/api/tiles/${tile.z}/${tile.x}/${tile.y}.mvt`;
  const query = rawTileQuery(tile.z, tile.x, tile.y);
  const raw = async () => (await pool.query<{ tile: Buffer }>(query.text, query.values)).rows[0]!.tile;

  // The same bytes from both, or the comparison means nothing.
  const viaApi = await httpGet(url);
  const viaSql = await raw();
  if (viaApi.status !== 200 || !viaApi.body.equals(viaSql)) throw new Error(`API and SQL disagree on ${url} (${viaApi.status}, ${viaApi.body.length} vs ${viaSql.length} bytes)`);
  if (viaSql.length < 1000) throw new Error(`${url} is almost empty (${viaSql.length} bytes): the tile misses the grid`);

  const api: number[] = [];
  const sql: number[] = [];
  const revalidated: number[] = [];
  for (let i = 0; i < tile.rounds; i++) {
    const apiRun = async () => api.push(await timeIt(() => httpGet(url)));
    const sqlRun = async () => sql.push(await timeIt(raw));
    if (i % 2 === 0) {
      await apiRun();
      await sqlRun();
    } else {
      await sqlRun();
      await apiRun();
    }
    revalidated.push(
      await timeIt(async () => {
        const answer = await httpGet(url, { 'if-none-match': viaApi.etag! });
        if (answer.status !== 304) throw new Error(`revalidation answered ${answer.status}`);
      }),
    );
  }
  return {
    API: where,
    tile: `${tile.label} ${tile.z}/${tile.x}/${tile.y}`,
    KiB: (viaSql.length / 1024).toFixed(0),
    rounds: tile.rounds,
    'API p50 ms': median(api).toFixed(1),
    'SQL p50 ms': median(sql).toFixed(1),
    'API p99 ms': percentile(api, 99).toFixed(1),
    'SQL p99 ms': percentile(sql, 99).toFixed(1),
    'p50 API/SQL': ratio(median(api), median(sql)),
    'p99 API/SQL': ratio(percentile(api, 99), percentile(sql, 99)),
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
  const pool = new pg.Pool({ connectionString: database.url, max: 2 });
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
    console.log('\nvector tiles: API vs raw ST_AsMVT through pg (same tile, same bytes, interleaved):');
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
