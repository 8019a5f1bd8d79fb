/**
 * What the build sandbox costs (`npm run bench -- build-sandbox`): push-to-live of the fixture site
 * (test/fixtures/site) through the real deploy script as root with DEPLOY_ISOLATION=users' users,
 * with DEPLOY_BUILD_SANDBOX=bwrap against today's path (DEPLOY_BUILD_SANDBOX=none: setpriv alone),
 * interleaved round by round (which goes first alternates), each target with its own users,
 * directory and port. Push-to-live runs from the commit until the site answers with it: the script
 * (fetch, export, dependencies reused from the live release, build, seal, switch, restart, health
 * check) and the check of the page. The script's own step timings are printed as medians too.
 * Target: at most 1.3× today's and at most 3 s. BUILD_SANDBOX_BENCH_ROUNDS sets the rounds (15).
 * Needs root and bubblewrap; prints why and exits 0 otherwise.
 */
import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, rmSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { ensureUsers, removeUsers, usersOf } from '../services/webhook/src/host/users.js';
import { sandboxMissing } from '../services/webhook/test/support/build-sandbox.js';
import { FixtureRepo, deployScript, fetchBuild, freePort, makeTempDir, restartFixtureSite, stopFixtureSites } from '../services/webhook/test/support/helpers.js';
import { teamUsers } from '../services/webhook/test/support/root-paths.js';
import { median, printTable, ratio } from './stats.js';

const ROUNDS = Number(process.env.BUILD_SANDBOX_BENCH_ROUNDS ?? 15);
type Path = 'today' | 'sandbox';
const SANDBOX: Record<Path, string> = { today: 'none', sandbox: 'bwrap' };

interface Run {
  seconds: number;
  steps: Record<string, number>;
}

const missing = sandboxMissing();
if (missing) {
  console.log(`build-sandbox bench skipped: ${missing}`);
  process.exit(0);
}

const users = teamUsers('bb', ['today', 'sandbox'] as const);
const root = makeTempDir('build-sandbox-bench');
const ports = {} as Record<Path, number>;
const dirOf = (path: Path) => join(root, 'sites', path);

/** One deploy of `commit` on `path`'s target, timed until its site serves `version`. */
function pushToLive(repo: FixtureRepo, path: Path, version: string): Promise<Run> {
  const started = performance.now();
  const child = spawn(deployScript, ['main', dirOf(path), String(ports[path]), repo.url], {
    env: {
      ...process.env,
      RESTART_COMMAND: restartFixtureSite,
      HEALTH_TIMEOUT_SECONDS: '30',
      BUILD_USER: users[path].buildUser,
      SITE_USER: users[path].siteUser,
      DEPLOY_BUILD_SANDBOX: SANDBOX[path],
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`deploy (${path}) exited with ${code}:\n${output.slice(-3000)}`));
      void fetchBuild(ports[path]).then((build) => {
        if (build.version !== version) return reject(new Error(`${path}: the site serves ${build.version}, not ${version}`));
        const steps = Object.fromEntries([...(/timings: (.*)/.exec(output)?.[1] ?? '').matchAll(/(\w+)=(\d+)ms/g)].map((m) => [m[1]!, Number(m[2])]));
        resolve({ seconds: (performance.now() - started) / 1000, steps });
      }, reject);
    });
  });
}

try {
  chmodSync(root, 0o711);
  mkdirSync(join(root, 'sites'), { mode: 0o711 });
  ensureUsers(usersOf([users.today, users.sandbox]));
  ports.today = await freePort();
  ports.sandbox = await freePort();
  const repo = new FixtureRepo(join(root, 'repo'));
  console.log(`machine: ${cpus().length} cores, load ${loadavg().map((l) => l.toFixed(1)).join(' ')}; ${ROUNDS} rounds; fixture site, DEPLOY_ISOLATION=users`);

  repo.commit('main', { VERSION: 'cold\n' });
  const cold = { today: await pushToLive(repo, 'today', 'cold'), sandbox: await pushToLive(repo, 'sandbox', 'cold') };
  const runs: Record<Path, Run[]> = { today: [], sandbox: [] };
  for (let round = 1; round <= ROUNDS; round++) {
    const version = `round-${round}`;
    repo.commit('main', { VERSION: `${version}\n` });
    const roundStarted = performance.now();
    const order: Path[] = round % 2 ? ['today', 'sandbox'] : ['sandbox', 'today'];
    for (const path of order) runs[path].push(await pushToLive(repo, path, version));
    // A release is named by its second: the next deploy of a target waits for a new one, which
    // would count against whichever path happens to come back within the same second.
    const left = 1100 - (performance.now() - roundStarted);
    if (left > 0) await new Promise((resolve) => setTimeout(resolve, left));
  }

  const s = (x: number) => `${x.toFixed(3)} s`;
  const stepNames = Object.keys(runs.today[0]!.steps);
  const row = (name: string, list: Run[]) => ({
    path: name,
    median: s(median(list.map((r) => r.seconds))),
    min: s(Math.min(...list.map((r) => r.seconds))),
    max: s(Math.max(...list.map((r) => r.seconds))),
    ...Object.fromEntries(stepNames.map((step) => [step, `${median(list.map((r) => r.steps[step] ?? 0))}`])),
  });
  printTable([
    { path: 'today, cold (npm ci)', median: s(cold.today.seconds), min: '', max: '', ...cold.today.steps },
    { path: 'sandbox, cold (npm ci)', median: s(cold.sandbox.seconds), min: '', max: '', ...cold.sandbox.steps },
    row(`today (DEPLOY_BUILD_SANDBOX=none), median of ${ROUNDS}`, runs.today),
    row(`sandbox (DEPLOY_BUILD_SANDBOX=bwrap), median of ${ROUNDS}`, runs.sandbox),
  ]);
  console.log('(step columns: medians in ms from the script\'s own timings line)');
  const today = median(runs.today.map((r) => r.seconds));
  const sandboxed = median(runs.sandbox.map((r) => r.seconds));
  const perRound = runs.sandbox.map((r, i) => r.seconds / runs.today[i]!.seconds);
  console.log(
    `push-to-live with the sandbox: ${s(sandboxed)} (target ≤ 3 s), ${ratio(sandboxed, today)} today's ${s(today)} (target ≤ 1.3×); ` +
      `median of the per-round ratios ${median(perRound).toFixed(2)}× (${Math.min(...perRound).toFixed(2)}–${Math.max(...perRound).toFixed(2)})`,
  );
  console.log(`verdict: ${sandboxed / today <= 1.3 && sandboxed <= 3 ? 'met' : 'NOT met'}`);
} finally {
  stopFixtureSites(root);
  rmSync(root, { recursive: true, force: true });
  removeUsers(Object.values(users).flatMap((u) => [u.buildUser, u.siteUser]));
}
