/**
 * Framework benchmark (`npm run bench -- framework`): the API on Fastify (this checkout, working tree
 * included) against what it replaced and against no framework at all, every side measured in the
 * same run, in interleaved rounds (the order rotating each round, so each side runs first, middle and
 * last alike), each figure a median and each verdict a ratio of two sides of the same run. Issue 28,
 * "Must show", the API part.
 *
 * Run: `TEST_DATABASE_URL=postgres://postgres@127.0.0.1:55432/postgres npm run bench -- framework`
 * (or BENCH_DATABASE_URL; a PostGIS with ST_AsMVT is needed: without either URL it says so and
 * stops). It copies the 100 000-feature grid database (bench/grid-database.ts), adds a `git worktree`
 * of the commit before the move in a temporary folder (removed at the end), compiles both trees as the
 * API image does (bench/support.ts buildApi) and starts, each in a process of its own:
 *   - **Fastify API**: this checkout's services/api, `node services/api/src/server.js`;
 *   - **before the move**: the same at FRAMEWORK_BEFORE_COMMIT (default 7b1707f, main before the
 *     move): Express with its hand-written fast paths, i.e. createApp's default;
 *   - **bare node:http**: BARE_SERVER below, node:http + pg and nothing else, running the SQL texts the
 *     API's own query functions produce (features/queries.ts), with the API's session settings.
 * All three run with the API's V8 flags (services/shared/node-flags.ts, as the image's command
 * does: no allocation-site pretenuring, which could leave whichever process is loaded first after
 * start at 1.7× the list's CPU; 16 MiB semi-spaces), so the sides differ in their code only. All
 * three get the same database, the same DATA_DIR (one development signing key, so one token works
 * on both APIs), RATE_LIMIT_WRITES_PER_MINUTE=0 and WORKER_ENABLED=false (no QC worker in the
 * process: it is not HTTP, and `npm run worker` runs it apart). The client is autocannon in this
 * process, 16 connections with keep-alive, no gzip asked for, one side at a time, each after a
 * warm-up (10 s) and then once per round.
 *
 * Rows (req/s and the server process's CPU time per request, user + system from /proc/<pid>/stat,
 * for each side; "ratio" is Fastify ÷ baseline of the median req/s, "per round" the median of each
 * round's own ratio, which a slow moment of the shared machine moves less):
 *   (a) against before the move, target ≥ 1.0× req/s each:
 *       GET /api/features/{id} (anonymous, the feature exists: the old read fast path);
 *       POST /api/features (a Bearer token, a 5-position polygon: the old create fast path);
 *       GET /api/tiles/10/526/510.mvt, a cache hit (nothing writes in that tile during the run: the
 *       old tile fast path, which ran the tile's fingerprint query per hit; today's API answers a hit
 *       without a query while its change listener is connected, so this row measures that change as
 *       much as the framework). Same bytes checked first.
 *   (b) against bare node:http:
 *       GET by id ≥ 0.9× (getFeature's SQL, the stored GeoJSON sent as it is);
 *       POST ≥ 0.9× the raw five-statement transaction (BEGIN, set_config, ST_IsValid, INSERT, COMMIT:
 *       how a create ran before migration 007, each step doing what features.api_insert does, the
 *       winding included, in five round trips), and as an extra, stronger row ≥ 0.9× the single
 *       `features.api_insert` statement the API itself runs (issue 29's honest baseline);
 *       the 1 000-feature list (GET /api/features?bbox=…&limit=1000 on the grid) ≤ 1.1× the time of the
 *       same listFeatures SQL served by bare node:http (the page written as the API writes it: each
 *       stored text encoded once into one Buffer), i.e. req/s ≥ 1/1.1 = 0.91× (byte-equal body checked
 *       first). The list before the move runs in the same rounds as an extra row.
 *   (c) idle RSS: fresh processes, each answers one GET by id, then 2 s of quiet, then VmRSS; rounds
 *       rotate; the Fastify API ≤ 1.5× the bare node:http + pg process. The same two processes again
 *       after 30 s of quiet (RSS_IDLE_MS): by then V8's memory reducer has run its idle
 *       "Mark-Compact (reduce)" (about 16 s after start in --trace-gc), which gives back the young
 *       generation that start-up grew to its 16 MiB semi-spaces; 2 s after the GET that has not
 *       happened yet. Both moments are reported, each with its verdict. Extra rows: the API before the
 *       move, the Fastify API with its QC worker on (its default), and each long-running process's RSS
 *       after all the load.
 * Nothing is asserted: the table says pass or miss. Throughput depends on what the database and the
 * client get of the same cores; the CPU columns are the server process's own cost and steadier.
 *
 * Options: BENCH_QUICK=1 (short rounds, a smoke run); FRAMEWORK_PARTS=get,post,tile,list,rss (default
 * all); FRAMEWORK_BEFORE_COMMIT; FRAMEWORK_AFTER_TREE, another source tree (services/api,
 * services/shared, config, package.json) as the Fastify side, to measure a change before making it;
 * FRAMEWORK_API_NODE_ARGS, node flags for the Fastify API process,
 * e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof" (the profile is written when it stops; run one part at a
 * time to profile it alone). On a loaded machine V8's profiler bills time the thread spent
 * descheduled to the frame it was in (writev held 60 % of one such profile); `perf record -p <pid>`
 * counts CPU only.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { loadOrCreateDevKeys } from '../services/api/src/auth/dev-keys.js';
import { API_SESSION_SETTINGS } from '../services/api/src/db/pool.js';
import { getFeature, insertFeature, listFeatures } from '../services/api/src/features/queries.js';
import { API_NODE_FLAGS } from '../services/shared/node-flags.js';
import { CREATE_BODY, createLoad, FEATURE_ID, LIST_BBOX, LIST_LIMIT, LIST_QUERY, TILE } from './api-loads.js';
import { GRID_TOTAL } from './feature-grid.js';
import { openGridDatabase } from './grid-database.js';
import { median, printTable } from './stats.js';
import {
  addWorktree,
  buildApi,
  loadServer,
  repoRoot,
  residentMiB,
  RSS_IDLE_MS,
  RSS_SETTLE_MS,
  startBuiltApiProcess,
  startServerProcess,
  type ApiProcess,
  type BuiltApi,
  type Load,
  type Sample,
  type Worktree,
} from './support.js';

const quick = process.env.BENCH_QUICK === '1';
const parts = new Set((process.env.FRAMEWORK_PARTS ?? 'get,post,tile,list,rss').split(',').map((part) => part.trim()));
const BEFORE_COMMIT = process.env.FRAMEWORK_BEFORE_COMMIT ?? '7b1707f';
/** The tree the Fastify side is built from: this checkout, or a copy with a change to try. */
const AFTER_TREE = process.env.FRAMEWORK_AFTER_TREE ?? repoRoot;
const SECONDS = quick ? 2 : 4;
const WARM_UP_SECONDS = quick ? 2 : 10;
const CONNECTIONS = 16;
const RSS_ROUNDS = quick ? 1 : 3;

