/**
 * `npm run bench -- hostile`: how long /healthz waits while four clients send 1 MiB bodies, hostile
 * (deep nesting, long arrays of wrong types, unknown members, pathological strings, invalid UTF-8) or
 * valid (a polygon of 0.95 MB each, created), against the API as its own process. Phases alternate
 * (hostile, valid, hostile, …), so both meet the same machine; the figure is the /healthz latency
 * (p50, p99, max) in each, and the ratio of the hostile phases' to the valid phases'.
 *
 * BENCH_QUICK=1: fewer, shorter rounds.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { loadOrCreateDevKeys } from '../services/api/src/auth/dev-keys.js';
import { migrate } from '../services/api/src/db/migrate.js';
import { percentile, printTable, ratio } from './stats.js';
import { openBenchDatabase, startApiProcess } from './support.js';

const quick = process.env.BENCH_QUICK === '1';
const ROUNDS = quick ? 2 : 6;
const PHASE_MS = quick ? 2_000 : 5_000;
const CLIENTS = 4;
const SIZE = 1024 * 1024 - 4096;

const feature = (geometry: string, properties = '{"name":"Friedhof","kategorie":"friedhof"}') => `{"type":"Feature","geometry":${geometry},"properties":${properties}}`;
const repeatTo = (unit: string, size: number): string => Array.from({ length: Math.floor(size / (unit.length + 1)) }, () => unit).join(',');

function hostileBodies(): Buffer[] {
  const invalidUtf8 = Buffer.from(feature('{"type":"Point","coordinates":[13.4,52.5]}', `{"name":"${'a'.repeat(SIZE - 200)}#","kategorie":"friedhof"}`));
  invalidUtf8[invalidUtf8.indexOf('#')] = 0xff;
  return [
    Buffer.from('['.repeat(SIZE / 2) + ']'.repeat(SIZE / 2)),
    Buffer.from(feature(`{"type":"LineString","coordinates":[${repeatTo('[1,true]', SIZE - 200)}]}`)),
    Buffer.from(feature(`{"type":"LineString","coordinates":[${repeatTo('[]', SIZE - 200)}]}`)),
    Buffer.from(feature('{"type":"Point","coordinates":[13.4,52.5]}', `{${Array.from({ length: Math.floor((SIZE - 200) / 12) }, (_, i) => `"k${i}":1`).join(',')}}`)),
    Buffer.from(feature('{"type":"Point","coordinates":[13.4,52.5]}', `{"name":"x","kategorie":"friedhof","telefon":"${'1'.repeat(SIZE - 200)}x"}`)),
    invalidUtf8,
  ];
}

/** A closed ring of 44 500 positions with six decimals: 0.92 MiB as a feature. */
function validBody(): Buffer {
  const n = 44_500;
  const positions = Array.from({ length: n }, (_, i) => {
    const a = (i / n) * 2 * Math.PI;
    return [Number((13.4 + 0.05 * Math.cos(a)).toFixed(6)), Number((52.5 + 0.03 * Math.sin(a)).toFixed(6))];
  });
  return Buffer.from(feature(JSON.stringify({ type: 'Polygon', coordinates: [[...positions, positions[0]]] })));
}

interface Phase {
  health: number[];
  statuses: Map<number, number>;
  requests: number;
}

/** CLIENTS loops sending the bodies in turn for PHASE_MS while /healthz is asked every 10 ms. */
async function phase(base: string, token: string, bodies: Buffer[]): Promise<Phase> {
  const result: Phase = { health: [], statuses: new Map(), requests: 0 };
  const until = performance.now() + PHASE_MS;
  const client = async (offset: number) => {
    for (let i = offset; performance.now() < until; i++) {
      const response = await fetch(`${base}/api/features`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: bodies[i % bodies.length]! });
      await response.arrayBuffer();
      result.statuses.set(response.status, (result.statuses.get(response.status) ?? 0) + 1);
      result.requests++;
    }
  };
  const probe = async () => {
    while (performance.now() < until) {
      const started = performance.now();
      await (await fetch(`${base}/healthz`)).arrayBuffer();
      result.health.push(performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };
  await Promise.all([...Array.from({ length: CLIENTS }, (_, c) => client(c)), probe()]);
  return result;
}

const database = await openBenchDatabase('hostile');
const dataDir = mkdtempSync(join(tmpdir(), 'bench-hostile-'));
const pool = new pg.Pool({ connectionString: database.url, max: 2 });
let api: Awaited<ReturnType<typeof startApiProcess>> | undefined;
try {
  await migrate(pool);
  api = await startApiProcess({ DATABASE_URL: database.url, DATA_DIR: dataDir });
  const token = await (await loadOrCreateDevKeys(dataDir)).sign({ sub: 'bench', role: 'admin' });
  const hostile = hostileBodies();
  const valid = [validBody()];
  console.log(`database: ${database.kind}; ${CLIENTS} clients, ${ROUNDS} rounds of ${PHASE_MS / 1000} s per kind, bodies of ${(SIZE / 2 ** 20).toFixed(2)} MiB (valid: ${(valid[0]!.length / 2 ** 20).toFixed(2)} MiB)`);
  await phase(api.base, token, [...hostile, ...valid]); // warm-up
  const all = { hostile: { health: [] as number[], requests: 0, statuses: new Map<number, number>() }, valid: { health: [] as number[], requests: 0, statuses: new Map<number, number>() } };
  for (let round = 0; round < ROUNDS; round++) {
    for (const [kind, bodies] of [['hostile', hostile], ['valid', valid]] as const) {
      const measured = await phase(api.base, token, bodies);
      all[kind].health.push(...measured.health);
      all[kind].requests += measured.requests;
      for (const [status, count] of measured.statuses) all[kind].statuses.set(status, (all[kind].statuses.get(status) ?? 0) + count);
    }
  }
  const row = (kind: 'hostile' | 'valid') => ({
    bodies: kind,
    requests: all[kind].requests,
    statuses: [...all[kind].statuses].map(([s, n]) => `${s}×${n}`).join(' '),
    'healthz p50 ms': percentile(all[kind].health, 50).toFixed(1),
    'healthz p99 ms': percentile(all[kind].health, 99).toFixed(1),
    'healthz max ms': Math.max(...all[kind].health).toFixed(1),
  });
  printTable([row('hostile'), row('valid')]);
  const h = all.hostile.health;
  const v = all.valid.health;
  console.log(`hostile against valid: p99 ${ratio(percentile(h, 99), percentile(v, 99))}, max ${ratio(Math.max(...h), Math.max(...v))} (target: /healthz within 100 ms; hostile p99 ${percentile(h, 99).toFixed(1)} ms)`);
  if ([...all.hostile.statuses.keys()].some((s) => s < 400 || s >= 500)) throw new Error('a hostile body was not answered with a 4xx');
} finally {
  await api?.stop();
  await pool.end();
  await database.close();
  rmSync(dataDir, { recursive: true, force: true });
}
