/**
 * Push-to-live of the platform's own site (`npm run bench -- site-deploy`): the real deploy script
 * (scripts/deploy-branch.sh, what the webhook runs) deploys services/web of this repository, as
 * committed on the current branch, from a local bare repository to a target on a free port, and the
 * time runs until the deploy has switched `live`, restarted the site and its page answers with the
 * pushed change.
 *
 * - cold: the first deploy of a target (no release to reuse: `npm ci` of the site's own lockfile,
 *   from the machine's npm cache, as on a host after its first deploy);
 * - unchanged lockfile: a commit that changes the site's title (dependencies linked from the live
 *   release, then `astro build`). Target: at most 20 s.
 *
 * Baselines, measured in the same run and interleaved round by round with the site's redeploys:
 * - the fixture site's redeploy (test/fixtures/site: the same script, git, restart and health check
 *   around a trivial build): what the deploy machinery costs by itself;
 * - the bare `astro build` of the same site in a scratch copy: the unavoidable work.
 * Each deploy's phases come from the script's own log lines, timed as they arrive, and its CPU time
 * (user + system of everything it waited for) is printed too: that figure barely moves with the
 * machine's load, the wall-clock times do. SITE_DEPLOY_BENCH_ROUNDS sets the rounds (3).
 */
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { FixtureRepo, fetchBuild, freePort, git, publishCommittedProject, restartFixtureSite, stopFixtureSites } from '../services/webhook/test/support/helpers.js';
import { median, printTable, ratio } from './stats.js';
import { repoRoot } from './support.js';

const ROUNDS = Number(process.env.SITE_DEPLOY_BENCH_ROUNDS ?? 3);
const TITLE_FILE = 'services/web/src/i18n/de.ts';

/** CPU seconds (user + system) of this process's waited-for children so far (Linux /proc, 10 ms ticks). */
function childCpuSeconds(): number {
  const fields = readFileSync('/proc/self/stat', 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[13]) + Number(fields[14])) / 100; // cutime, cstime (fields 16 and 17 of stat)
}

interface DeployRun {
  seconds: number;
  cpuSeconds: number;
  /** Seconds from the start to each phase's last log line: checkout, dependencies, build, live. */
  phases: { checkout: number; dependencies: number; build: number; live: number };
}

/** One run of the deploy script; the phases are timed by the log lines it prints as it goes. */
function deploy(args: string[], env: NodeJS.ProcessEnv): Promise<DeployRun> {
  const started = performance.now();
  const cpuBefore = childCpuSeconds();
  const at: Record<string, number> = {};
  const child = spawn(join(repoRoot, 'scripts/deploy-branch.sh'), args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const mark = (chunk: Buffer) => {
    const text = chunk.toString();
    output += text;
    const now = (performance.now() - started) / 1000;
    if (text.includes('checked out ')) at.checkout ??= now;
    if (text.includes('building')) at.dependencies ??= now;
    if (text.includes('live -> ')) at.build ??= now;
  };
  child.stdout.on('data', mark);
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => {
      const seconds = (performance.now() - started) / 1000;
      if (code !== 0) return reject(new Error(`deploy ${args.join(' ')} exited with ${code}:\n${output.slice(-4000)}`));
      const checkout = at.checkout ?? 0;
      const dependencies = at.dependencies ?? checkout;
      const build = at.build ?? dependencies;
      resolve({ seconds, cpuSeconds: childCpuSeconds() - cpuBefore, phases: { checkout, dependencies: dependencies - checkout, build: build - dependencies, live: seconds - build } });
    });
  });
}

/** Seconds of a bare `astro build` of the site in `dir` (its node_modules linked from a release). */
function bareBuild(dir: string): Promise<{ seconds: number; cpuSeconds: number }> {
  const started = performance.now();
  const cpuBefore = childCpuSeconds();
  const child = spawn(process.execPath, ['node_modules/astro/astro.js', 'build'], { cwd: dir, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ASTRO_TELEMETRY_DISABLED: '1' }, stdio: ['ignore', 'ignore', 'pipe'] });
  let errors = '';
  child.stderr.on('data', (chunk: Buffer) => (errors += chunk.toString()));
  return new Promise((resolve, reject) =>
    child.once('exit', (code) => (code === 0 ? resolve({ seconds: (performance.now() - started) / 1000, cpuSeconds: childCpuSeconds() - cpuBefore }) : reject(new Error(`astro build failed:\n${errors}`)))),
  );
}

async function pageOf(port: number, path = '/'): Promise<string> {
  const response = await fetch(`http://127.0.0.1:${port}${path}`);
  return response.text();
}

const root = mkdtempSync(join(tmpdir(), 'site-deploy-bench-'));
const siteTarget = join(root, 'site-target');
const fixtureTarget = join(root, 'fixture-target');
const siteBare = join(root, 'site.git');
const work = join(root, 'work');
const scratch = join(root, 'bare-build');
const stopSite = () => {
  try {
    process.kill(Number(readFileSync(join(siteTarget, 'site.pid'), 'utf8').trim()));
  } catch {
    // not running
  }
};