/**
 * The baseline without a framework: node:http and a pg pool of the API's size (10) with the API's
 * session settings, nothing else loaded. Its SQL comes from the API's own query functions (BARE_SQL,
 * built below), so both run the same statements; what it leaves out is what a framework and the
 * app around the SQL do (routing, hooks, authentication, validation, problem+json). Plain JavaScript
 * run by `node -e`, as images.bench.ts' floor, so its memory is that of node:http + pg alone.
 */
const BARE_SERVER = `
import { createServer } from 'node:http';
import pg from 'pg';
const sql = JSON.parse(process.env.BARE_SQL);
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10, options: process.env.PG_OPTIONS, application_name: 'bench-bare' });
pool.on('error', () => undefined);
await pool.query('SELECT 1');
const GEOJSON = 'application/geo+json; charset=utf-8';
const readBody = (req) => new Promise((resolve, reject) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => resolve(JSON.parse(Buffer.concat(chunks).toString('utf8'))));
  req.on('error', reject);
});
const created = (res, row) =>
  res.writeHead(201, { 'Content-Type': GEOJSON, Location: '/api/features/' + encodeURIComponent(row.id), ETag: '"' + row.version + '"' }).end(row.featureJson);
async function handle(req, res) {
  const url = req.url;
  if (req.method === 'GET' && url.startsWith('/api/features/')) {
    const { rows } = await pool.query({ ...sql.get, values: [decodeURIComponent(url.slice('/api/features/'.length))] });
    if (!rows[0]) return res.writeHead(404).end();
    return res.writeHead(200, { 'Content-Type': GEOJSON, ETag: '"' + rows[0].version + '"', 'Cache-Control': 'no-cache' }).end(rows[0].featureJson);
  }
  if (req.method === 'GET' && url === '/list') {
    const { rows } = await pool.query({ text: sql.list.text, values: sql.list.values, rowMode: 'array' });
    if (rows.length > sql.listLimit || rows.some((row) => row[1] === null)) throw new Error('the bbox must hold exactly one page');
    // Each stored text encoded once into one Buffer of its exact size, as the API writes a page.
    const head = '{"type":"FeatureCollection","numberReturned":' + rows.length + ',"links":[],"features":[';
    let size = Buffer.byteLength(head) + 2 + Math.max(0, rows.length - 1);
    for (const row of rows) size += row[2] = Buffer.byteLength(row[1]);
    const body = Buffer.allocUnsafe(size);
    let at = body.write(head);
    for (let i = 0; i < rows.length; i++) {
      if (i > 0) body[at++] = 0x2c;
      at += body.write(rows[i][1], at, rows[i][2], 'utf8');
    }
    body.write(']}', at);
    return res.writeHead(200, { 'Content-Type': GEOJSON }).end(body);
  }
  if (req.method === 'POST' && url === '/single') {
    const { geometry, properties: p } = await readBody(req);
    const { rows } = await pool.query({ ...sql.insert, values: ['bench', null, p.name, p.kategorie, p.adresse ?? null, p.telefon ?? null, JSON.stringify(geometry)] });
    return created(res, rows[0]);
  }
  if (req.method === 'POST' && url === '/raw5') {
    const { geometry, properties: p } = await readBody(req);
    const text = JSON.stringify(geometry);
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query("SELECT set_config('app.actor', $1::text, true)", ['bench']);
      const check = await client.query('SELECT ST_IsValid(g) AS valid, ST_IsValidReason(g) AS reason FROM ST_GeomFromGeoJSON($1::text) AS g', [text]);
      if (!check.rows[0].valid) throw new Error(check.rows[0].reason);
      const { rows } = await client.query(
        "INSERT INTO features.features AS f (id, name, kategorie, adresse, telefon, geom, created_by) VALUES (gen_random_uuid()::text, $1::text, $2::text, $3::text, $4::text, features.rfc7946_winding(ST_SetSRID(ST_GeomFromGeoJSON($5::text), 4326)), 'bench') RETURNING f.id, f.version, f.geojson AS \\"featureJson\\"",
        [p.name, p.kategorie, p.adresse ?? null, p.telefon ?? null, text],
      );
      await client.query('COMMIT');
      return created(res, rows[0]);
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    } finally {
      client.release();
    }
  }
  res.writeHead(404).end();
}
const server = createServer((req, res) => {
  handle(req, res).catch((error) => {
    console.error(error);
    if (res.headersSent) res.destroy();
    else res.writeHead(500).end();
  });
});
server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ bare: 'listening', port: server.address().port })));
process.once('SIGTERM', () => server.close(() => pool.end().then(() => process.exit(0))));
`;

