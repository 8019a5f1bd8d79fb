/**
 * Node flags benchmark (`npm run bench -- node-flags`): does a V8 flag or a C library setting of the
 * API's process pay? The API as it ships (its V8 flags, services/shared/node-flags.ts) against the
 * same compiled build started with a variant, in pairs of fresh processes started side by side, so
 * that nothing but the setting differs. Written for `--no-allocation-site-pretenuring` (docs/api.md,
 * "Why two processes of one build differ"); any other setting is measured the same way.
 *
 * Run: `TEST_DATABASE_URL=postgres://postgres@127.0.0.1:55432/postgres npm run bench -- node-flags`
 * (or BENCH_DATABASE_URL; without either it says so and stops). It copies the 100 000-feature grid
 * database and compiles this checkout's API as the image does (bench/support.ts buildApi).
 *
 * The variant: NODE_FLAGS_VARIANT, the V8 flags it runs with instead of the API's (default: none,
 * i.e. the API without its flags); NODE_FLAGS_VARIANT_ENV, environment it adds (`NAME=value …`,
 * e.g. `MALLOC_ARENA_MAX=2`).
 *
 * Two parts, each over NODE_FLAGS_PAIRS pairs (default 3; which of the two is loaded first swaps
 * every pair):
 *   - steady: both idle 12 s after start (V8's memory reducer has had its turn), then for each load
 *     (GET /api/features/{id}, POST /api/features, a tile cache hit, the 1 000-feature list) 10 s of
 *     warm-up each and 4 rounds of 4 s, the order alternating; req/s and the process's CPU per
 *     request (from /proc), and each process's RSS after all four;
 *   - at once: the list's load right after start (the first-loaded process gets it the moment it
 *     listens, as a replica does that a rolling deploy sends traffic when ready), 10 s of warm-up
 *     each and 3 rounds; the per-pair CPU per request shows a process that fell into a slow mode.
 *   - idle: a fresh process of each side (started together), one GET by id, then VmRSS 2 s and 30 s
 *     after it, as the framework benchmark's idle-memory rows read it.
 * Medians over all rounds of all pairs; ratio = variant ÷ shipped. Nothing is asserted.
 * Options: BENCH_QUICK=1 (one pair, short rounds), NODE_FLAGS_PARTS=steady,once,idle,
 * NODE_FLAGS_LOADS=list,get,post,tile (the steady part's loads, in this order unless given another).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadOrCreateDevKeys } from '../services/api/src/auth/dev-keys.js';
import { API_NODE_FLAGS } from '../services/shared/node-flags.js';
import { createLoad, FEATURE_ID, LIST_QUERY, TILE } from './api-loads.js';
import { openGridDatabase } from './grid-database.js';
import { median, printTable } from './stats.js';
import { buildApi, loadServer, repoRoot, residentMiB, RSS_IDLE_MS, RSS_SETTLE_MS, startBuiltApiProcess, type ApiProcess, type Load, type Sample } from './support.js';

const quick = process.env.BENCH_QUICK === '1';
const PAIRS = quick ? 1 : Number(process.env.NODE_FLAGS_PAIRS ?? 3);
const parts = new Set((process.env.NODE_FLAGS_PARTS ?? 'steady,once,idle').split(',').map((part) => part.trim()));
/** The steady part's loads, in the order given (e.g. `get,post,tile,list`, the framework benchmark's). */
const steadyLoads = (process.env.NODE_FLAGS_LOADS ?? 'list,get,post,tile').split(',').map((load) => load.trim());
const SECONDS = quick ? 2 : 4;
const WARM_UP_SECONDS = quick ? 2 : 10;
const CONNECTIONS = 16;
const IDLE_MS = quick ? 2_000 : 12_000;
const VARIANT_FLAGS = (process.env.NODE_FLAGS_VARIANT ?? '').split(' ').filter(Boolean);
const VARIANT_ENV = Object.fromEntries(
  (process.env.NODE_FLAGS_VARIANT_ENV ?? '')
    .split(' ')
    .filter(Boolean)
    .map((pair) => {
      const at = pair.indexOf('=');
      if (at < 1) throw new Error(`NODE_FLAGS_VARIANT_ENV: ${pair} is not NAME=value`);
      return [pair.slice(0, at), pair.slice(at + 1)];
    }),
);

