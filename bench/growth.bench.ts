/**
 * Growth benchmark (`npm run bench -- growth`): does a request cost the same at 10 000, 100 000 and
 * 1 000 000 features, and what does the API cost against the best baseline doing the same work?
 *
 * 1. Growth. The same requests against one API process per database (bench/million.ts: the same city
 *    with 10k, 100k and 1M realistic features), interleaved: every round asks each database once per
 *    request, the order of the databases rotating, so a slow moment of a shared machine lands on all
 *    of them. Median and p90 time per request, and its ratio at 1M to 10k.
 *    - a 1 000-row page of a district (GET /api/features?bbox=…&limit=1000, about 12 % of the
 *      features: 1 250 at 10k, 125 000 at 1M). Target: ≤ 1.5× its 10k time at 1M.
 *    - GET /api/features/:id (ids present in all three). Target: flat (≤ 1.5×).
 *    - extra rows: a neighbourhood page (1.1 % of the features: 110 rows at 10k, 1 000 at 1M; the page
 *      is not the same size at each, so no target), the first 1 000 without a bbox, the district
 *      page through /ogcapi.
 * 2. Honest baselines, each measured in the same run, interleaved, with CPU counted on both sides as
 *    the process's time plus its PostgreSQL backends' time (Linux /proc; the backends found by the
 *    process's connections), per request:
 *    - the district page at 1M against the API's own SQL behind a bare node:http server in a process
 *      of its own (bench/bare-list-server.ts: same statements, same bytes, no framework). Target:
 *      time ≤ 1.1×.
 *    - POST /api/features (16 clients) against the single statement the API runs
 *      (features.api_insert, features/queries.ts insertFeature) from 16 workers. Target: CPU ≤ 1.5×.
 *    - an approval with its jobs (the QC service's transaction with its outbox rows, the relay, the
 *      worker running the three jobs and mailing the submitter's notice; their targets are not
 *      configured, so each records 'skipped': what is measured is the queue's own cost) against the
 *      same transaction without the queue (bench/qc-queue.ts approveWithoutQueue: lock, status,
 *      transition, the notice the app shows; the service's statements, named as the service names them). Both sides in this process, the worker included, CPU
 *      counted alike. Target: CPU ≤ 1.5×. A third side, the worker without graphile's batched
 *      completion, in the same rotating rounds (BENCH_APPROVE_ROUNDS, default 6).
 *    POST and approvals write, so they run on a copy of the 100k database, dropped at the end.
 *
 * The API runs as its own process (services/api/src/server.ts), as in production. Figures from a
 * shared machine move with its load, printed at the start and the end.
 *
 * Database: BENCH_DATABASE_URL or TEST_DATABASE_URL (a PostgreSQL superuser URL); the growth databases
 * are built once and kept (bench/million.ts). Without a server it says so and stops: the embedded
 * PGlite is a development database, not one for a million features. BENCH_QUICK=1 shortens every part;
 * BENCH_GROWTH_PARTS=growth,list,post,approve runs only the named parts (default: all).
 */
import { readdirSync, readFileSync, readlinkSync, mkdtempSync, rmSync } from 'node:fs';
import { Agent, get } from 'node:http';
import { loadavg, tmpdir, cpus } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';
import { pino } from 'pino';
import { loadOrCreateDevKeys } from '../services/api/src/auth/dev-keys.js';
import { ExportsEnvSchema, exportsSettingsFrom } from '../services/api/src/exports/config.js';
import { insertFeature } from '../services/api/src/features/queries.js';
import { createQcService } from '../services/api/src/qc/service.js';
import { migrateQueue } from '../services/api/src/qc/queue.js';
import { startQcWorker } from '../services/api/src/qc/worker.js';
import { deliverNotices } from '../services/api/src/notifications/contributor-notice.js';
import { adminUrl, databaseName, featureId, openGrowthDatabases, type GrowthDatabase } from './million.js';
import { approveWithoutQueue, BENCH_REVIEWER, inFlight, seedSubmissions } from './qc-queue.js';
import { median, percentile, printTable, ratio } from './stats.js';
import { processCpuMicros, repoRoot, startApiProcess, startServerProcess, type ApiProcess } from './support.js';

