/**
 * Vector tiles as the data grows (`npm run bench -- tile-growth`): the same tile requests on 10 000,
 * 100 000 and 1 000 000 realistic features (bench/million.ts: points, polygons, lines and
 * multipolygons over Berlin, denser in the middle), interleaved round by round across the sizes.
 *
 * For a zoom-10 tile (an overview: the whole middle of the city) and a zoom-14 tile (a few streets),
 * both at the city's centre:
 * - hit: GET through the API, its own process (services/api/src/server.ts, listening for changes),
 *   for a tile it has cached: an in-memory lookup, no query (Server-Timing db;dur=0.0, checked); asked
 *   as a browser asks (Accept-Encoding: gzip, deflate, br, zstd: the gzip bytes, compressed once per
 *   build and cached), and for the raw bytes (identity), alternating;
 * - miss: the same GET right after a change meets the tile (a box recorded in features.tile_changes and
 *   notified, as migration 023's trigger does, without touching a feature: the benchmark leaves the
 *   data as it found it), so the API drops its tile and builds it again;
 * - the baselines, through pg in this process, each the whole work a server without the cache does
 *   per request: "naive" — ST_AsMVT over features.features, projecting each geometry (ST_Transform)
 *   and carrying all four properties, no thinning, the query most tile servers start from; and "own
 *   SQL" — the API's own tile statement (tiles/queries.ts rawTileQuery: the pre-projected
 *   features.tile_features, the overview's properties and budget), the strongest baseline: the same
 *   bytes the API serves.
 * Also the previous API (the commit before the change notifications, BENCH_TILE_GROWTH_BEFORE, default
 * bd6f3c1; "off" to skip) in a git worktree as its own process on the same databases: its hit asked
 * the database for the tile's fingerprint, a scan of every stamp in the tile.
 *
 * Reported per size: p50 (and p90) of each, the ratio to the 10k figure (growth) and to the own SQL,
 * the z10 tile's bytes from each, the time from a change's commit to its notification in this
 * process, and how many answers right after a change still came from the cache (the window between
 * a commit and its notification reaching the API: each is asked again until it misses).
 *
 * Runs on copies of the growth databases (made and dropped by this run: another run may rebuild the
 * originals meanwhile). Needs BENCH_DATABASE_URL or TEST_DATABASE_URL (a PostgreSQL with PostGIS and
 * protobuf-c);
 * BENCH_TILE_GROWTH_SIZES=10k,100k picks sizes (default all three: building 1M takes minutes once);
 * BENCH_QUICK=1 shortens every phase.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { TILE_DETAIL_MIN_ZOOM } from '../services/shared/tiles.js';
import { API_SESSION_SETTINGS, createPool } from '../services/api/src/db/pool.js';
import { rawTileQuery, TILE_BUFFER, TILE_EXTENT } from '../services/api/src/tiles/queries.js';
import { tileBounds } from '../services/api/src/tiles/bounds.js';
import { adminUrl, CITY, GROWTH_SIZES, openGrowthDatabases, sizeLabel, type GrowthDatabase } from './million.js';
import { median, percentile, printTable, ratio } from './stats.js';
import { addWorktree, startApiProcess, startServerProcess, type ApiProcess, type Worktree } from './support.js';
import { tileOf } from '../test/helpers/tiles.js';

const quick = process.env.BENCH_QUICK === '1';
const HIT_ROUNDS = quick ? 10 : 40;
const MISS_ROUNDS = { 10: quick ? 2 : 5, 14: quick ? 5 : 15 } as const;
const BEFORE = process.env.BENCH_TILE_GROWTH_BEFORE ?? 'bd6f3c1';

const centre = { lon: (CITY.minLon + CITY.maxLon) / 2, lat: (CITY.minLat + CITY.maxLat) / 2 };
const TILES = [tileOf(centre.lon, centre.lat, 10), tileOf(centre.lon, centre.lat, 14)];
const label = (t: { z: number; x: number; y: number }) => `z${t.z} ${t.z}/${t.x}/${t.y}`;

/**
 * The naive tile: every feature meeting the tile read from features.features and projected on the
 * way (ST_Transform per geometry), all four properties, no thinning; the envelope projected to
 * EPSG:4326 once so the spatial index on features.features is used.
 */