const LIST: Load = { path: `/api/features?${LIST_QUERY}` };

type SideName = 'shipped' | 'variant';
const SHIPPED = `shipped (${API_NODE_FLAGS.join(' ') || 'no flags'})`;
const VARIANT = `variant (${[...VARIANT_FLAGS, ...Object.entries(VARIANT_ENV).map(([k, v]) => `${k}=${v}`)].join(' ') || 'no flags'})`;

const measure = (server: ApiProcess, load: Load, seconds = SECONDS): Promise<Sample> => loadServer(server, load, { seconds, connections: CONNECTIONS });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const summary = (samples: Sample[]) => `${Math.round(median(samples.map((x) => x.perSecond)))} req/s, ${Math.round(median(samples.map((x) => x.cpuMicros)))} µs`;

/** Warm-up of each side, then `rounds` rounds, the order alternating; the samples of each side. */
async function rounds(sides: Array<[SideName, ApiProcess]>, load: Load, count: number): Promise<Record<SideName, Sample[]>> {
  for (const [, server] of sides) await measure(server, load, WARM_UP_SECONDS);
  const samples: Record<SideName, Sample[]> = { shipped: [], variant: [] };
  for (let round = 0; round < count; round++) {
    for (const [name, server] of round % 2 === 0 ? sides : [...sides].reverse()) samples[name].push(await measure(server, load));
  }
  return samples;
}

type Row = { part: string; reading: string; shipped: string; variant: string; 'variant ÷ shipped': string };

const reading = (part: string, name: string, shipped: number, variant: number, digits = 0): Row => ({
  part,
  reading: name,
  shipped: shipped.toFixed(digits),
  variant: variant.toFixed(digits),
  'variant ÷ shipped': `${(variant / shipped).toFixed(2)}×`,
});

/** Two rows per load: req/s and the server's CPU per request, medians of all rounds. */
function loadRows(part: string, load: string, all: Record<SideName, Sample[]>): Row[] {
  const rate = (s: Sample[]) => median(s.map((x) => x.perSecond));
  const cpu = (s: Sample[]) => median(s.map((x) => x.cpuMicros));
  return [
    reading(part, `${load}: req/s`, rate(all.shipped), rate(all.variant)),
    reading(part, `${load}: CPU µs per request`, cpu(all.shipped), cpu(all.variant)),
  ];
}