/** The SQL the bare server runs: the API's own, from its query functions, named as the API names them (prepared once per connection). */
function bareSql(): string {
  const list = listFeatures({ bbox: LIST_BBOX, limit: LIST_LIMIT });
  const statement = ({ name, text }: { name?: string; text: string }) => ({ name, text });
  return JSON.stringify({
    get: statement(getFeature('')),
    insert: statement(insertFeature(undefined, { name: '', kategorie: 'blumenbeet', adresse: null, telefon: null, geometryJson: '' }, null)),
    list: { text: list.text, values: list.values },
    listLimit: LIST_LIMIT,
  });
}

const sessionOptions = Object.entries(API_SESSION_SETTINGS)
  .map(([name, value]) => `-c ${name}=${value}`)
  .join(' ');

function startBare(databaseUrl: string): Promise<ApiProcess> {
  return startServerProcess({
    // The API's V8 flags too (every side runs with them): the sides differ in their code only.
    args: [...API_NODE_FLAGS, '--input-type=module', '-e', BARE_SERVER],
    cwd: repoRoot,
    env: { DATABASE_URL: databaseUrl, PG_OPTIONS: sessionOptions, BARE_SQL: bareSql() },
    listening: /"bare":"listening","port":(\d+)/,
  });
}

// --- the client ---------------------------------------------------------------------------------

const agent = new Agent({ keepAlive: true, maxSockets: 1 });

