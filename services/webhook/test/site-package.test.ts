/**
 * A site folder that is a package of its own (its own package.json and package-lock.json, like
 * services/web): scripts/deploy-branch.sh with SITE_DIR installs only that folder's dependencies and
 * builds there, never the repository root's; a redeploy with an unchanged lockfile links the live
 * release's dependencies of that folder. The fixture site stands in for the Astro site (fast,
 * offline): its lockfile's one dependency is a tarball in its vendor/ folder. The root package's
 * build fails on purpose and its lockfile names a package that does not exist, so any use of the
 * root shows. services/web/test/deploy.test.ts proves the same with the real site.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, cpSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureUsers, removeUsers } from '../src/host/users.js';
import { deployEnv, deployScript, FixtureRepo, fetchBuild, freePort, liveRelease, makeTempDir, repoRoot, runScript, stopFixtureSites } from './support/helpers.js';
import { isolationMissing } from './support/root-paths.js';

const SITE_DIR = 'apps/site';
const root = makeTempDir('site-package');
const fixture = (name: string) => readFileSync(join(repoRoot, 'test/fixtures/site', name));
let repo: FixtureRepo;
let port: number;
const deployDir = join(root, 'target');

/** The fixture site moved into apps/site with its package.json, lockfile and vendored dependency. */
function siteWithItsOwnPackage(): Record<string, string | null> {
  const files: Record<string, string | null> = {
    'package.json': `${JSON.stringify({ name: 'platform', private: true, scripts: { build: 'echo "the root must not build" && exit 1' }, dependencies: { 'no-such-package-xyz': '1.0.0' } }, null, 2)}\n`,
    'package-lock.json': `${JSON.stringify({ name: 'platform', lockfileVersion: 3, requires: true, packages: { '': { name: 'platform', dependencies: { 'no-such-package-xyz': '1.0.0' } }, 'node_modules/no-such-package-xyz': { version: '1.0.0', resolved: 'file:missing.tgz' } } }, null, 2)}\n`,
    'build.mjs': null,
    'server.mjs': null,
    VERSION: null,
    'vendor/fixture-dep-1.0.0.tgz': null,
    [`${SITE_DIR}/VERSION`]: 'own-package\n',
  };
  for (const name of ['package.json', 'package-lock.json', 'build.mjs', 'server.mjs']) files[`${SITE_DIR}/${name}`] = fixture(name).toString('utf8');
  return files;
}

beforeAll(async () => {
  repo = new FixtureRepo(join(root, 'repo'));
  // The tarball is binary: copied by the fixture into vendor/, moved here with git.
  repo.commit('main', siteWithItsOwnPackage(), 'the site becomes a package of its own in apps/site');
  mkdirSync(join(repo.dir, SITE_DIR, 'vendor'), { recursive: true });
  cpSync(join(repoRoot, 'test/fixtures/site/vendor/fixture-dep-1.0.0.tgz'), join(repo.dir, SITE_DIR, 'vendor/fixture-dep-1.0.0.tgz'));
  repo.commit('main', {}, 'its vendored dependency');
  port = await freePort();
}, 60_000);

afterAll(() => stopFixtureSites(root));

const deploy = () => runScript(deployScript, ['main', deployDir, String(port), repo.url], { ...deployEnv(root), SITE_DIR, SERVICE_NAME: 'astro-main' });