async function main(): Promise<void> {
  if (!process.env.BENCH_DATABASE_URL && !process.env.TEST_DATABASE_URL) {
    console.log('node-flags: skipped — it needs a PostgreSQL with PostGIS shared by several processes; set BENCH_DATABASE_URL or TEST_DATABASE_URL');
    return;
  }
  const database = await openGridDatabase('node_flags');
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-node-flags-'));
  const build = await buildApi(repoRoot, 'node-flags');
  const running: ApiProcess[] = [];
  try {
    const env = { DATABASE_URL: database.url, DATA_DIR: dataDir, WORKER_ENABLED: 'false' };
    const token = await (await loadOrCreateDevKeys(dataDir)).sign({ sub: 'bench', role: 'admin' });
    const known: Record<string, [string, Load]> = {
      list: ['list 1 000', LIST],
      get: ['GET by id', { path: `/api/features/${FEATURE_ID}` }],
      post: ['POST', createLoad(token)],
      tile: ['tile hit', { path: `/api/tiles/${TILE}.mvt` }],
    };
    const loads = steadyLoads.map((key): [string, Load] => {
      const load = Object.hasOwn(known, key) ? known[key] : undefined;
      if (!load) throw new Error(`NODE_FLAGS_LOADS: ${key} is not one of ${Object.keys(known).join(', ')}`);
      return load;
    });
    console.log(`${database.kind}; ${SHIPPED} against ${VARIANT}; ${PAIRS} pairs`);
    const startPair = async (pair: number): Promise<Array<[SideName, ApiProcess]>> => {
      const shipped = await startBuiltApiProcess(build, env);
      const variant = await startBuiltApiProcess(build, { ...env, ...VARIANT_ENV }, [], { v8Flags: VARIANT_FLAGS });
      running.push(shipped, variant);
      return pair % 2 === 0 ? [['shipped', shipped], ['variant', variant]] : [['variant', variant], ['shipped', shipped]];
    };
    const stopAll = () => Promise.all(running.splice(0).map((server) => server.stop()));
    const rows: Row[] = [];

    if (parts.has('steady')) {
      const all = new Map<string, Record<SideName, Sample[]>>(loads.map(([name]) => [name, { shipped: [], variant: [] }]));
      const rss: Record<SideName, number[]> = { shipped: [], variant: [] };
      for (let pair = 0; pair < PAIRS; pair++) {
        const sides = await startPair(pair);
        await sleep(IDLE_MS);
        for (const [name, load] of loads) {
          const samples = await rounds(sides, load, quick ? 2 : 4);
          all.get(name)!.shipped.push(...samples.shipped);
          all.get(name)!.variant.push(...samples.variant);
          console.log(`steady, pair ${pair + 1}/${PAIRS}, ${name}: shipped ${summary(samples.shipped)} | variant ${summary(samples.variant)}`);
        }
        for (const [name, server] of sides) rss[name].push(residentMiB(server.child.pid!));
        await stopAll();
      }
      for (const [name, samples] of all) rows.push(...loadRows('steady', name, samples));
      rows.push(reading('steady', 'VmRSS MiB after the loads', median(rss.shipped), median(rss.variant), 1));
    }

    if (parts.has('once')) {
      const all: Record<SideName, Sample[]> = { shipped: [], variant: [] };
      for (let pair = 0; pair < PAIRS; pair++) {
        const sides = await startPair(pair);
        const samples = await rounds(sides, LIST, quick ? 2 : 3);
        all.shipped.push(...samples.shipped);
        all.variant.push(...samples.variant);
        const rss = sides.map(([name, server]) => `${name} ${residentMiB(server.child.pid!).toFixed(0)} MiB`).join(', ');
        console.log(`at once, pair ${pair + 1}/${PAIRS} (${sides[0]![0]} loaded first): shipped ${summary(samples.shipped)} | variant ${summary(samples.variant)}; after: ${rss}`);
        await stopAll();
      }
      rows.push(...loadRows('at once after start', 'list 1 000', all));
    }

    if (parts.has('idle')) {
      const readings = { shipped: { settled: [] as number[], idle: [] as number[] }, variant: { settled: [] as number[], idle: [] as number[] } };
      for (let pair = 0; pair < PAIRS; pair++) {
        const sides = await startPair(pair);
        for (const [, server] of sides) {
          const answer = await fetch(`${server.base}/api/features/${FEATURE_ID}`, { headers: { connection: 'close' } });
          if (answer.status !== 200) throw new Error(`${server.base}: GET ${answer.status}`);
          await answer.arrayBuffer();
        }
        await sleep(RSS_SETTLE_MS);
        for (const [name, server] of sides) readings[name].settled.push(residentMiB(server.child.pid!));
        await sleep(RSS_IDLE_MS - RSS_SETTLE_MS);
        for (const [name, server] of sides) readings[name].idle.push(residentMiB(server.child.pid!));
        console.log(`idle, pair ${pair + 1}/${PAIRS}: VmRSS ${RSS_SETTLE_MS / 1000} s / ${RSS_IDLE_MS / 1000} s after one GET: ${sides.map(([name]) => `${name} ${readings[name].settled.at(-1)!.toFixed(1)} / ${readings[name].idle.at(-1)!.toFixed(1)} MiB`).join(', ')}`);
        await stopAll();
      }
      for (const when of ['settled', 'idle'] as const) {
        const [shipped, variant] = [median(readings.shipped[when]), median(readings.variant[when])];
        rows.push(reading('idle', `VmRSS MiB, ${(when === 'settled' ? RSS_SETTLE_MS : RSS_IDLE_MS) / 1000} s after one GET`, shipped, variant, 1));
      }
    }

    console.log('\nmedians over all rounds of all pairs (ratio = variant ÷ shipped):');
    printTable(rows);
  } finally {
    await Promise.all(running.map((server) => server.stop()));
    build.remove();
    await database.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