function naiveTileQuery(z: number, x: number, y: number) {
  return {
    text: `
      SELECT ST_AsMVT(mvt, 'features', ${TILE_EXTENT}, 'geom') AS tile
      FROM (
        SELECT ST_AsMVTGeom(ST_Transform(f.geom, 3857), ST_TileEnvelope($1::int, $2::int, $3::int), ${TILE_EXTENT}, ${TILE_BUFFER}, true) AS geom,
               f.id, f.kategorie, f.status, f.name
        FROM features.features f
        WHERE f.geom && ST_Transform(ST_TileEnvelope($1::int, $2::int, $3::int, margin => $4::float8), 4326)
      ) mvt`,
    values: [z, x, y, TILE_BUFFER / TILE_EXTENT],
  };
}

const keepAlive = new Agent({ keepAlive: true, maxSockets: 4 });

interface Answer {
  status: number;
  bytes: number;
  /** From Server-Timing: whether the cache answered, and whether it asked the database. */
  cache: string | undefined;
  dbMs: number;
  /** Content-Encoding. */
  encoding: string | undefined;
}

/** What a browser sends (Chrome and Firefox; Safari leaves out zstd): the API answers gzip. */
const BROWSER_ACCEPT_ENCODING = 'gzip, deflate, br, zstd';

/**
 * A GET on a kept-alive connection. The API closes a connection idle for its keep-alive timeout; a
 * request sent on it at that moment fails with ECONNRESET (a minute-long miss elsewhere can leave a
 * connection idle that long on a loaded machine), and is sent once more.
 */
async function httpGet(url: string, encoding: 'identity' | 'browser' = 'identity'): Promise<Answer> {
  try {
    return await httpGetOnce(url, encoding);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ECONNRESET') throw error;
    return httpGetOnce(url, encoding);
  }
}

function httpGetOnce(url: string, encoding: 'identity' | 'browser'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    get(url, { agent: keepAlive, headers: { 'accept-encoding': encoding === 'browser' ? BROWSER_ACCEPT_ENCODING : encoding } }, (response) => {
      let bytes = 0;
      response.on('data', (chunk: Buffer) => (bytes += chunk.length));
      response.on('end', () => {
        const timing = String(response.headers['server-timing'] ?? '');
        resolve({ status: response.statusCode ?? 0, bytes, cache: /cache;desc=(\w+)/.exec(timing)?.[1], dbMs: Number(/db;dur=([\d.]+)/.exec(timing)?.[1] ?? NaN), encoding: response.headers['content-encoding'] });
      });
      response.on('error', reject);
    }).on('error', reject);
  });
}

async function timed<T>(work: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const started = performance.now();
  const value = await work();
  return { ms: performance.now() - started, value };
}

/** What one size holds while the benchmark runs. */
interface Subject {
  database: GrowthDatabase;
  pool: pg.Pool;
  /** This process's own listener: when a change's notification arrives here. */
  listener: pg.Client;
  api: ApiProcess;
  before: ApiProcess | undefined;
  samples: Map<string, number[]>;
  bytes: Map<string, number>;
  staleAnswers: number;
  notifyMs: number[];
  /** Per change: ms from the writer's acknowledged commit until a request got the rebuilt tile (0: the first did). */
  staleMs: number[];
  changeSeqs: number[];
}

const sample = (subject: Subject, name: string, ms: number) => {
  const list = subject.samples.get(name) ?? [];
  list.push(ms);
  subject.samples.set(name, list);
};

/**
 * A change that meets the tile, as migration 023's trigger records and announces one, committed.
 * Resolves once the commit is acknowledged, with `heard`: when this process's listener got the
 * notification, in ms after that acknowledgement (negative: before it). The API's listener is told at
 * the same moment by the same backend signal.
 */
