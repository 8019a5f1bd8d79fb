/**
 * Replicas (`npm run bench -- replicas`, issue 30): list and create throughput of 1, 2 and 3 API
 * processes on one PostgreSQL, interleaved (the order of 1/2/3 rotates each round), for the capacity
 * plan in docs/infra.md.
 *
 * - list: GET /api/features?bbox=…&limit=1000, a page of 1 000 stored features (the grid database of
 *   100 000 small polygons, bench/grid-database.ts);
 * - create: POST /api/features of a small point feature, authenticated (a development token), with the
 *   change limit ON and counted in PostgreSQL as in production (http/rate-limit-store.ts; the limit is
 *   set far above what the run reaches, so every write pays the shared counter's round trip).
 * Each side: 16 connections (autocannon) split evenly over the processes, for the same duration. The
 * table shows total req/s, the ratio to one process, and the CPU per request of the API processes
 * and of PostgreSQL (all its backends, from /proc), so the curve can be explained: on this 2-core
 * machine the API processes, PostgreSQL and the load generator share two cores, so more processes
 * can only help while one process leaves a core idle. Never asserts; prints.
 *
 * BENCH_QUICK=1: 2 rounds of 2 s. Needs BENCH_DATABASE_URL or TEST_DATABASE_URL (PostgreSQL);
 * without it the benchmark says so and stops (replicas of the embedded PGlite make no sense).
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { loadOrCreateDevKeys } from '../services/api/src/auth/dev-keys.js';
import { gridBbox } from './feature-grid.js';
import { openGridDatabase } from './grid-database.js';
import { median, printTable } from './stats.js';
import { processCpuMicros, startApiProcess, type ApiProcess } from './support.js';

const quick = process.env.BENCH_QUICK === '1';
const ROUNDS = quick ? 2 : 4;
const SECONDS = quick ? 2 : 6;
const CONNECTIONS = 16;

if (!process.env.BENCH_DATABASE_URL && !process.env.TEST_DATABASE_URL) {
  console.log('replicas: skipped (needs BENCH_DATABASE_URL or TEST_DATABASE_URL: API replicas share one PostgreSQL)');
  process.exit(0);
}

/** Every PostgreSQL backend's pid (postgres processes of the postmaster's children), for their CPU. */
function postgresPids(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'postgres') pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

const cpuOf = (pids: number[]): number => pids.reduce((sum, pid) => {
  try {
    return sum + processCpuMicros(pid);
  } catch {
    return sum;
  }
}, 0);

interface Sample {
  perSecond: number;
  apiCpuMicros: number;
  dbCpuMicros: number;
}

async function load(processes: ApiProcess[], request: { method: 'GET' | 'POST'; path: string; headers?: Record<string, string>; body?: string }): Promise<Sample> {
  const apiPids = processes.map((p) => p.child.pid!);
  const dbPids = postgresPids();
  const api0 = cpuOf(apiPids);
  const db0 = cpuOf(dbPids);
  const each = Math.floor(CONNECTIONS / processes.length);
  const results = await Promise.all(
    processes.map((p, i) =>
      autocannon({ url: `${p.base}${request.path}`, method: request.method, headers: request.headers, body: request.body, duration: SECONDS, connections: i === 0 ? CONNECTIONS - each * (processes.length - 1) : each }),
    ),
  );
  const total = results.reduce((sum, r) => sum + r.requests.total, 0);
  const bad = results.reduce((sum, r) => sum + r.non2xx + r.errors, 0);
  if (bad > 0) throw new Error(`${request.method} ${request.path}: ${bad} failed answers`);
  return {
    perSecond: results.reduce((sum, r) => sum + r.requests.average, 0),
    apiCpuMicros: (cpuOf(apiPids) - api0) / Math.max(1, total),
    dbCpuMicros: (cpuOf(postgresPids()) - db0) / Math.max(1, total),
  };
}

const database = await openGridDatabase('replicas');
const dataDir = mkdtempSync(join(tmpdir(), 'bench-replicas-'));
const processes: ApiProcess[] = [];
try {
  for (let i = 0; i < 3; i++) processes.push(await startApiProcess({ DATABASE_URL: database.url, DATA_DIR: dataDir, RATE_LIMIT_WRITES_PER_MINUTE: '100000000' }));
  const token = await (await loadOrCreateDevKeys(dataDir)).sign({ sub: 'bench-replicas', role: 'contributor' }, '1h');
  const b = gridBbox(40, 25);
  const list = { method: 'GET' as const, path: `/api/features?bbox=${b.minLon},${b.minLat},${b.maxLon},${b.maxLat}&limit=1000` };
  const create = {
    method: 'POST' as const,
    path: '/api/features',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ type: 'Feature', geometry: { type: 'Point', coordinates: [13.4, 52.5] }, properties: { name: 'Replica', kategorie: 'denkmal' } }),
  };
  const samples = new Map<string, Sample[]>();
  const counts = [1, 2, 3];
  for (let round = 0; round < ROUNDS; round++) {
    const order = counts.map((_, i) => counts[(i + round) % counts.length]!);
    for (const [name, request] of [['list 1 000', list], ['create', create]] as const) {
      for (const n of order) {
        const key = `${name}|${n}`;
        const sample = await load(processes.slice(0, n), request);
        samples.set(key, [...(samples.get(key) ?? []), sample]);
      }
    }
    console.log(`round ${round + 1}/${ROUNDS} done`);
  }
  const rows = [];
  for (const name of ['list 1 000', 'create']) {
    const one = median(samples.get(`${name}|1`)!.map((s) => s.perSecond));
    for (const n of counts) {
      const s = samples.get(`${name}|${n}`)!;
      const perSecond = median(s.map((x) => x.perSecond));
      rows.push({
        request: name,
        processes: n,
        'req/s (median)': perSecond.toFixed(0),
        'vs 1 process': `${(perSecond / one).toFixed(2)}×`,
        'API CPU µs/req': median(s.map((x) => x.apiCpuMicros)).toFixed(0),
        'PostgreSQL CPU µs/req': median(s.map((x) => x.dbCpuMicros)).toFixed(0),
      });
    }
  }
  console.log(`\n${database.kind}; ${ROUNDS} rounds of ${SECONDS} s per side, ${CONNECTIONS} connections split over the processes`);
  printTable(rows);
} finally {
  for (const p of processes) await p.stop();
  await database.close();
  rmSync(dataDir, { recursive: true, force: true });
}