/** One request through node:http (for the checks before the load), the whole body kept. */
function call(url: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: options.method ?? 'GET', headers: options.headers, agent }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks) }));
      response.on('error', reject);
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

/** `SECONDS` of autocannon against one server, `CONNECTIONS` connections (bench/support.ts loadServer). */
const measure = (server: ApiProcess, load: Load, seconds = SECONDS): Promise<Sample> => loadServer(server, load, { seconds, connections: CONNECTIONS });

interface Side {
  name: string;
  server: ApiProcess;
  load: Load;
}

/**
 * Every side once per round, the order rotating by one each round; a warm-up run of each first
 * (not counted), so the JIT and the pools are warm on all sides before the first round. The warm-up
 * is long on purpose: measured with perf, the Fastify API was still spending 14 % of its CPU in
 * V8's optimising compiler 3 s into a POST load (the Express fast path, less code, 7 %), and its CPU
 * per request fell from 487 to 293 µs with 15 s of warm-up.
 */
async function interleave(title: string, sides: Side[]): Promise<Map<string, Sample[]>> {
  const rounds = quick ? sides.length : Math.max(6, 2 * sides.length);
  console.log(`\n${title}: ${sides.length} sides × ${rounds} rounds of ${SECONDS} s, ${CONNECTIONS} connections, after ${WARM_UP_SECONDS} s of warm-up each…`);
  for (const side of sides) await measure(side.server, side.load, WARM_UP_SECONDS);
  const samples = new Map<string, Sample[]>(sides.map((side) => [side.name, []]));
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < sides.length; i++) {
      const side = sides[(round + i) % sides.length]!;
      samples.get(side.name)!.push(await measure(side.server, side.load));
    }
    const line = sides.map((side) => `${side.name} ${Math.round(samples.get(side.name)!.at(-1)!.perSecond)}`).join(', ');
    console.log(`  round ${round + 1}/${rounds}: ${line} req/s`);
  }
  return samples;
}

interface Comparison {
  group: string;
  scenario: string;
  side: string;
  baseline: string;
  /** Fastify ÷ baseline req/s at least this; undefined: no target (an extra row for context). */
  atLeast?: number;
  target: string;
  extra?: boolean;
}

function compare(samples: Map<string, Sample[]>, c: Comparison): Record<string, string | number> {
  const a = samples.get(c.side)!;
  const b = samples.get(c.baseline)!;
  const rate = (s: Sample[]) => median(s.map((x) => x.perSecond));
  const cpu = (s: Sample[]) => median(s.map((x) => x.cpuMicros));
  const ratio = rate(a) / rate(b);
  // Each round's side and baseline ran back to back: a slow moment of the machine hit both.
  const perRound = median(a.map((x, i) => x.perSecond / b[i]!.perSecond));
  return {
    '': c.group,
    scenario: c.scenario,
    side: c.side,
    'req/s': Math.round(rate(a)),
    baseline: c.baseline,
    'baseline req/s': Math.round(rate(b)),
    ratio: `${ratio.toFixed(2)}×`,
    'per round': `${perRound.toFixed(2)}×`,
    target: c.target,
    verdict: c.atLeast === undefined ? '—' : `${ratio >= c.atLeast ? 'pass' : 'MISS'}${c.extra ? ' (extra)' : ''}`,
    'CPU µs/req': Math.round(cpu(a)),
    'baseline CPU µs/req': Math.round(cpu(b)),
    'CPU ratio': `${(cpu(a) / cpu(b)).toFixed(2)}×`,
  };
}

// --- the checks before the load: same answers, or the comparison means nothing ------------------

async function checkSameFeature(servers: ApiProcess[]): Promise<void> {
  const bodies = await Promise.all(servers.map((s) => call(`${s.base}/api/features/${FEATURE_ID}`)));
  for (const [i, answer] of bodies.entries()) {
    if (answer.status !== 200 || !answer.body.equals(bodies[0]!.body)) throw new Error(`GET by id: ${servers[i]!.base} answered ${answer.status}, not the same body`);
  }
}