try {
  const [sitePort, fixturePort] = [await freePort(), await freePort()];
  publishCommittedProject(work, siteBare);
  const fixture = new FixtureRepo(join(root, 'fixture'));

  const siteArgs = ['main', siteTarget, String(sitePort), `file://${siteBare}`];
  const siteEnv = { SITE_DIR: 'services/web', RESTART_COMMAND: join(repoRoot, 'services/web/test/restart-site.sh'), HEALTH_TIMEOUT_SECONDS: '120', SERVICE_NAME: 'astro-main' };
  const fixtureArgs = ['main', fixtureTarget, String(fixturePort), fixture.url];
  const fixtureEnv = { RESTART_COMMAND: restartFixtureSite, HEALTH_TIMEOUT_SECONDS: '30', npm_config_cache: join(root, 'fixture-npm-cache') };

  let title = 'Kartierung';
  const pushTitle = (round: number) => {
    const next = `Kartierung ${round}`;
    const file = join(work, TITLE_FILE);
    writeFileSync(file, readFileSync(file, 'utf8').replace(`'site.title': '${title}'`, `'site.title': '${next}'`));
    title = next;
    git(work, 'commit', '-qam', `site title ${next}`);
    git(work, 'push', '-q', siteBare, 'main');
  };

  // A target's shared content collection, as on a real host: the site's own collection.
  cpSync(join(work, 'services/web/src/content'), join(siteTarget, 'shared/src/content'), { recursive: true });
  console.log(`machine: ${cpus().length} cores, load ${loadavg().map((l) => l.toFixed(1)).join(' ')}; ${ROUNDS} rounds`);
  const fixtureCold = await deploy(fixtureArgs, fixtureEnv);
  const siteCold = await deploy(siteArgs, siteEnv);
  if (!(await pageOf(sitePort)).includes(`<title>Karte · ${title}</title>`)) throw new Error('the cold deploy does not serve the site');

  // The bare build's scratch copy: the site and the shared code, dependencies linked from the live release.
  mkdirSync(join(scratch, 'services'), { recursive: true });
  cpSync(join(work, 'services/shared'), join(scratch, 'services/shared'), { recursive: true });
  cpSync(join(work, 'services/web'), join(scratch, 'services/web'), { recursive: true });
  execFileSync('cp', ['-al', join(siteTarget, 'live/services/web/node_modules'), join(scratch, 'services/web/node_modules')]);

  const site: DeployRun[] = [];
  const fixtureRuns: DeployRun[] = [];
  const bare: Array<{ seconds: number; cpuSeconds: number }> = [];
  for (let round = 1; round <= ROUNDS; round++) {
    fixture.commit('main', { VERSION: `round-${round}\n` });
    fixtureRuns.push(await deploy(fixtureArgs, fixtureEnv));
    if ((await fetchBuild(fixturePort)).version !== `round-${round}`) throw new Error('the fixture redeploy does not serve the new version');

    pushTitle(round);
    site.push(await deploy(siteArgs, siteEnv));
    if (!(await pageOf(sitePort)).includes(`<title>Karte · ${title}</title>`)) throw new Error(`round ${round}: the redeploy does not serve the new title`);

    bare.push(await bareBuild(join(scratch, 'services/web')));
  }

  const s = (x: number) => `${x.toFixed(1)} s`;
  const medianRun = (runs: DeployRun[]): DeployRun => ({
    seconds: median(runs.map((r) => r.seconds)),
    cpuSeconds: median(runs.map((r) => r.cpuSeconds)),
    phases: {
      checkout: median(runs.map((r) => r.phases.checkout)),
      dependencies: median(runs.map((r) => r.phases.dependencies)),
      build: median(runs.map((r) => r.phases.build)),
      live: median(runs.map((r) => r.phases.live)),
    },
  });
  const row = (name: string, run: DeployRun) => ({
    deploy: name,
    'push-to-live': s(run.seconds),
    CPU: s(run.cpuSeconds),
    'fetch+checkout': s(run.phases.checkout),
    dependencies: s(run.phases.dependencies),
    build: s(run.phases.build),
    'restart+health': s(run.phases.live),
  });
  const siteWarm = medianRun(site);
  const fixtureWarm = medianRun(fixtureRuns);
  const bareSeconds = median(bare.map((b) => b.seconds));
  const bareCpu = median(bare.map((b) => b.cpuSeconds));
  printTable([
    row('site, cold (first deploy, npm ci)', siteCold),
    row(`site, unchanged lockfile (median of ${ROUNDS})`, siteWarm),
    row('baseline: fixture site, cold', fixtureCold),
    row(`baseline: fixture site, unchanged lockfile (median of ${ROUNDS})`, fixtureWarm),
    { deploy: `baseline: bare astro build of the site (median of ${ROUNDS})`, 'push-to-live': '', CPU: s(bareCpu), 'fetch+checkout': '', dependencies: '', build: s(bareSeconds), 'restart+health': '' },
  ]);
  console.log(
    `site redeploy with an unchanged lockfile: ${s(siteWarm.seconds)} (target ≤ 20 s), ${ratio(siteWarm.seconds, bareSeconds)} the bare astro build, ` +
      `${ratio(siteWarm.seconds, fixtureWarm.seconds)} the fixture site's redeploy; cold ${s(siteCold.seconds)}`,
  );
  console.log(`each round: ${site.map((r, i) => `site ${s(r.seconds)} / fixture ${s(fixtureRuns[i]!.seconds)} / bare build ${s(bare[i]!.seconds)}`).join('; ')}`);
} catch (error) {
  // What the site printed explains most failures (a port still taken, a crash at start).
  try {
    console.error(`site log (last 3000 characters):\n${readFileSync(join(siteTarget, 'site.log'), 'utf8').slice(-3000)}`);
  } catch {
    // no site log yet
  }
  throw error;
} finally {
  stopSite();
  stopFixtureSites(root);
  rmSync(root, { recursive: true, force: true });
}
