/**
 * `npm run bench -- start`: how long `npm start` takes from launch (the `npm start` process spawned)
 * until the API's /healthz answers 200, on a fresh data folder and on an existing one, and when the
 * web app answers (GET /login below 500). Everything runs with its defaults (embedded PGlite, the
 * webhook server, the web app) on free ports and a scratch data folder.
 *
 * Baselines, measured in the same rounds, interleaved with the starts (each round rotates the order):
 * - node:http: `node -e` starting a bare node:http server that answers /healthz, spawn → 200;
 * - PGlite alone: `node -e` opening the existing folder with PGlite + PostGIS as the package ships
 *   them and answering `SELECT postgis_lib_version()`, spawn → exit. This is what the embedded start
 *   cost before the slim bundle, and the floor the existing-folder start is compared with.
 *
 * A warm-up start first fills the caches every later start uses (the compiled services in
 * .cache/start, the database image and slim PostGIS bundle in .cache/embedded-db, the web build);
 * it is printed as "first start" but not part of the medians. BENCH_QUICK=1: 2 rounds instead of 5.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../services/shared/testing/ports.js';
import { median, printTable, ratio } from './stats.js';
import { repoRoot } from './support.js';

const ROUNDS = process.env.BENCH_QUICK === '1' ? 2 : 5;
const POLL_MS = 20;
const TIMEOUT_MS = 600_000;

const scratch = mkdtempSync(join(tmpdir(), 'bench-start-'));
const baseEnv = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' };

/** Resolves with ms since `started` once `probe` says yes; rejects if `exited` settles first. */
async function until(started: number, probe: () => Promise<boolean>, exited: Promise<unknown>, what: string): Promise<number> {
  let gone = false;
  void exited.then(() => (gone = true));
  for (;;) {
    if (await probe().catch(() => false)) return performance.now() - started;
    if (gone) throw new Error(`${what}: the process exited first`);
    if (performance.now() - started > TIMEOUT_MS) throw new Error(`${what}: no answer within ${TIMEOUT_MS} ms`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

const answers = (url: string, ok: (status: number) => boolean) => async (): Promise<boolean> => {
  const response = await fetch(url);
  await response.body?.cancel();
  return ok(response.status);
};

interface StartSample {
  healthzMs: number;
  webMs: number;
}

/** One `npm start` with `dataDir`, measured from launch; stopped with SIGTERM afterwards. */
async function npmStart(dataDir: string, label: string): Promise<StartSample> {
  const [port, webPort, webhookPort] = [await freePort(), await freePort(), await freePort()];
  const env = {
    ...baseEnv,
    PORT: String(port),
    WEB_PORT: String(webPort),
    WEBHOOK_PORT: String(webhookPort),
    DATA_DIR: dataDir,
    WEBHOOK_STATE_DIR: join(scratch, 'webhook-state'),
    DEPLOY_ROOT: join(scratch, 'sites'),
    // start.ts recognises a service as started by its "listening" log line, which is at level info.
    LOG_LEVEL: 'info',
  };
  const started = performance.now();
  const child = spawn('npm', ['start', '--silent'], { cwd: repoRoot, env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  try {
    const healthz = until(started, answers(`http://127.0.0.1:${port}/healthz`, (s) => s === 200), exited, `${label} /healthz`);
    const web = until(started, answers(`http://127.0.0.1:${webPort}/login`, (s) => s < 500), exited, `${label} web app`);
    return { healthzMs: await healthz, webMs: await web };
  } catch (error) {
    throw new Error(`${(error as Error).message}\n${stderr}`);
  } finally {
    child.kill('SIGTERM');
    await exited;
    // npm exits before its children have stopped: the next measurement starts once the API has
    // closed its database and released the folder, so no two runs share the CPU or the folder.
    const lock = join(dataDir, 'pglite.pid');
    for (const deadline = Date.now() + TIMEOUT_MS; existsSync(lock) && Date.now() < deadline; ) await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

async function bareHttp(): Promise<number> {
  const port = await freePort();
  const started = performance.now();
  const child = spawn(process.execPath, ['-e', `require('node:http').createServer((q, s) => s.end('ok')).listen(${port}, '127.0.0.1')`], { env: baseEnv, stdio: 'ignore' });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  try {
    return await until(started, answers(`http://127.0.0.1:${port}/healthz`, (s) => s === 200), exited, 'node:http');
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

async function pgliteAlone(dataDir: string): Promise<number> {
  const script = `
    const { PGlite } = await import('@electric-sql/pglite');
    const { postgis } = await import('@electric-sql/pglite-postgis');
    const db = await PGlite.create({ dataDir: ${JSON.stringify(dataDir)}, extensions: { postgis } });
    await db.query('SELECT postgis_lib_version()');
    await db.close();`;
  const started = performance.now();
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: repoRoot, env: baseEnv, stdio: ['ignore', 'ignore', 'inherit'] });
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`PGlite alone exited with ${code}`);
  return performance.now() - started;
}

const seconds = (ms: number): string => `${(ms / 1000).toFixed(2)} s`;

try {
  console.log('warm-up: one start fills the caches (compiled services, database image, web build) …');
  const existing = join(scratch, 'existing');
  const first = await npmStart(existing, 'warm-up');
  console.log(`first start: /healthz after ${seconds(first.healthzMs)}, web app after ${seconds(first.webMs)} (not in the medians)`);

  const samples = { http: [] as number[], pglite: [] as number[], fresh: [] as StartSample[], existing: [] as StartSample[] };
  const steps: Array<() => Promise<void>> = [
    async () => void samples.http.push(await bareHttp()),
    async () => void samples.pglite.push(await pgliteAlone(join(existing, 'pglite'))),
    async () => {
      const dir = join(scratch, `fresh-${samples.fresh.length}`);
      samples.fresh.push(await npmStart(dir, 'fresh'));
      rmSync(dir, { recursive: true, force: true });
    },
    async () => void samples.existing.push(await npmStart(existing, 'existing')),
  ];
  for (let round = 0; round < ROUNDS; round++) {
    // Rotating the order spreads a slow moment of a shared machine over all four measurements.
    for (let i = 0; i < steps.length; i++) await steps[(round + i) % steps.length]!();
    console.log(`round ${round + 1}/${ROUNDS} done`);
  }

  const http = median(samples.http);
  const pglite = median(samples.pglite);
  const fresh = median(samples.fresh.map((s) => s.healthzMs));
  const existingHealthz = median(samples.existing.map((s) => s.healthzMs));
  printTable([
    { measurement: 'node:http bare server (baseline)', median: seconds(http), 'vs node:http': ratio(http, http), target: '' },
    { measurement: 'PGlite + PostGIS open existing folder alone (baseline)', median: seconds(pglite), 'vs node:http': ratio(pglite, http), target: '' },
    { measurement: 'npm start, fresh folder → /healthz', median: seconds(fresh), 'vs node:http': ratio(fresh, http), target: '≤ 8 s' },
    { measurement: 'npm start, existing folder → /healthz', median: seconds(existingHealthz), 'vs node:http': ratio(existingHealthz, http), target: '≤ 3 s' },
    { measurement: 'npm start, fresh folder → web app', median: seconds(median(samples.fresh.map((s) => s.webMs))), 'vs node:http': '', target: '' },
    { measurement: 'npm start, existing folder → web app', median: seconds(median(samples.existing.map((s) => s.webMs))), 'vs node:http': '', target: '' },
  ]);
  console.log(`existing-folder start / PGlite alone: ${ratio(existingHealthz, pglite)}; fresh / existing: ${ratio(fresh, existingHealthz)} (median of ${ROUNDS}, measured from launch)`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