async function checkSameList(api: ApiProcess, before: ApiProcess, bare: ApiProcess): Promise<void> {
  const fastify = await call(`${api.base}/api/features?${LIST_QUERY}`);
  const raw = await call(`${bare.base}/list`);
  const old = await call(`${before.base}/api/features?${LIST_QUERY}`);
  const features = (body: Buffer) => (JSON.parse(body.toString('utf8')) as { features: unknown[] }).features;
  if (fastify.status !== 200 || !fastify.body.equals(raw.body)) throw new Error(`list: the API's body (${fastify.status}, ${fastify.body.length} bytes) differs from the bare server's (${raw.body.length} bytes)`);
  if (features(fastify.body).length !== LIST_LIMIT) throw new Error(`list: ${features(fastify.body).length} features, expected ${LIST_LIMIT}`);
  if (old.status !== 200 || !isDeepStrictEqual(features(old.body), features(fastify.body))) throw new Error('list: the API before the move lists other features');
}

async function checkSameTile(api: ApiProcess, before: ApiProcess): Promise<void> {
  const [a, b] = await Promise.all([call(`${api.base}/api/tiles/${TILE}.mvt`), call(`${before.base}/api/tiles/${TILE}.mvt`)]);
  if (a.status !== 200 || b.status !== 200 || !a.body.equals(b.body) || a.body.length < 1_000) throw new Error(`tile ${TILE}: ${a.status}/${b.status}, ${a.body.length} vs ${b.body.length} bytes`);
  // Built and cached by the requests above: the load then measures hits only.
  await checkTileHit([api, before]);
}

async function checkTileHit(servers: ApiProcess[]): Promise<void> {
  for (const server of servers) {
    const timing = String((await call(`${server.base}/api/tiles/${TILE}.mvt`)).headers['server-timing']);
    if (!/cache;desc=hit/.test(timing)) throw new Error(`tile ${TILE} from ${server.base} was not a cache hit (${timing})`);
  }
}

async function checkCreates(token: string, targets: Array<[ApiProcess, string]>): Promise<void> {
  for (const [server, path] of targets) {
    const answer = await call(`${server.base}${path}`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: CREATE_BODY });
    const feature = answer.status === 201 ? (JSON.parse(answer.body.toString('utf8')) as { properties?: { name?: string } }) : undefined;
    if (feature?.properties?.name !== 'Benchmark') throw new Error(`POST ${server.base}${path}: ${answer.status} ${answer.body.toString('utf8').slice(0, 200)}`);
  }
}

// --- idle memory -------------------------------------------------------------------------------

/**
 * A fresh process, one GET by id, RSS_SETTLE_MS of quiet, then its VmRSS; with `idle`, its VmRSS
 * again once RSS_IDLE_MS have passed since the GET.
 */
async function idleRss(start: () => Promise<ApiProcess>, path: string, idle: boolean): Promise<{ settled: number; idle?: number }> {
  const server = await start();
  try {
    const answer = await call(`${server.base}${path}`);
    if (answer.status !== 200) throw new Error(`${server.base}${path}: ${answer.status}`);
    agent.destroy(); // no connection of ours held open while it idles
    await new Promise((resolve) => setTimeout(resolve, RSS_SETTLE_MS));
    const settled = residentMiB(server.child.pid!);
    if (!idle) return { settled };
    await new Promise((resolve) => setTimeout(resolve, RSS_IDLE_MS - RSS_SETTLE_MS));
    return { settled, idle: residentMiB(server.child.pid!) };
  } finally {
    await server.stop();
  }
}

/** What the Fastify side is: this checkout's commit, and whether the API's sources differ from it. */
function checkoutState(): string {
  const git = (...args: string[]) => spawnSync('git', args, { cwd: repoRoot, encoding: 'utf8' }).stdout.trim();
  const changed = git('status', '--porcelain', '--', 'services/api', 'services/shared').split('\n').filter(Boolean).length;
  return `this checkout at ${git('rev-parse', '--short', 'HEAD')}${changed ? ` with ${changed} uncommitted file(s) under services/api and services/shared` : ''}`;
}

/** The machine's load, printed at the start and the end: the figures are only as quiet as it was. */
const load = () => `load average ${loadavg().map((x) => x.toFixed(2)).join(', ')} (1, 5, 15 min) on ${availableParallelism()} cores`;