describe('deploying a site folder that has its own lockfile', () => {
  it('installs only the folder’s dependencies and builds there, never at the repository root', async () => {
    const result = await deploy();
    expect(result.code, result.stderr).toBe(0);
    expect((await fetchBuild(port)).version).toBe('own-package');
    const live = join(deployDir, liveRelease(deployDir)!);
    expect(statSync(join(live, SITE_DIR, 'node_modules/fixture-dep/package.json')).isFile()).toBe(true);
    expect(() => statSync(join(live, 'node_modules'))).toThrow(/ENOENT/);
    expect(statSync(join(live, SITE_DIR, 'dist/build.json')).isFile()).toBe(true);
  }, 120_000);

  it('a redeploy with an unchanged lockfile links the live release’s dependencies of the folder', async () => {
    const before = join(deployDir, liveRelease(deployDir)!);
    repo.commit('main', { [`${SITE_DIR}/VERSION`]: 'own-package-2\n' });
    const result = await deploy();
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('lockfile unchanged: reused dependencies');
    expect((await fetchBuild(port)).version).toBe('own-package-2');
    const after = join(deployDir, liveRelease(deployDir)!);
    expect(after).not.toBe(before);
    const file = `${SITE_DIR}/node_modules/fixture-dep/package.json`;
    expect(statSync(join(after, file)).ino).toBe(statSync(join(before, file)).ino);
  }, 120_000);

  it('a changed lockfile of the folder installs afresh', async () => {
    const before = join(deployDir, liveRelease(deployDir)!);
    const lock = JSON.parse(fixture('package-lock.json').toString('utf8')) as { name: string };
    repo.commit('main', { [`${SITE_DIR}/package-lock.json`]: `${JSON.stringify({ ...lock, name: 'fixture-site-renamed' }, null, 2)}\n`, [`${SITE_DIR}/VERSION`]: 'own-package-3\n' });
    const result = await deploy();
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('installing dependencies (npm ci)');
    expect((await fetchBuild(port)).version).toBe('own-package-3');
    const after = join(deployDir, liveRelease(deployDir)!);
    const file = `${SITE_DIR}/node_modules/fixture-dep/package.json`;
    expect(statSync(join(after, file)).ino).not.toBe(statSync(join(before, file)).ino);
  }, 120_000);
});

const notRoot = isolationMissing();
if (notRoot) console.log(`skipping the isolated deploy of a site folder with its own lockfile: ${notRoot}`);

describe.skipIf(Boolean(notRoot))('deploying a site folder with its own lockfile under isolation (BUILD_USER, SITE_USER)', () => {
  const suffix = randomBytes(2).toString('hex');
  const buildUser = `wb-sp${suffix}`;
  const siteUser = `ws-sp${suffix}`;
  const isolatedDir = join(root, 'isolated');
  let isolatedPort = 0;

  beforeAll(async () => {
    chmodSync(root, 0o711); // the build user must reach the target's deploys/
    ensureUsers([{ name: siteUser }, { name: buildUser, group: siteUser }]);
    isolatedPort = await freePort();
  });
  afterAll(() => {
    // The site runs as the site user: it must be gone before userdel, which refuses a user with processes.
    stopFixtureSites(isolatedDir);
    for (let i = 0; i < 50 && spawnSync('pgrep', ['-u', siteUser]).status === 0; i++) spawnSync('sleep', ['0.1']);
    removeUsers([buildUser, siteUser]);
  });

  const isolatedDeploy = () =>
    runScript(deployScript, ['main', isolatedDir, String(isolatedPort), repo.url], { ...deployEnv(root), SITE_DIR, SERVICE_NAME: 'astro-isolated', BUILD_USER: buildUser, SITE_USER: siteUser });

  it('builds as the build user, seals the folder’s dependencies, and a redeploy links them without being able to change them', async () => {
    const first = await isolatedDeploy();
    expect(first.code, first.stderr).toBe(0);
    const before = join(isolatedDir, liveRelease(isolatedDir)!);
    const dependency = `${SITE_DIR}/node_modules/fixture-dep/package.json`;
    // Sealed: the build user's files now belong to root and nobody else may write them.
    const sealed = statSync(join(before, dependency));
    expect(sealed.uid).toBe(0);
    expect(sealed.mode & 0o022).toBe(0);
    expect(statSync(join(before, SITE_DIR, 'dist/build.json')).uid).toBe(0);

    repo.commit('main', { [`${SITE_DIR}/VERSION`]: 'isolated-2\n' });
    const second = await isolatedDeploy();
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toContain('lockfile unchanged: reused dependencies');
    expect((await fetchBuild(isolatedPort)).version).toBe('isolated-2');
    const after = join(isolatedDir, liveRelease(isolatedDir)!);
    expect(statSync(join(after, dependency)).ino).toBe(sealed.ino);
    expect(statSync(join(before, dependency)).mode).toBe(sealed.mode);
  }, 180_000);
});