const quick = process.env.BENCH_QUICK === '1';
const PARTS = new Set((process.env.BENCH_GROWTH_PARTS ?? 'growth,list,post,approve').split(',').map((p) => p.trim()));

const DISTRICT = '13.36,52.47,13.48,52.54';
const NEIGHBOURHOOD = '13.40,52.495,13.43,52.515';
const PAGE = `/api/features?bbox=${DISTRICT}&limit=1000`;

// --- measuring ----------------------------------------------------------------------------------------

interface Answer {
  status: number;
  body: Buffer;
}

function httpGet(agent: Agent, url: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    get(url, { agent }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks) }));
      response.on('error', reject);
    }).on('error', reject);
  });
}

/** The PostgreSQL server's port, to find a process's connections to it. */
const PG_PORT = Number(new URL(adminUrl() ?? 'postgres://localhost:5432/').port || 5432);

/**
 * The backends serving a process: its TCP connections to the server (socket inodes of /proc/<pid>/fd
 * found in /proc/<pid>/net/tcp with the server's port as the remote one), matched by their client
 * port in pg_stat_activity. `except` leaves out connections the benchmark itself uses.
 */
async function backendsOf(admin: pg.Client, pid: number, except: readonly number[] = []): Promise<number[]> {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (match) inodes.add(match[1]!);
    } catch {
      // closed meanwhile
    }
  }
  const ports: number[] = [];
  for (const table of ['tcp', 'tcp6']) {
    let text = '';
    try {
      text = readFileSync(`/proc/${pid}/net/${table}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields.length < 10 || !inodes.has(fields[9]!)) continue;
      if (parseInt(fields[2]!.split(':')[1]!, 16) === PG_PORT) ports.push(parseInt(fields[1]!.split(':')[1]!, 16));
    }
  }
  if (ports.length === 0) return [];
  const { rows } = await admin.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE client_port = ANY ($1::int[]) AND NOT (pid = ANY ($2::int[]))`, [ports, except]);
  return rows.map((r) => r.pid);
}

/** CPU time so far of a process and of the backends serving it, µs each, by pid. */
type CpuSnapshot = Map<number, number>;

async function cpuSnapshot(admin: pg.Client, pid: number, except: readonly number[] = []): Promise<CpuSnapshot> {
  const snapshot: CpuSnapshot = new Map([[pid, processCpuMicros(pid)]]);
  for (const backend of await backendsOf(admin, pid, except)) {
    try {
      snapshot.set(backend, processCpuMicros(backend));
    } catch {
      // ended meanwhile
    }
  }
  return snapshot;
}

/** The server's WAL insert position. */
async function walPosition(admin: pg.Client): Promise<string> {
  return (await admin.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn')).rows[0]!.lsn;
}

/** WAL bytes written since `position`. */
async function walBytesSince(admin: pg.Client, position: string): Promise<number> {
  return Number((await admin.query<{ bytes: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn) AS bytes', [position])).rows[0]!.bytes);
}

/** CPU used between two snapshots; a backend that appeared meanwhile counts from zero. */
function cpuBetween(before: CpuSnapshot, after: CpuSnapshot): number {
  let used = 0;
  for (const [pid, micros] of after) used += micros - (before.get(pid) ?? 0);
  return used;
}

const ms = (value: number) => value.toFixed(1);
/** 10k, 100k, 1M. */
const sizeLabel = (size: number) => (size >= 1_000_000 ? `${size / 1_000_000}M` : `${size / 1_000}k`);

// --- 1. growth ----------------------------------------------------------------------------------------

interface Probe {
  name: string;
  path: (round: number) => string;
  target?: string;
  /** Features each answer must hold, at every size. */
  features?: number;
}

/** Ids of features 1…10 000, which every size holds. */
const IDS = Array.from({ length: 64 }, (_, i) => featureId(1 + i * 151));

const PROBES: Probe[] = [
  { name: 'list page, 1 000 of a district', path: () => PAGE, target: '≤ 1.50×', features: 1000 },
  { name: 'GET /api/features/:id', path: (round) => `/api/features/${IDS[round % IDS.length]}`, target: '≤ 1.50× (flat)' },
  { name: 'list page, a neighbourhood (extra)', path: () => `/api/features?bbox=${NEIGHBOURHOOD}&limit=1000` },
  { name: 'list page, 1 000, no bbox (extra)', path: () => '/api/features?limit=1000', features: 1000 },
  { name: '/ogcapi items, 1 000 of a district (extra)', path: () => `/ogcapi/collections/features/items?bbox=${DISTRICT}&limit=1000`, features: 1000 },
];

async function growth(databases: GrowthDatabase[], apis: ApiProcess[]): Promise<void> {
  const agents = apis.map(() => new Agent({ keepAlive: true, maxSockets: 1 }));
  const rounds = quick ? 8 : 40;
  const samples = PROBES.map(() => databases.map(() => ({ ms: [] as number[], cpu: 0, bytes: 0, features: 0 })));
  try {
    // Warm-up and checks: every answer is a 200 with the features it must hold.
    for (const [p, probe] of PROBES.entries()) {
      for (const [d, api] of apis.entries()) {
        const answer = await httpGet(agents[d]!, `${api.base}${probe.path(0)}`);
        if (answer.status !== 200) throw new Error(`${probe.path(0)} at ${sizeLabel(databases[d]!.size)}: ${answer.status}`);
        const body = JSON.parse(answer.body.toString('utf8')) as { features?: unknown[] };
        samples[p]![d]!.features = body.features?.length ?? 1;
        if (probe.features !== undefined && body.features?.length !== probe.features) throw new Error(`${probe.name} at ${sizeLabel(databases[d]!.size)}: ${body.features?.length} features`);
      }
    }
    for (let round = 0; round < rounds; round++) {
      for (let i = 0; i < apis.length; i++) {
        const d = (round + i) % apis.length;
        const api = apis[d]!;
        for (const [p, probe] of PROBES.entries()) {
          const cpuBefore = processCpuMicros(api.child.pid!);
          const started = performance.now();
          const answer = await httpGet(agents[d]!, `${api.base}${probe.path(round)}`);
          const took = performance.now() - started;
          if (answer.status !== 200) throw new Error(`${probe.path(round)}: ${answer.status}`);
          const sample = samples[p]![d]!;
          sample.ms.push(took);
          sample.cpu += processCpuMicros(api.child.pid!) - cpuBefore;
          sample.bytes = answer.body.length;
        }
      }
    }
  } finally {
    for (const agent of agents) agent.destroy();
  }
  const first = 0;
  const last = databases.length - 1;
  printTable(
    PROBES.map((probe, p) => {
      const row: Record<string, string | number> = { request: probe.name };
      for (const [d, db] of databases.entries()) row[`${sizeLabel(db.size)} ms`] = ms(median(samples[p]![d]!.ms));
      row[`${sizeLabel(databases[last]!.size)} p90 ms`] = ms(percentile(samples[p]![last]!.ms, 90));
      row[`${sizeLabel(databases[last]!.size)} / ${sizeLabel(databases[first]!.size)}`] = ratio(median(samples[p]![last]!.ms), median(samples[p]![first]!.ms));
      row.target = probe.target ?? '';
      row['API CPU µs (10k → 1M)'] = `${Math.round(samples[p]![first]!.cpu / rounds)} → ${Math.round(samples[p]![last]!.cpu / rounds)}`;
      row['features (10k → 1M)'] = `${samples[p]![first]!.features} → ${samples[p]![last]!.features}`;
      row['KiB at 1M'] = Math.round(samples[p]![last]!.bytes / 1024);
      return row;
    }),
  );
}

// --- 2a. the list against its SQL behind bare node:http --------------------------------------------

async function listAgainstBare(admin: pg.Client, database: GrowthDatabase, api: ApiProcess): Promise<void> {
  const bare = await startServerProcess({
    args: ['--import', 'tsx', 'bench/bare-list-server.ts'],
    cwd: repoRoot,
    env: { DATABASE_URL: database.url },
    listening: /"port":(\d+)/,
  });
  const agents = [new Agent({ keepAlive: true, maxSockets: 1 }), new Agent({ keepAlive: true, maxSockets: 1 })];
  try {
    const sides = [
      { name: 'API', process: api },
      { name: 'bare node:http, same SQL', process: bare },
    ];
    // The same bytes from both, or the comparison means nothing.
    const bodies = await Promise.all(sides.map((side, i) => httpGet(agents[i]!, `${side.process.base}${PAGE}`)));
    if (bodies.some((b) => b.status !== 200) || !bodies[0]!.body.equals(bodies[1]!.body)) throw new Error('the API and the bare server answer the list differently');
    // Time per request; CPU per block of BLOCK requests (/proc counts in clock ticks of 10 ms, more
    // than one page costs).
    const rounds = quick ? 4 : 12;
    const BLOCK = 10;
    const times = sides.map(() => [] as number[]);
    const cpu = sides.map(() => 0);
    for (let i = 0; i < 5; i++) for (const [s, side] of sides.entries()) await httpGet(agents[s]!, `${side.process.base}${PAGE}`);
    for (let round = 0; round < rounds; round++) {
      for (const s of round % 2 === 0 ? [0, 1] : [1, 0]) {
        const side = sides[s]!;
        const before = await cpuSnapshot(admin, side.process.child.pid!);
        for (let i = 0; i < BLOCK; i++) {
          const started = performance.now();
          const answer = await httpGet(agents[s]!, `${side.process.base}${PAGE}`);
          times[s]!.push(performance.now() - started);
          if (answer.status !== 200) throw new Error(`${side.name}: ${answer.status}`);
        }
        cpu[s]! += cpuBetween(before, await cpuSnapshot(admin, side.process.child.pid!));
      }
    }
    // Each request's ratio to the other side's request at the same place in its block, a moment apart.
    const paired = times[0]!.map((t, i) => t / times[1]![i]!);
    printTable(
      sides.map((side, s) => ({
        [`list page, 1 000 of a district at ${sizeLabel(database.size)}`]: side.name,
        'median ms': ms(median(times[s]!)),
        'p90 ms': ms(percentile(times[s]!, 90)),
        'CPU µs/request (process + backends)': Math.round(cpu[s]! / (rounds * BLOCK)),
        'API / bare (median of rounds)': s === 0 ? `${median(paired).toFixed(2)}×` : '',
        'API / bare CPU': s === 0 ? ratio(cpu[0]!, cpu[1]!) : '',
        target: s === 0 ? 'time ≤ 1.10×' : '',
      })),
    );
  } finally {
    for (const agent of agents) agent.destroy();
    await bare.stop();
  }
}

// --- 2b. POST against the single statement ---------------------------------------------------------

const POLYGON = { type: 'Polygon', coordinates: [[[13.4, 52.5], [13.401, 52.5], [13.401, 52.501], [13.4, 52.501], [13.4, 52.5]]] };
const POST_CONCURRENCY = 16;

async function postAgainstStatement(admin: pg.Client, scratchUrl: string, api: ApiProcess, token: string): Promise<void> {
  const seconds = quick ? 2 : 5;
  const pool = new pg.Pool({ connectionString: scratchUrl, max: POST_CONCURRENCY });
  try {
    const statement = insertFeature(undefined, { name: 'Wachstum', kategorie: 'blumenbeet', adresse: null, telefon: '+49 30 123', geometryJson: JSON.stringify(POLYGON) }, 'bench-growth');
    const body = JSON.stringify({ type: 'Feature', geometry: POLYGON, properties: { name: 'Wachstum', kategorie: 'blumenbeet', telefon: '+49 30 123' } });
    const viaApi = async () => {
      const before = await cpuSnapshot(admin, api.child.pid!);
      const result = await autocannon({
        url: `${api.base}/api/features`,
        method: 'POST',
        connections: POST_CONCURRENCY,
        duration: seconds,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body,
      });
      const used = cpuBetween(before, await cpuSnapshot(admin, api.child.pid!));
      if (result.non2xx > 0 || result.errors > 0) throw new Error(`POST: ${result.non2xx} non-2xx answers, ${result.errors} errors`);
      return { perSecond: result.requests.total / seconds, cpu: used / result.requests.total };
    };
    const viaStatement = async () => {
      const before = await cpuSnapshot(admin, process.pid);
      const deadline = performance.now() + seconds * 1000;
      let done = 0;
      await Promise.all(
        Array.from({ length: POST_CONCURRENCY }, async () => {
          while (performance.now() < deadline) {
            // As the API runs it (a named statement: planned once per connection).
            await pool.query(statement);
            done++;
          }
        }),
      );
      const used = cpuBetween(before, await cpuSnapshot(admin, process.pid));
      return { perSecond: done / seconds, cpu: used / done };
    };
    await viaApi();
    await viaStatement();
    const results = { api: [] as Array<{ perSecond: number; cpu: number }>, statement: [] as Array<{ perSecond: number; cpu: number }> };
    for (let round = 0; round < (quick ? 2 : 4); round++) {
      if (round % 2 === 0) {
        results.api.push(await viaApi());
        results.statement.push(await viaStatement());
      } else {
        results.statement.push(await viaStatement());
        results.api.push(await viaApi());
      }
    }
    const rate = (xs: Array<{ perSecond: number }>) => median(xs.map((x) => x.perSecond));
    const cpu = (xs: Array<{ cpu: number }>) => median(xs.map((x) => x.cpu));
    printTable([
      { 'POST /api/features, 16 at once': 'API (own process)', 'per second': Math.round(rate(results.api)), 'CPU µs (process + backends)': Math.round(cpu(results.api)), 'CPU / statement': ratio(cpu(results.api), cpu(results.statement)), target: 'CPU ≤ 1.50×' },
      { 'POST /api/features, 16 at once': 'features.api_insert, one statement (16 workers, pg)', 'per second': Math.round(rate(results.statement)), 'CPU µs (process + backends)': Math.round(cpu(results.statement)), 'CPU / statement': '', target: '' },
    ]);
  } finally {
    await pool.end();
  }
}

// --- 2c. an approval with its jobs against the transaction without the queue ------------------------

/** Where the approvals' features lie: in the city of the growth databases, nearby ones batched for OSM. */
const PLACE = { origin: [13.1, 52.4] as [number, number], step: 0.0005 };

async function approvalAgainstTransaction(admin: pg.Client, scratchUrl: string): Promise<void> {
  const perRound = quick ? 100 : 300;
  // Connections kept open (pg closes idle ones after 10 s by default): a backend that ends between two
  // snapshots takes its CPU time with it, one that starts counts its start-up.
  const pool = new pg.Pool({ connectionString: scratchUrl, max: 10, idleTimeoutMillis: 0 });
  pool.on('error', () => undefined);
  const watcher = new pg.Client({ connectionString: scratchUrl });
  await watcher.connect();
  const watcherPid = (await watcher.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  await migrateQueue(pool);
  const service = createQcService(pool, { maxAttempts: 12 });
  // The worker as the API runs it by default (WORKER_POLL_INTERVAL_MS 2 s; concurrency 4; graphile's
  // batched completion, qc/worker.ts graphileOptions): graphile takes new jobs when told (LISTEN), the relay is
  // nudged after each round, and a job put back for later runs at the next poll. The same worker
  // without batched completion is measured in the same rounds: one worker runs at a time, each with a pool
  // of its own kept open, (re)started outside the measured window. A worker runs through the other
  // sides' rounds too; idle, a poll costs a few statements every 2 s. The heartbeat far apart.
  const variants = [
    { name: 'batched', batching: true, pool: new pg.Pool({ connectionString: scratchUrl, max: 8, idleTimeoutMillis: 0 }) },
    { name: 'unbatched', batching: false, pool: new pg.Pool({ connectionString: scratchUrl, max: 8, idleTimeoutMillis: 0 }) },
  ] as const;
  for (const variant of variants) variant.pool.on('error', () => undefined);
  let current: { variant: (typeof variants)[number]; worker: Awaited<ReturnType<typeof startQcWorker>> } | undefined;
  const useWorker = async (variant: (typeof variants)[number]) => {
    if (current?.variant === variant) return current.worker;
    await current?.worker.stop();
    const worker = await startQcWorker({
      pool: variant.pool,
      settings: exportsSettingsFrom(ExportsEnvSchema.parse({})),
      worker: { concurrency: 4, pollIntervalMs: 2_000, heartbeatMs: 60_000, batching: variant.batching },
      logger: pino({ level: 'warn' }),
      mailer: null,
    });
    current = { variant, worker };
    return worker;
  };
  // The submitters' notices of the decisions are mailed by the worker's notice rounds
  // (notifications/contributor-notice.ts; here recorded as skipped: no SMTP); the worker runs one a
  // poll interval, this runs them at once, in the measured window, until none is left.
  const mailNotices = async (workerPool: pg.Pool) => {
    while ((await deliverNotices(workerPool, null, '{featureId}')) > 0);
  };
  const settled = async (prefix: string) => {
    const { rows } = await watcher.query<{ pending: number; total: number; notices: number }>(
      `SELECT count(*) FILTER (WHERE status IN ('queued', 'running', 'retrying'))::int AS pending, count(*)::int AS total,
              (SELECT count(*)::int FROM qc.notices WHERE starts_with(feature_id, $1::text) AND mail_status = 'pending') AS notices
       FROM qc.jobs WHERE starts_with(feature_id, $1::text)`,
      [prefix],
    );
    return rows[0]!.total === perRound * 3 && rows[0]!.pending === 0 && rows[0]!.notices === 0;
  };
  /** The part of each round's CPU spent in this process (the rest: its PostgreSQL backends). */
  const inProcess = { batched: [] as number[], unbatched: [] as number[], bare: [] as number[] };
  /**
   * WAL written per approval in each round (the server's insert position before and after): what the
   * rows, their index entries and locks cost in writing, counted exactly where CPU time carries the
   * machine's noise. Anything else written meanwhile (autovacuum, an idle worker's poll) counts too.
   */
  const wal = { batched: [] as number[], unbatched: [] as number[], bare: [] as number[] };
  try {
    const queued = async (variant: (typeof variants)[number], prefix: string) => {
      const worker = await useWorker(variant);
      const ids = await seedSubmissions(pool, prefix, perRound, PLACE);
      const walBefore = await walPosition(admin);
      const before = await cpuSnapshot(admin, process.pid, [watcherPid]);
      await inFlight(ids, 8, (id) => service.approve(BENCH_REVIEWER, id, null));
      worker.relayNow();
      await mailNotices(variant.pool);
      // Every 100 ms: this process's polling is counted with the worker's CPU (about 30 µs an approval).
      while (!(await settled(prefix))) await new Promise((resolve) => setTimeout(resolve, 100));
      const after = await cpuSnapshot(admin, process.pid, [watcherPid]);
      inProcess[variant.name].push((after.get(process.pid)! - before.get(process.pid)!) / perRound);
      wal[variant.name].push((await walBytesSince(admin, walBefore)) / perRound);
      return cpuBetween(before, after) / perRound;
    };
    const bare = async (prefix: string) => {
      const ids = await seedSubmissions(pool, prefix, perRound, PLACE);
      const walBefore = await walPosition(admin);
      const before = await cpuSnapshot(admin, process.pid, [watcherPid]);
      await inFlight(ids, 8, (id) => approveWithoutQueue(pool, id));
      const after = await cpuSnapshot(admin, process.pid, [watcherPid]);
      inProcess.bare.push((after.get(process.pid)! - before.get(process.pid)!) / perRound);
      wal.bare.push((await walBytesSince(admin, walBefore)) / perRound);
      return cpuBetween(before, after) / perRound;
    };
    // A checkpoint first, so that none falls inside the rounds (one every 5 min by default; the runs
    // take about a minute): the first change of a page after a checkpoint writes the whole page to the
    // WAL, and rounds with a checkpoint inside cost up to twice the others. Needs superuser or
    // pg_checkpoint (PostgreSQL 15); without, the rounds carry that noise.
    await admin.query('CHECKPOINT').catch(() => console.log('(no CHECKPOINT allowed: a checkpoint may fall inside a round)'));
    // A warm-up of each side, then rounds whose order of the three sides rotates.
    await queued(variants[1], 'gwu-');
    await queued(variants[0], 'gwq-');
    await bare('gwb-');
    const results = { batched: [] as number[], unbatched: [] as number[], bare: [] as number[] };
    const sides: (keyof typeof results)[] = ['batched', 'unbatched', 'bare'];
    const loads: number[] = [];
    for (let round = 0; round < (quick ? 2 : Number(process.env.BENCH_APPROVE_ROUNDS ?? 6)); round++) {
      for (let i = 0; i < sides.length; i++) {
        const side = sides[(round + i) % sides.length]!;
        const prefix = `g${{ batched: 'q', unbatched: 'u', bare: 'b' }[side]}${round}-`;
        results[side].push(side === 'bare' ? await bare(prefix) : await queued(side === 'batched' ? variants[0] : variants[1], prefix));
      }
      loads.push(loadavg()[0]!);
    }
    const { rows } = await watcher.query<{ status: string; n: number }>(`SELECT status, count(*)::int AS n FROM qc.jobs GROUP BY 1 ORDER BY 1`);
    const title = `approval, ${perRound} a round, 8 at once`;
    /** One side's row: its CPU and WAL per approval (medians; the warm-up left out of the parts), and both against the transaction alone. */
    const sideRow = (side: keyof typeof results, description: string, target: string) => ({
      [title]: description,
      'CPU µs (process + backends)': Math.round(median(results[side])),
      'of which in this process': Math.round(median(inProcess[side].slice(1))),
      'WAL bytes': Math.round(median(wal[side].slice(1))),
      'WAL / transaction alone': side === 'bare' ? '' : ratio(median(wal[side].slice(1)), median(wal.bare.slice(1))),
      'CPU / transaction alone': side === 'bare' ? '' : ratio(median(results[side]), median(results.bare)),
      target,
    });
    printTable([
      sideRow('batched', 'with its 3 jobs and the notice mail: outbox rows, relay, worker runs them, completions batched (qc/worker.ts graphileOptions)', 'CPU ≤ 1.50×'),
      sideRow('unbatched', 'the same, each completion a statement of its own (as before)', ''),
      sideRow('bare', 'the same transaction without the queue (lock, status, transition, notice)', ''),
    ]);
    console.log(`WAL bytes per approval: batched ${wal.batched.map(Math.round).join(' ')}; bare ${wal.bare.map(Math.round).join(' ')}`);
    console.log(`rounds (µs): batched ${results.batched.map(Math.round).join(' ')}; unbatched ${results.unbatched.map(Math.round).join(' ')}; bare ${results.bare.map(Math.round).join(' ')}`);
    console.log(`1-minute load after each round: ${loads.map((l) => l.toFixed(1)).join(' ')}`);
    console.log(`jobs by outcome: ${rows.map((r) => `${r.status} ${r.n}`).join(', ')}`);
  } finally {
    await current?.worker.stop();
    await watcher.end();
    for (const variant of variants) await variant.pool.end();
    await pool.end();
  }
}

// --- the run ---------------------------------------------------------------------------------------

/** A copy of the 100k database to write into, or an empty migrated one when it cannot be copied. */
async function scratchDatabase(admin: pg.Client): Promise<{ url: string; name: string; kind: string }> {
  const name = `fp_growth_scratch_${process.pid}`;
  const url = new URL(adminUrl()!);
  url.pathname = `/${name}`;
  try {
    await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)} TEMPLATE ${pg.escapeIdentifier(databaseName(100_000))}`);
    return { url: url.toString(), name, kind: `a copy of ${databaseName(100_000)}` };
  } catch (error) {
    // Another session on the template (another benchmark) makes the copy fail.
    console.log(`could not copy ${databaseName(100_000)} (${(error as Error).message}); POST and approvals run on an empty database`);
    await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
    const { migrate } = await import('../services/api/src/db/migrate.js');
    const pool = new pg.Pool({ connectionString: url.toString(), max: 1 });
    await migrate(pool).finally(() => pool.end());
    return { url: url.toString(), name, kind: 'an empty database' };
  }
}

const load = () => loadavg().map((l) => l.toFixed(2)).join(' ');

async function main(): Promise<void> {
  if (!adminUrl()) {
    console.log('growth: needs a PostgreSQL server (BENCH_DATABASE_URL or TEST_DATABASE_URL); the embedded PGlite is not measured at a million features');
    return;
  }
  console.log(`machine: ${cpus().length} cores, load average ${load()} (1, 5, 15 min) at the start`);
  const databases = await openGrowthDatabases();
  console.log(`databases: ${databases.map((d) => d.kind).join('; ')}`);
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-growth-'));
  const token = await (await loadOrCreateDevKeys(dataDir)).sign({ sub: 'bench-growth', role: 'admin' });
  const apis: ApiProcess[] = [];
  let scratch: Awaited<ReturnType<typeof scratchDatabase>> | undefined;
  try {
    // Copied before any API connects to the template.
    if (PARTS.has('post') || PARTS.has('approve')) scratch = await scratchDatabase(admin);
    if (PARTS.has('growth') || PARTS.has('list')) {
      // One after the other: they share DATA_DIR (the signing keys above).
      for (const database of databases) apis.push(await startApiProcess({ DATABASE_URL: database.url, DATA_DIR: dataDir }));
    }
    if (PARTS.has('growth')) {
      console.log(`\n1. the same requests at ${databases.map((d) => sizeLabel(d.size)).join(', ')} features, interleaved (median ms per request):`);
      await growth(databases, apis);
    }
    if (PARTS.has('list')) {
      console.log('\n2a. the list against the API\'s own SQL behind bare node:http, both in a process of their own, alternating:');
      await listAgainstBare(admin, databases[databases.length - 1]!, apis[apis.length - 1]!);
    }
    for (const api of apis.splice(0)) await api.stop();
    if (scratch && PARTS.has('post')) {
      const api = await startApiProcess({ DATABASE_URL: scratch.url, DATA_DIR: dataDir });
      apis.push(api);
      console.log(`\n2b. POST against the single statement the API runs, on ${scratch.kind}, alternating rounds:`);
      await postAgainstStatement(admin, scratch.url, api, token);
    }
    if (scratch && PARTS.has('approve')) {
      console.log(`\n2c. an approval with its jobs against the same transaction without the queue, on ${scratch.kind}, alternating rounds:`);
      await approvalAgainstTransaction(admin, scratch.url);
    }
  } finally {
    for (const api of apis) await api.stop();
    if (scratch) await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(scratch.name)} WITH (FORCE)`);
    await admin.end();
    rmSync(dataDir, { recursive: true, force: true });
    console.log(`\nload average ${load()} at the end`);
  }
}

await main();