async function changeTile(subject: Subject, t: { z: number; x: number; y: number }): Promise<{ committed: number; heard: Promise<number> }> {
  const [x0, y0, x1, y1] = tileBounds(t);
  const inset = (x1 - x0) / 4;
  const box = [x0 + inset, y0 + inset, x1 - inset, y1 - inset];
  let committed = Number.NaN;
  const arrived = new Promise<number>((resolve, reject) => {
    const listener = (message: pg.Notification) => {
      if (message.channel !== 'tile_changes') return;
      subject.listener.off('notification', listener);
      clearTimeout(timeout);
      resolve(performance.now());
    };
    const timeout = setTimeout(() => reject(new Error(`${subject.database.name}: no notification within 30 s of a change`)), 30_000);
    subject.listener.on('notification', listener);
  });
  arrived.catch(() => undefined); // awaited by the caller
  const { rows } = await subject.pool.query<{ seq: number }>(
    `WITH recorded AS (INSERT INTO features.tile_changes (box) VALUES (ST_MakeEnvelope($1::float8, $2::float8, $3::float8, $4::float8, 3857)) RETURNING seq)
     SELECT seq::int, pg_notify('tile_changes', json_build_object('seq', seq, 'boxes', json_build_array(json_build_array(floor($1::float8), floor($2::float8), ceil($3::float8), ceil($4::float8))))::text) FROM recorded`,
    box,
  );
  committed = performance.now();
  subject.changeSeqs.push(rows[0]!.seq);
  return { committed, heard: arrived.then((at) => at - committed) };
}

/** GETs the tile until the API has it in memory (db;dur=0.0, a hit): the state a hit is measured in. */
async function warm(base: string, t: { z: number; x: number; y: number }): Promise<Answer> {
  for (let i = 0; i < 200; i++) {
    const answer = await httpGet(`${base}/api/tiles/${t.z}/${t.x}/${t.y}.mvt`);
    if (answer.status !== 200) throw new Error(`${base}: tile ${label(t)} answered ${answer.status}`);
    if (answer.cache === 'hit' && answer.dbMs === 0) return answer;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${base}: tile ${label(t)} never became an in-memory hit (is the API listening for changes?)`);
}

async function round(subject: Subject, i: number): Promise<void> {
  for (const t of TILES) {
    const url = `${subject.api.base}/api/tiles/${t.z}/${t.x}/${t.y}.mvt`;
    // Hits: the API's (asked as a browser asks, so gzip, and for raw bytes, order alternating), then
    // the previous API's (a fingerprint query each), order alternating.
    const hits = [
      async () => {
        for (const encoding of i % 2 === 0 ? (['browser', 'identity'] as const) : (['identity', 'browser'] as const)) {
          const { ms, value } = await timed(() => httpGet(url, encoding));
          if (value.cache !== 'hit' || value.dbMs !== 0) throw new Error(`expected an in-memory hit for ${label(t)}, got ${value.cache} after ${value.dbMs} ms in the database`);
          if (encoding === 'browser' && value.encoding !== 'gzip') throw new Error(`${label(t)}: a browser's request answered ${value.encoding ?? 'identity'}, not gzip`);
          sample(subject, `${encoding === 'browser' ? 'gzip hit' : 'hit'} ${t.z}`, ms);
          subject.bytes.set(`${encoding === 'browser' ? 'gzip' : 'api'} ${t.z}`, value.bytes);
        }
      },
      async () => {
        if (!subject.before) return;
        const { ms, value } = await timed(() => httpGet(`${subject.before!.base}/api/tiles/${t.z}/${t.x}/${t.y}.mvt`));
        if (value.cache !== 'hit') throw new Error(`the previous API missed ${label(t)}`);
        sample(subject, `before hit ${t.z}`, ms);
      },
    ];
    for (const run of i % 2 === 0 ? hits : hits.reverse()) await run();
    if (i >= MISS_ROUNDS[t.z as 10 | 14]) continue;
    // A miss and the two baselines, order rotating.
    const own = rawTileQuery(t.z, t.x, t.y);
    const naive = naiveTileQuery(t.z, t.x, t.y);
    const work = [
      async () => {
        // Asked the moment the change committed, as a client that made the edit would.
        const { committed, heard } = await changeTile(subject, t);
        let started = performance.now();
        let answer = await httpGet(url);
        // Asked before the API heard the change: served from memory. Counted, and asked again.
        let stale = false;
        while (answer.cache === 'hit') {
          subject.staleAnswers++;
          stale = true;
          started = performance.now();
          answer = await httpGet(url);
        }
        sample(subject, `miss ${t.z}`, performance.now() - started);
        subject.staleMs.push(stale ? started - committed : 0);
        subject.notifyMs.push(await heard);
        subject.bytes.set(`api ${t.z}`, answer.bytes);
        // The change met the tiles of the other zoom too (the z14 tile lies in the z10 one): every
        // tile is built and in memory again before the next hit is timed.
        for (const each of TILES) await warm(subject.api.base, each);
      },
      async () => {
        const { ms, value } = await timed(() => subject.pool.query<{ tile: Buffer }>(own.text, own.values));
        sample(subject, `own ${t.z}`, ms);
        subject.bytes.set(`own ${t.z}`, value.rows[0]!.tile?.length ?? 0);
      },
      async () => {
        const { ms, value } = await timed(() => subject.pool.query<{ tile: Buffer }>(naive.text, naive.values));
        sample(subject, `naive ${t.z}`, ms);
        subject.bytes.set(`naive ${t.z}`, value.rows[0]!.tile?.length ?? 0);
      },
    ];
    for (let k = 0; k < work.length; k++) await work[(i + k) % work.length]!();
  }
}

