/**
 * `npm run bench -- start-fresh`: `npm start` of a fresh clone to the map with data, and a second start.
 * A clone of this repository's HEAD in a scratch folder (node_modules linked, nothing else: no
 * .cache/start, no .cache/embedded-db image, no web build, no data folder) is started with its
 * defaults (embedded PGlite, the web app; no webhook server) and timed from launch until
 * - the API answers /healthz, the map page (/) answers 200, and
 * - after the demo city was loaded (POST /api/imports/demo, timed on its own), a zoom-11 vector tile
 *   of it is not empty: the map below zoom 12 shows features;
 * then it is stopped and started again (the second start: caches and data folder in place), timed to
 * the same points. Baseline, in the same run between the starts: a bare node:http server, spawn →
 * answer (what any Node service costs). BENCH_ROUNDS (default 1) fresh clones in a row.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../services/shared/testing/ports.js';
import { median, printTable, ratio } from './stats.js';
import { repoRoot } from './support.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);
/** The zoom-11 tile over the demo city (Berlin-Mitte). */
const TILE = '/api/tiles/11/1100/671.mvt';

async function until(started: number, probe: () => Promise<boolean>, what: string, timeoutMs = 600_000): Promise<number> {
  for (;;) {
    if (await probe().catch(() => false)) return performance.now() - started;
    if (performance.now() - started > timeoutMs) throw new Error(`${what}: no answer within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

interface Sample {
  apiMs: number;
  mapMs: number;
  tileMs: number;
  demoMs?: number;
}

async function start(dir: string, seed: boolean): Promise<Sample> {
  const [port, webPort] = [await freePort(), await freePort()];
  const started = performance.now();
  const child = spawn('npm', ['start', '--silent'], { cwd: dir, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', PORT: String(port), WEB_PORT: String(webPort), START_WEBHOOK: 'false', LOG_LEVEL: 'warn' }, stdio: ['ignore', 'ignore', 'inherit'] });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  try {
    const api = `http://127.0.0.1:${port}`;
    const apiMs = await until(started, async () => (await fetch(`${api}/healthz`)).ok, 'API');
    const mapMs = await until(started, async () => (await fetch(`http://127.0.0.1:${webPort}/`)).status === 200, 'map page');
    let demoMs: number | undefined;
    if (seed) {
      const { token } = (await (await fetch(`${api}/api/dev/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ role: 'contributor', sub: 'bench' }) })).json()) as { token: string };
      const t0 = performance.now();
      const response = await fetch(`${api}/api/imports/demo`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
      if (response.status !== 201) throw new Error(`demo data: ${response.status} ${await response.text()}`);
      demoMs = performance.now() - t0;
    }
    const tileMs = await until(started, async () => {
      const response = await fetch(`${api}${TILE}`);
      return response.status === 200 && (await response.arrayBuffer()).byteLength > 0;
    }, 'tile with data');
    return { apiMs, mapMs, tileMs, ...(demoMs === undefined ? {} : { demoMs }) };
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

async function bareNode(): Promise<number> {
  const port = await freePort();
  const started = performance.now();
  const child = spawn(process.execPath, ['-e', `require('node:http').createServer((q, s) => s.end('ok')).listen(${port}, '127.0.0.1')`], { stdio: 'ignore' });
  try {
    return await until(started, async () => (await fetch(`http://127.0.0.1:${port}/`)).ok, 'node:http');
  } finally {
    child.kill();
  }
}

const firsts: Sample[] = [];
const seconds: Sample[] = [];
const bare: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-fresh-clone-'));
  try {
    execFileSync('git', ['clone', '-q', repoRoot, dir]);
    symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'));
    bare.push(await bareNode());
    firsts.push(await start(dir, true));
    bare.push(await bareNode());
    seconds.push(await start(dir, false));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const row = (what: string, samples: Sample[]) => ({
  what,
  'API ms': Math.round(median(samples.map((s) => s.apiMs))),
  'map page ms': Math.round(median(samples.map((s) => s.mapMs))),
  'map with data ms': Math.round(median(samples.map((s) => s.tileMs))),
  'of which demo import ms': samples[0]?.demoMs === undefined ? '' : Math.round(median(samples.map((s) => s.demoMs!))),
  'map vs node:http': ratio(median(samples.map((s) => s.mapMs)), median(bare)),
});
console.log(`npm start of a fresh clone (HEAD, node_modules linked), ${ROUNDS} round(s); baseline node:http spawn → answer: ${Math.round(median(bare))} ms`);
printTable([row('first start (no caches, no data, no web build)', firsts), row('second start', seconds)]);
