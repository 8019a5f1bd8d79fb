/**
 * scripts/deploy-branch.sh and scripts/host/rollback.sh against real git repositories (file://),
 * the fixture site's real `npm ci` and build, and a restart command that really (re)starts the
 * site on its port.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lacks, requirements } from '../../../test/helpers/requirements.js';
import {
  deployEnv,
  deployScript,
  FixtureRepo,
  fetchBuild,
  freePort,
  liveRelease,
  makeTempDir,
  recordDeployScript,
  releasesOf,
  repoRoot,
  restartFixtureSite,
  rollbackScript,
  runScript,
  startScript,
  stopFixtureSites,
  waitFor,
} from './support/helpers.js';

const root = makeTempDir('deploy-branch');
let repo: FixtureRepo;

beforeAll(() => {
  repo = new FixtureRepo(join(root, 'repo'));
});
afterAll(() => {
  stopFixtureSites(root);
});

/** A fresh target directory and port per test, so tests do not depend on each other's releases. */
async function newTarget(name: string): Promise<{ dir: string; port: number }> {
  return { dir: join(root, 'targets', name), port: await freePort() };
}

const slowBuildStarted = (dir: string): boolean =>
  readdirSync(join(dir, 'logs')).some((f) => readFileSync(join(dir, 'logs', f), 'utf8').includes('slow build'));

const deploy = (branch: string, dir: string, port: number, extra: NodeJS.ProcessEnv = {}) =>
  runScript(deployScript, [branch, dir, String(port), repo.url], deployEnv(root, extra));