const fmt = (samples: number[] | undefined) => (samples?.length ? `${median(samples).toFixed(1)} / ${percentile(samples, 90).toFixed(1)}` : '–');
const kb = (n: number | undefined) => (n === undefined ? '–' : `${(n / 1024).toFixed(0)} KiB`);

async function main(): Promise<void> {
  if (!adminUrl()) {
    console.log('tile-growth: skipped — it needs PostgreSQL with PostGIS and protobuf-c (the growth databases, ST_AsMVT); set BENCH_DATABASE_URL or TEST_DATABASE_URL');
    return;
  }
  const wanted = (process.env.BENCH_TILE_GROWTH_SIZES ?? GROWTH_SIZES.map(sizeLabel).join(',')).split(',').map((s) => s.trim());
  const sizes = GROWTH_SIZES.filter((size) => wanted.includes(sizeLabel(size)));
  if (sizes.length === 0) throw new Error(`BENCH_TILE_GROWTH_SIZES names no size of ${GROWTH_SIZES.map(sizeLabel).join(', ')}`);
  const databases = await copies(await openGrowthDatabases(sizes));
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-tile-growth-'));
  let worktree: Worktree | undefined;
  const subjects: Subject[] = [];
  try {
    if (BEFORE !== 'off') {
      worktree = addWorktree(BEFORE);
      console.log(`previous API: ${worktree.commit} (worktree ${worktree.dir})`);
    }
    for (const database of databases) {
      // The API's session settings (work_mem, jit), so a baseline statement runs as the API's does.
      const pool = createPool(database.url, { max: 2, settings: API_SESSION_SETTINGS });
      const listener = new pg.Client({ connectionString: database.url });
      // A lost connection (another run rebuilding the database drops it WITH (FORCE)) fails the next
      // change's wait instead of the whole process, so the API processes are still stopped below.
      listener.on('error', (error) => console.error(`${database.name}: this benchmark's listener failed: ${error.message}`));
      await listener.connect();
      await listener.query('LISTEN tile_changes');
      const env = { DATABASE_URL: database.url, DATA_DIR: dataDir, WORKER_ENABLED: 'false' };
      const api = await startApiProcess(env);
      const before = worktree
        ? await startServerProcess({ args: ['--import', 'tsx', 'services/api/src/server.ts'], cwd: worktree.dir, env: { PATH: process.env.PATH ?? '', PORT: '0', LOG_LEVEL: 'info', RATE_LIMIT_WRITES_PER_MINUTE: '0', ...env }, listening: /"port":(\d+),"database"/ })
        : undefined;
      // Should this process die without reaching `finally`, its API processes go with it.
      process.once('exit', () => {
        api.child.kill();
        before?.child.kill();
      });
      subjects.push({ database, pool, listener, api, before, samples: new Map(), bytes: new Map(), staleAnswers: 0, notifyMs: [], staleMs: [], changeSeqs: [] });
    }
    // Every tile built once and in memory (the first z10 builds at 1M take seconds), the previous API's too.
    for (const subject of subjects) {
      for (const t of TILES) {
        const first = await timed(() => warm(subject.api.base, t));
        console.log(`${subject.database.name} ${label(t)}: first answer and warm-up ${first.ms.toFixed(0)} ms, ${kb(first.value.bytes)}`);
        if (subject.before) {
          const url = `${subject.before.base}/api/tiles/${t.z}/${t.x}/${t.y}.mvt`;
          while ((await httpGet(url)).cache !== 'hit');
        }
      }
    }
    const rounds = HIT_ROUNDS;
    for (let i = 0; i < rounds; i++) {
      // Sizes interleaved, order rotating, so a slow minute of the machine hits every size alike.
      for (let k = 0; k < subjects.length; k++) await round(subjects[(i + k) % subjects.length]!, i);
      if ((i + 1) % 10 === 0) console.log(`round ${i + 1}/${rounds}`);
    }
    report(subjects);
  } finally {
    keepAlive.destroy();
    for (const subject of subjects) {
      await subject.api.stop();
      await subject.before?.stop();
      await subject.listener.end().catch(() => undefined);
      // What the benchmark wrote: its change rows (the features were never touched).
      if (subject.changeSeqs.length) await subject.pool.query('DELETE FROM features.tile_changes WHERE seq = ANY ($1::bigint[])', [subject.changeSeqs]).catch(() => undefined);
      await subject.pool.end();
    }
    worktree?.remove();
    rmSync(dataDir, { recursive: true, force: true });
    await dropCopies(databases);
  }
}

