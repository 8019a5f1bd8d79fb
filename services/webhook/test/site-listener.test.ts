/**
 * The health check confirms that the listener on the target's port is the target's site: with
 * DEPLOY_ISOLATION=users' users the site runs as the target's site user, so a process of another
 * team's site user that answers on the port while the target restarts is not taken for the new
 * release. Real users, real git, the real deploy and rollback scripts; the squatter is a plain
 * HTTP server run as the other team's site user. Needs root; skipped with one printed line otherwise.
 */
import { type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { serviceNameOf } from '../../shared/targets.js';
import { ensureUsers, removeUsers, usersOf } from '../src/host/users.js';
import { FixtureRepo, fetchBuild, freePort, liveRelease, makeTempDir, releasesOf, restartFixtureSite, runScript, stopFixtureSites, waitFor } from './support/helpers.js';
import { installPlatform, squatPort } from './support/build-sandbox.js';
import { isolationMissing, teamUsers } from './support/root-paths.js';

const missing = isolationMissing();
if (missing) console.warn(`skipping site listener tests: ${missing}`);

const users = teamUsers('sl', ['a', 'b'] as const);
const branch = 'feature/team-a/site';
let root: string;
let installed: ReturnType<typeof installPlatform>;
let repo: FixtureRepo;
let port: number;
let squatter: ChildProcess | undefined;
const dir = () => join(root, 'sites', 'team-a');
const service = serviceNameOf({ key: 'feature/team-a' });
const env = () => ({ RESTART_COMMAND: restartFixtureSite, HEALTH_TIMEOUT_SECONDS: '10', BUILD_USER: users.a.buildUser, SITE_USER: users.a.siteUser, SERVICE_NAME: service });
const deploy = () => runScript(installed.script, [branch, dir(), String(port), repo.url], env());

/** Stop team a's site, as its restart does, and have team b's site user take the port meanwhile. */
async function squatWhileRestarting(): Promise<void> {
  const squat = squatPort(users.b.siteUser, port, JSON.stringify({ version: 'squatter' }));
  squatter = squat.child;
  stopFixtureSites(dir());
  await squat.listening;
  await waitFor(async () => (await fetchBuild(port).catch(() => undefined))?.version === 'squatter', 10_000, 'the squatter to answer');
}

describe.skipIf(missing)('the health check confirms the listener is the target\'s site (DEPLOY_ISOLATION=users)', () => {
  beforeAll(async () => {
    root = makeTempDir('site-listener');
    chmodSync(root, 0o711);
    ensureUsers(usersOf([users.a, users.b]));
    installed = installPlatform(root);
    repo = new FixtureRepo(join(root, 'repo'));
    port = await freePort();
    mkdirSync(join(root, 'sites'), { mode: 0o711 });
    repo.commit(branch, { VERSION: 'a-1\n' });
    const first = await deploy();
    expect(first.code, first.stderr).toBe(0);
  }, 60_000);

  afterEach(async () => {
    if (squatter && squatter.exitCode === null) {
      squatter.kill('SIGKILL');
      await new Promise((resolve) => squatter!.once('exit', resolve));
    }
    squatter = undefined;
  });

  afterAll(() => {
    if (root) {
      stopFixtureSites(root);
      rmSync(root, { recursive: true, force: true });
    }
    removeUsers(Object.values(users).flatMap((u) => [u.buildUser, u.siteUser]));
  });

  it('another team\'s site squatting the port while the target restarts fails the deploy (exit 8): live stays on the previous release', async () => {
    const live = liveRelease(dir());
    const known = releasesOf(dir());
    repo.commit(branch, { VERSION: 'a-2\n' });
    await squatWhileRestarting();

    const result = await deploy();

    expect(result.code, result.stderr).toBe(8);
    expect(result.stderr).toMatch(new RegExp(`port ${port} .*${users.b.siteUser}`));
    expect(liveRelease(dir())).toBe(live);
    expect(releasesOf(dir())).toEqual(known);
  }, 60_000);

  it('a rollback onto a port another team\'s site holds is refused the same way (exit 8)', async () => {
    repo.commit(branch, { VERSION: 'a-3\n' });
    const good = await deploy();
    expect(good.code, good.stderr).toBe(0);
    const live = liveRelease(dir());
    await squatWhileRestarting();

    const result = await runScript(installed.rollback, [dir(), String(port), service], env());

    expect(result.code, result.stderr).toBe(8);
    expect(liveRelease(dir())).toBe(live);
  }, 60_000);

  it('the target\'s own site passes: a deploy after the squatter is gone goes live as the site user', async () => {
    repo.commit(branch, { VERSION: 'a-4\n' });
    const result = await deploy();
    expect(result.code, result.stderr).toBe(0);
    expect(await fetchBuild(port)).toMatchObject({ version: 'a-4' });
    const pid = Number(readFileSync(join(dir(), `site-${service}.pid`), 'utf8').trim());
    expect(existsSync(`/proc/${pid}`)).toBe(true);
  }, 60_000);
});