describe('deploy-branch.sh', () => {
  it('deploys a pushed branch: live points at the new release, the build log is written, the site answers', async () => {
    const { dir, port } = await newTarget('first');
    mkdirSync(join(dir, 'shared/src/content'), { recursive: true });
    writeFileSync(join(dir, 'shared/src/content/denkmal.md'), '# Denkmal\n');
    const commit = repo.commit('main', { VERSION: 'first-1\n' });

    const result = await deploy('main', dir, port);

    expect(result.code, result.stderr).toBe(0);
    const [release] = releasesOf(dir);
    expect(release).toMatch(/^\d{14}$/);
    expect(liveRelease(dir)).toBe(`deploys/${release}`);
    expect(readFileSync(join(dir, 'deploys', release!, 'REVISION'), 'utf8').trim()).toBe(commit);
    expect(existsSync(join(dir, `logs/npm-build-${release}.log`))).toBe(true);
    expect(result.stdout).toContain(`release=${release} commit=${commit}`);
    expect(lstatSync(join(dir, 'deploys', release!, 'src/content')).isSymbolicLink()).toBe(true);
    const build = await fetchBuild(port);
    expect(build).toMatchObject({ version: 'first-1', port: String(port), content: ['denkmal.md'] });
    expect(readFileSync(join(dir, 'restarts.log'), 'utf8')).toBe('restart astro-main\n');
  });

  it('reuses the live release dependencies as a hard-link copy when the lockfile is unchanged, and runs npm ci when it changed', async () => {
    const { dir, port } = await newTarget('reuse');
    repo.commit('develop', { VERSION: 'reuse-1\n' });
    expect((await deploy('develop', dir, port)).code).toBe(0);
    const [first] = releasesOf(dir);
    // The fixture has no dependencies; plant a module file to watch how node_modules is carried over.
    mkdirSync(join(dir, 'deploys', first!, 'node_modules/left-pad'), { recursive: true });
    writeFileSync(join(dir, 'deploys', first!, 'node_modules/left-pad/index.js'), 'module.exports = 1;\n');

    repo.commit('develop', { VERSION: 'reuse-2\n' });
    const second = await deploy('develop', dir, port);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toContain('lockfile unchanged: reused dependencies');
    const secondRelease = releasesOf(dir)[1]!;
    const copied = join(dir, 'deploys', secondRelease, 'node_modules');
    expect(lstatSync(copied).isSymbolicLink()).toBe(false);
    expect(statSync(join(copied, 'left-pad/index.js')).ino).toBe(
      statSync(join(dir, 'deploys', first!, 'node_modules/left-pad/index.js')).ino,
    );
    expect((await fetchBuild(port)).version).toBe('reuse-2');

    const lock = JSON.parse(readFileSync(join(repo.dir, 'package-lock.json'), 'utf8')) as { version: string };
    repo.commit('develop', { 'package-lock.json': JSON.stringify({ ...lock, name: 'fixture-site' }, null, 1) });
    const third = await deploy('develop', dir, port);
    expect(third.code, third.stderr).toBe(0);
    expect(third.stdout).toContain('installing dependencies (npm ci)');
  });

  it('a failing npm ci leaves live untouched and removes the half-made release', async () => {
    const { dir, port } = await newTarget('npm-ci-fails');
    repo.commit('ci-fails', { VERSION: 'good\n' });
    expect((await deploy('ci-fails', dir, port)).code).toBe(0);
    const live = liveRelease(dir);
    // package.json asks for a dependency the lockfile does not have: npm ci refuses, offline.
    const pkg = JSON.parse(readFileSync(join(repo.dir, 'package.json'), 'utf8')) as Record<string, unknown>;
    repo.commit('ci-fails', { 'package.json': JSON.stringify({ ...pkg, dependencies: { 'left-pad': '1.3.0' } }), VERSION: 'bad\n' });

    const result = await deploy('ci-fails', dir, port);

    expect(result.code).toBe(5);
    expect(result.stderr).toContain('npm ci failed');
    expect(liveRelease(dir)).toBe(live);
    expect(releasesOf(dir)).toHaveLength(1);
    expect((await fetchBuild(port)).version).toBe('good');
  });

  it('a failing build leaves live untouched and is not restarted', async () => {
    const { dir, port } = await newTarget('build-fails');
    repo.commit('build-fails', { VERSION: 'good\n' });
    expect((await deploy('build-fails', dir, port)).code).toBe(0);
    const live = liveRelease(dir);
    repo.commit('build-fails', { FAIL_BUILD: 'yes\n', VERSION: 'bad\n' });

    const result = await deploy('build-fails', dir, port);

    expect(result.code).toBe(6);
    expect(liveRelease(dir)).toBe(live);
    expect(releasesOf(dir)).toHaveLength(1);
    expect(readFileSync(join(dir, 'restarts.log'), 'utf8').trim().split('\n')).toHaveLength(1);
    const logs = readdirSync(join(dir, 'logs')).filter((f) => f.startsWith('npm-build-'));
    expect(logs.map((f) => readFileSync(join(dir, 'logs', f), 'utf8')).join('')).toContain('build failed on purpose');
  });

  it('a site that does not come up puts the previous release back live and restarts it', async () => {
    const { dir, port } = await newTarget('health-fails');
    repo.commit('health-fails', { VERSION: 'good\n' });
    expect((await deploy('health-fails', dir, port)).code).toBe(0);
    const live = liveRelease(dir);
    repo.commit('health-fails', { CRASH_ON_START: 'yes\n', VERSION: 'crashes\n' });

    const result = await deploy('health-fails', dir, port, { HEALTH_TIMEOUT_SECONDS: '2' });

    expect(result.code).toBe(8);
    expect(liveRelease(dir)).toBe(live);
    expect(releasesOf(dir)).toHaveLength(1);
    expect((await waitFor(() => fetchBuild(port).catch(() => null), 5000, 'previous site')).version).toBe('good');
  });

  it('a deploy killed halfway leaves the previous release live; the next deploy clears its debris', async () => {
    const { dir, port } = await newTarget('killed');
    repo.commit('killed', { VERSION: 'before\n' });
    expect((await deploy('killed', dir, port)).code).toBe(0);
    const live = liveRelease(dir);
    repo.commit('killed', { SLOW_BUILD: '20\n', VERSION: 'never\n' });

    const run = startScript(deployScript, ['killed', dir, String(port), repo.url], deployEnv(root));
    await waitFor(() => slowBuildStarted(dir), 15_000, 'the slow build');
    process.kill(-run.child.pid!, 'SIGKILL');
    const result = await run.done;

    expect(result.signal).toBe('SIGKILL');
    expect(liveRelease(dir)).toBe(live);
    expect((await fetchBuild(port)).version).toBe('before');

    repo.commit('killed', { SLOW_BUILD: null, VERSION: 'after\n' });
    expect((await deploy('killed', dir, port)).code).toBe(0);
    expect(releasesOf(dir)).toHaveLength(2);
    expect((await fetchBuild(port)).version).toBe('after');
  });

  it('a deploy stopped with SIGTERM cleans up its release and exits 143 with live untouched', async () => {
    const { dir, port } = await newTarget('terminated');
    repo.commit('terminated', { VERSION: 'before\n' });
    expect((await deploy('terminated', dir, port)).code).toBe(0);
    const live = liveRelease(dir);
    repo.commit('terminated', { SLOW_BUILD: '20\n' });

    const run = startScript(deployScript, ['terminated', dir, String(port), repo.url], deployEnv(root));
    await waitFor(() => slowBuildStarted(dir), 15_000, 'the slow build');
    process.kill(-run.child.pid!, 'SIGTERM');
    const result = await run.done;

    expect(result.code).toBe(143);
    expect(liveRelease(dir)).toBe(live);
    expect(releasesOf(dir)).toEqual([live!.replace('deploys/', '')]);
  });

  it('two deploys of one target at once are serialized by the lock and get distinct releases', async () => {
    const { dir, port } = await newTarget('concurrent');
    const trace = join(root, 'concurrent-trace.log');
    repo.commit('concurrent', { VERSION: 'both\n', SLOW_BUILD: '1\n' });

    const [a, b] = await Promise.all([
      deploy('concurrent', dir, port, { BUILD_TRACE_FILE: trace, BUILD_ENV_ALLOW: 'BUILD_TRACE_FILE' }),
      deploy('concurrent', dir, port, { BUILD_TRACE_FILE: trace, BUILD_ENV_ALLOW: 'BUILD_TRACE_FILE' }),
    ]);

    expect([a.code, b.code]).toEqual([0, 0]);
    const events = readFileSync(trace, 'utf8').trim().split('\n').map((line) => line.split(' ')[0]);
    expect(events).toEqual(['start', 'end', 'start', 'end']);
    const releases = releasesOf(dir);
    expect(releases).toHaveLength(2);
    expect(new Set(releases).size).toBe(2);
    expect(liveRelease(dir)).toBe(`deploys/${releases[1]}`);
  });

  it('keeps the newest KEEP_RELEASES releases and rollback.sh returns to the previous one', async () => {
    const { dir, port } = await newTarget('retention');
    for (const version of ['r1', 'r2', 'r3']) {
      repo.commit('retention', { VERSION: `${version}\n` });
      expect((await deploy('retention', dir, port, { KEEP_RELEASES: '2' })).code).toBe(0);
    }
    const releases = releasesOf(dir);
    expect(releases).toHaveLength(2);
    expect(liveRelease(dir)).toBe(`deploys/${releases[1]}`);
    expect(readdirSync(join(dir, 'logs')).filter((f) => f.startsWith('npm-build-')).sort()).toEqual(
      releases.map((r) => `npm-build-${r}.log`),
    );

    const rollback = await runScript(rollbackScript, [dir, String(port), 'astro-retention'], deployEnv(root));
    expect(rollback.code, rollback.stderr).toBe(0);
    expect(liveRelease(dir)).toBe(`deploys/${releases[0]}`);
    expect((await fetchBuild(port)).version).toBe('r2');

    const again = await runScript(rollbackScript, [dir, String(port), 'astro-retention'], deployEnv(root));
    expect(again.code).toBe(4);
    expect(liveRelease(dir)).toBe(`deploys/${releases[0]}`);
  });

  it('derives the service name from the branch family and takes branch names as inert data', async () => {
    const { dir, port } = await newTarget('feature');
    const branch = 'feature/team-de1/x;touch${IFS}pwned&&`id`$(id)|';
    repo.commit(branch, { VERSION: 'feature\n' });

    const result = await deploy(branch, dir, port);

    expect(result.code, result.stderr).toBe(0);
    expect(readFileSync(join(dir, 'restarts.log'), 'utf8')).toBe('restart astro-feature-team-de1\n');
    expect(existsSync(join(dir, 'pwned'))).toBe(false);
    expect(existsSync(join(root, 'pwned'))).toBe(false);
    expect((await fetchBuild(port)).version).toBe('feature');
  });

  it('follows no link the repository planted: REVISION, .deps-key and src pointing outside stay untouched', async () => {
    const { dir, port } = await newTarget('planted-links');
    const victimFile = join(root, 'victim.txt');
    const victimDir = join(root, 'victim-dir');
    writeFileSync(victimFile, 'untouched\n');
    mkdirSync(victimDir, { recursive: true });
    repo.commit('planted', { VERSION: 'planted\n' });
    for (const [name, target] of [['REVISION', victimFile], ['.deps-key', victimFile], ['.release-built', victimFile], ['src', victimDir]] as const) {
      rmSync(join(repo.dir, name), { recursive: true, force: true });
      symlinkSync(target, join(repo.dir, name));
    }
    repo.commit('planted', {}, 'plant links');

    const result = await deploy('planted', dir, port);

    expect(result.code, result.stderr).toBe(0);
    expect(readFileSync(victimFile, 'utf8')).toBe('untouched\n');
    expect(readdirSync(victimDir)).toEqual([]);
    expect(lstatSync(join(dir, 'live/REVISION')).isSymbolicLink()).toBe(false);
    expect((await fetchBuild(port)).version).toBe('planted');
  });

  it.skipIf(lacks('shellcheck of the deploy scripts', requirements.shellcheck()))('is shellcheck clean, with the sourced library and the test stand-ins', () => {
    const scripts = [deployScript, rollbackScript, join(repoRoot, 'scripts/host/lib/releases.sh'), restartFixtureSite, recordDeployScript];
    const result = spawnSync('shellcheck', ['-x', ...scripts], { encoding: 'utf8', cwd: repoRoot });
    expect(result.stdout + result.stderr).toBe('');
    expect(result.status).toBe(0);
  });

  it('refuses bad arguments with exit code 2 before touching anything', async () => {
    const { dir, port } = await newTarget('usage');
    const cases: string[][] = [
      ['main', dir, String(port)],
      ['main', 'relative/dir', String(port), repo.url],
      ['main', dir, '70000', repo.url],
      ['--upload-pack=touch /tmp/x', dir, String(port), repo.url],
      ['bad..branch', dir, String(port), repo.url],
      ['main', dir, String(port), '--config=core.sshCommand=touch'],
    ];
    for (const args of cases) {
      const result = await runScript(deployScript, args, deployEnv(root));
      expect(result.code, args.join(' ')).toBe(2);
    }
    expect(existsSync(dir)).toBe(false);
  });
});