/**
 * A copy of each growth database for this run (CREATE DATABASE … TEMPLATE, a file copy: seconds for
 * 10k, about a minute for 1M), dropped at the end (and by the next run, should this one be killed): another run that rebuilds a growth database (a
 * changed migration or generator) drops it WITH (FORCE), which would end this one's connections
 * midway. A template must have no other sessions while it is copied: asked again for up to a minute.
 */
async function copies(databases: GrowthDatabase[]): Promise<GrowthDatabase[]> {
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  try {
    // Copies a run on this machine left behind when it was killed: no session, and its process gone.
    const { rows: left } = await admin.query<{ name: string }>(
      `SELECT datname AS name FROM pg_database d
       WHERE datname ~ '^fp_tile_growth_[0-9a-z]+_[0-9]+$' AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)`,
    );
    for (const { name } of left) {
      const pid = Number(name.slice(name.lastIndexOf('_') + 1));
      if (pid !== process.pid && !alive(pid)) await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)}`);
    }
    const copied: GrowthDatabase[] = [];
    try {
      await copyEach(admin, databases, copied);
    } catch (error) {
      await dropCopies(copied);
      throw error;
    }
    return copied;
  } finally {
    await admin.end();
  }
}

/** Copies each database in turn, adding each copy to `copied` as soon as it exists. */
async function copyEach(admin: pg.Client, databases: GrowthDatabase[], copied: GrowthDatabase[]): Promise<void> {
  for (const database of databases) {
    const name = `fp_tile_growth_${sizeLabel(database.size)}_${process.pid}`;
    for (let attempt = 1; ; attempt++) {
      try {
        await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)} TEMPLATE ${pg.escapeIdentifier(database.name)}`);
        break;
      } catch (error) {
        if (attempt >= 30 || !/being accessed by other users/.test((error as Error).message)) throw error;
        await new Promise((resolve) => setTimeout(resolve, 2_000));
      }
    }
    const url = new URL(database.url);
    url.pathname = `/${name}`;
    copied.push({ ...database, name, url: url.toString(), kind: `${database.kind} (copied to ${name})` });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function dropCopies(databases: GrowthDatabase[]): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  try {
    for (const { name } of databases) await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
  } finally {
    await admin.end();
  }
}