async function main(): Promise<void> {
  if (!process.env.BENCH_DATABASE_URL && !process.env.TEST_DATABASE_URL) {
    console.log('framework: skipped — it needs a PostgreSQL with PostGIS (tiles: ST_AsMVT) shared by several processes; set BENCH_DATABASE_URL or TEST_DATABASE_URL');
    return;
  }
  const started = performance.now();
  const database = await openGridDatabase('framework');
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-framework-'));
  const running: ApiProcess[] = [];
  let worktree: Worktree | undefined;
  const builds: BuiltApi[] = [];
  try {
    worktree = addWorktree(BEFORE_COMMIT);
    const [after, before] = await Promise.all([buildApi(AFTER_TREE, 'fastify'), buildApi(worktree.dir, `before-${worktree.commit}`)]);
    builds.push(after, before);
    console.log(`database: ${database.kind}, ${GRID_TOTAL.toLocaleString('en')} features`);
    console.log(`Fastify API: ${AFTER_TREE === repoRoot ? checkoutState() : AFTER_TREE}; before the move: ${worktree.commit} (worktree ${worktree.dir}); both compiled in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    console.log(`start: ${load()}`);

    const env = { DATABASE_URL: database.url, DATA_DIR: dataDir, WORKER_ENABLED: 'false' };
    const nodeArgs = (process.env.FRAMEWORK_API_NODE_ARGS ?? '').split(' ').filter(Boolean);
    const startFastify = (extra: Record<string, string> = {}) => startBuiltApiProcess(after, { ...env, ...extra }, nodeArgs);
    const startBefore = () => startBuiltApiProcess(before, env);
    const startBareServer = () => startBare(database.url);
    const token = await (await loadOrCreateDevKeys(dataDir)).sign({ sub: 'bench', role: 'admin' });
    const post = (path: string): Load => createLoad(token, path);

    const rows: Record<string, string | number>[] = [];
    const rss: Record<string, string | number>[] = [];
    const longRunning: Array<[string, ApiProcess]> = [];
    if (['get', 'post', 'tile', 'list'].some((part) => parts.has(part))) {
      const api = await startFastify();
      const old = await startBefore();
      const bare = await startBareServer();
      running.push(api, old, bare);
      longRunning.push(['Fastify API', api], ['before the move', old], ['bare node:http + pg', bare]);
      const FASTIFY = 'Fastify API';
      const BEFORE = `before (${worktree.commit}, Express + fast paths)`;
      if (parts.has('get')) {
        await checkSameFeature([api, old, bare]);
        const path = `/api/features/${FEATURE_ID}`;
        const samples = await interleave('GET /api/features/{id}', [
          { name: FASTIFY, server: api, load: { path } },
          { name: BEFORE, server: old, load: { path } },
          { name: 'bare: getFeature', server: bare, load: { path } },
        ]);
        rows.push(compare(samples, { group: '(a)', scenario: 'GET /api/features/{id}', side: FASTIFY, baseline: BEFORE, atLeast: 1.0, target: '≥ 1.00×' }));
        rows.push(compare(samples, { group: '(b)', scenario: 'GET /api/features/{id}', side: FASTIFY, baseline: 'bare: getFeature', atLeast: 0.9, target: '≥ 0.90×' }));
      }
      if (parts.has('post')) {
        await checkCreates(token, [[api, '/api/features'], [old, '/api/features'], [bare, '/raw5'], [bare, '/single']]);
        const samples = await interleave('POST /api/features', [
          { name: FASTIFY, server: api, load: post('/api/features') },
          { name: BEFORE, server: old, load: post('/api/features') },
          { name: 'bare: 5-statement transaction', server: bare, load: post('/raw5') },
          { name: 'bare: features.api_insert', server: bare, load: post('/single') },
        ]);
        rows.push(compare(samples, { group: '(a)', scenario: 'POST /api/features', side: FASTIFY, baseline: BEFORE, atLeast: 1.0, target: '≥ 1.00×' }));
        rows.push(compare(samples, { group: '(b)', scenario: 'POST /api/features', side: FASTIFY, baseline: 'bare: 5-statement transaction', atLeast: 0.9, target: '≥ 0.90×' }));
        rows.push(compare(samples, { group: '(b)', scenario: 'POST /api/features', side: FASTIFY, baseline: 'bare: features.api_insert', atLeast: 0.9, target: '≥ 0.90×', extra: true }));
      }
      if (parts.has('tile')) {
        await checkSameTile(api, old);
        const path = `/api/tiles/${TILE}.mvt`;
        const samples = await interleave(`GET /api/tiles/${TILE}.mvt (cache hit)`, [
          { name: FASTIFY, server: api, load: { path } },
          { name: BEFORE, server: old, load: { path } },
        ]);
        await checkTileHit([api, old]);
        rows.push(compare(samples, { group: '(a)', scenario: `tile hit ${TILE}`, side: FASTIFY, baseline: BEFORE, atLeast: 1.0, target: '≥ 1.00×' }));
      }
      if (parts.has('list')) {
        await checkSameList(api, old, bare);
        const path = `/api/features?${LIST_QUERY}`;
        const samples = await interleave('GET /api/features?bbox=…&limit=1000', [
          { name: FASTIFY, server: api, load: { path } },
          { name: 'bare: listFeatures', server: bare, load: { path: '/list' } },
          { name: BEFORE, server: old, load: { path } },
        ]);
        rows.push(compare(samples, { group: '(b)', scenario: 'list 1 000 features', side: FASTIFY, baseline: 'bare: listFeatures', atLeast: 1 / 1.1, target: '≥ 0.91× (time ≤ 1.1×)' }));
        rows.push(compare(samples, { group: '(a)', scenario: 'list 1 000 features', side: FASTIFY, baseline: BEFORE, target: 'none (context)' }));
      }
      for (const [name, server] of longRunning) rss.push({ process: name, when: 'after the load, idle again', 'VmRSS MiB': residentMiB(server.child.pid!).toFixed(1), ratio: '', target: '', verdict: '' });
      agent.destroy();
      await Promise.all(running.splice(0).map((server) => server.stop()));
    }

    if (parts.has('rss')) {
      console.log(
        `\nidle RSS: fresh processes, one GET each, ${RSS_SETTLE_MS / 1000} s of quiet (the Fastify API and bare also ${RSS_IDLE_MS / 1000} s), ${RSS_ROUNDS} rounds…`,
      );
      const sides: Array<[string, () => Promise<ApiProcess>, string, boolean]> = [
        ['Fastify API', () => startFastify(), `/api/features/${FEATURE_ID}`, true],
        ['bare node:http + pg', startBareServer, `/api/features/${FEATURE_ID}`, true],
        [`before the move (${worktree.commit})`, startBefore, `/api/features/${FEATURE_ID}`, false],
        ['Fastify API with its QC worker (WORKER_ENABLED default)', () => startFastify({ WORKER_ENABLED: 'true' }), `/api/features/${FEATURE_ID}`, false],
      ];
      const settled = new Map<string, number[]>(sides.map(([name]) => [name, []]));
      const idle = new Map<string, number[]>(sides.map(([name]) => [name, []]));
      for (let round = 0; round < RSS_ROUNDS; round++) {
        for (let i = 0; i < sides.length; i++) {
          const [name, start, path, alsoIdle] = sides[(round + i) % sides.length]!;
          const reading = await idleRss(start, path, alsoIdle);
          settled.get(name)!.push(reading.settled);
          if (reading.idle !== undefined) idle.get(name)!.push(reading.idle);
        }
      }
      const rowsAt = (samples: Map<string, number[]>, when: string) => {
        const bareRss = median(samples.get('bare node:http + pg')!);
        return sides
          .filter(([name]) => samples.get(name)!.length > 0)
          .map(([name]) => {
            const mib = median(samples.get(name)!);
            const isApi = name === 'Fastify API';
            return {
              process: name,
              when,
              'VmRSS MiB': mib.toFixed(1),
              ratio: name.startsWith('bare') ? '' : `${(mib / bareRss).toFixed(2)}× bare`,
              target: isApi ? '≤ 1.50×' : '',
              verdict: isApi ? (mib / bareRss <= 1.5 ? 'pass' : 'MISS') : name.startsWith('bare') ? '' : '(extra)',
            };
          });
      };
      rss.unshift(
        ...rowsAt(settled, `fresh, ${RSS_SETTLE_MS / 1000} s after one GET`),
        ...rowsAt(idle, `fresh, ${RSS_IDLE_MS / 1000} s after one GET`),
      );
    }

    console.log(`\nfinished: ${load()}`);
    if (rows.length) {
      console.log(`\nthroughput and server CPU per request (medians of interleaved rounds; ratio = Fastify ÷ baseline req/s):`);
      printTable(rows);
    }
    if (rss.length) {
      console.log('\nresident memory (VmRSS; medians of fresh starts):');
      printTable(rss);
    }
  } finally {
    agent.destroy();
    await Promise.all(running.map((server) => server.stop()));
    for (const build of builds) build.remove();
    worktree?.remove();
    await database.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