function report(subjects: Subject[]): void {
  const base = subjects[0]!;
  const p50 = (subject: Subject, name: string) => median(subject.samples.get(name) ?? []);
  for (const t of TILES) {
    const z = t.z;
    const overview = z < TILE_DETAIL_MIN_ZOOM;
    console.log(`\n${label(t)}${overview ? ' (overview)' : ''}: p50 / p90 ms; growth = p50 ÷ the ${sizeLabel(base.database.size)} p50`);
    printTable(
      subjects.map((s) => ({
        size: sizeLabel(s.database.size),
        'hit as a browser asks (gzip)': fmt(s.samples.get(`gzip hit ${z}`)),
        'its growth': ratio(p50(s, `gzip hit ${z}`), p50(base, `gzip hit ${z}`)),
        'hit, raw bytes': fmt(s.samples.get(`hit ${z}`)),
        'raw growth': ratio(p50(s, `hit ${z}`), p50(base, `hit ${z}`)),
        'hit ÷ own SQL': ratio(p50(s, `gzip hit ${z}`), p50(s, `own ${z}`)),
        'previous API hit': fmt(s.samples.get(`before hit ${z}`)),
        'previous ÷ now': s.before ? ratio(p50(s, `before hit ${z}`), p50(s, `hit ${z}`)) : '–',
        'miss (API)': fmt(s.samples.get(`miss ${z}`)),
        'miss ÷ own SQL': ratio(p50(s, `miss ${z}`), p50(s, `own ${z}`)),
        'own SQL': fmt(s.samples.get(`own ${z}`)),
        'own SQL growth': ratio(p50(s, `own ${z}`), p50(base, `own ${z}`)),
        naive: fmt(s.samples.get(`naive ${z}`)),
        'naive ÷ own SQL': ratio(p50(s, `naive ${z}`), p50(s, `own ${z}`)),
      })),
    );
  }
  console.log('\ntile bytes: the API (raw and gzip), its own SQL (must equal the API\'s raw bytes) and the naive query');
  printTable(
    subjects.flatMap((s) =>
      TILES.map((t) => ({
        size: sizeLabel(s.database.size),
        tile: label(t),
        API: kb(s.bytes.get(`api ${t.z}`)),
        'API gzip': kb(s.bytes.get(`gzip ${t.z}`)),
        'own SQL': kb(s.bytes.get(`own ${t.z}`)),
        naive: kb(s.bytes.get(`naive ${t.z}`)),
      })),
    ),
  );
  console.log(
    '\nchanges, the tile asked for the moment the writer saw its commit: how many answers still came from the cache (the API had not heard yet), for how long (ms from the commit to the first request answered with the rebuilt tile), and when the notification reached this process (ms after the commit; negative: before)',
  );
  printTable(
    subjects.map((s) => ({
      size: sizeLabel(s.database.size),
      changes: s.staleMs.length,
      'cache answers': s.staleAnswers,
      'changes answered stale': s.staleMs.filter((ms) => ms > 0).length,
      'stale for p50 / p90 / max ms': s.staleMs.length ? `${fmt(s.staleMs)} / ${Math.max(...s.staleMs).toFixed(1)}` : '–',
      'notified here p50 / p90 ms': fmt(s.notifyMs),
    })),
  );
  for (const s of subjects) {
    for (const t of TILES) {
      if (s.bytes.get(`api ${t.z}`) !== s.bytes.get(`own ${t.z}`)) console.log(`note: ${sizeLabel(s.database.size)} ${label(t)}: the API's bytes differ from its own SQL's`);
    }
  }
}

await main();
