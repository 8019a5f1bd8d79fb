/**
 * Root never follows a path a build can change: the deploy script (as root, DEPLOY_ISOLATION=users)
 * against builds of a team member with a grudge, on the paths root reads and writes in the team's
 * own cache and release. Real Unix users (useradd), real git, the real deploy script — run from a
 * root-owned copy of the platform's scripts, so a build that takes that copy over shows what it
 * would do to the real one. Two teams, a and b: b's live release is the victim of a's builds.
 * Needs root; skipped with one printed line otherwise.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, cpSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureUsers, removeUsers, usersOf } from '../src/host/users.js';
import { FixtureRepo, fetchBuild, freePort, liveRelease, makeTempDir, releasesOf, repoRoot, restartFixtureSite, runScript, startScript, stopFixtureSites, waitFor } from './support/helpers.js';
import { commitLink, hostileBuild, isolationMissing, logStamp, teamUsers, treeOf } from './support/root-paths.js';

const missing = isolationMissing();
if (missing) console.warn(`skipping root-paths tests (deploy script): ${missing}`);

type Team = 'a' | 'b';
const users = teamUsers('rp', ['a', 'b'] as const);
let root: string;
let platform: string;
let repo: FixtureRepo;
const ports = {} as Record<Team, number>;
const dirOf = (team: Team) => join(root, 'sites', `team-${team}`);
const branchOf = (team: Team, name: string) => `feature/team-${team}/${name}`;

/** The deploy script of the platform copy, for one team, as the webhook launcher would run it. */
function deploy(team: Team, branch: string, env: Record<string, string> = {}, commit?: string) {
  return runScript(join(platform, 'scripts/deploy-branch.sh'), [branch, dirOf(team), String(ports[team]), repo.url, ...(commit ? [commit] : [])], {
    RESTART_COMMAND: restartFixtureSite,
    // How long a restarted fixture site may take to answer: generous, a loaded CI machine needed over 20 s once.
    HEALTH_TIMEOUT_SECONDS: '60',
    KEEP_RELEASES: '3',
    BUILD_USER: users[team].buildUser,
    SITE_USER: users[team].siteUser,
    ...env,
  });
}

async function deployed(team: Team, branch: string, env: Record<string, string> = {}, commit?: string): Promise<void> {
  const result = await deploy(team, branch, env, commit);
  expect(result.code, result.stderr).toBe(0);
}

/** Team b's live release: what a's attacks aim at. Its build leaves an Astro cache, as Astro does. */
const victimLive = () => realpathSync(join(dirOf('b'), 'live'));

describe.skipIf(missing)('root never follows a path the build can change (deploy script)', () => {
  beforeAll(async () => {
    root = makeTempDir('root-paths');
    chmodSync(root, 0o711);
    ensureUsers(usersOf([users.a, users.b]));
    // The platform's scripts as an operator installs them: owned by root, readable by everyone.
    platform = join(root, 'platform');
    mkdirSync(join(platform, 'scripts'), { recursive: true });
    cpSync(join(repoRoot, 'scripts/deploy-branch.sh'), join(platform, 'scripts/deploy-branch.sh'));
    cpSync(join(repoRoot, 'scripts/host'), join(platform, 'scripts/host'), { recursive: true });
    execFileSync('chmod', ['-R', 'u=rwX,go=rX', platform]);
    repo = new FixtureRepo(join(root, 'repo'));
    ports.a = await freePort();
    ports.b = await freePort();
    mkdirSync(join(root, 'sites'), { mode: 0o711 });
    repo.commit(branchOf('b', 'live'), {
      'build.mjs': hostileBuild({ after: "fs.mkdirSync('node_modules/.astro', { recursive: true }); fs.writeFileSync('node_modules/.astro/data-store.json', '{}');" }),
      VERSION: 'b-live\n',
    });
    await deployed('b', branchOf('b', 'live'));
    repo.commit(branchOf('a', 'base'), { VERSION: 'a-base\n' });
    await deployed('a', branchOf('a', 'base'));
  }, 120_000);

  afterAll(() => {
    if (root) stopFixtureSites(root);
    removeUsers(Object.values(users).flatMap((u) => [u.buildUser, u.siteUser]));
  });

  it('a build that swaps its cache folders for links to the platform\'s scripts gets nothing: the next deploys, its own and another team\'s, run the platform\'s code unchanged', async () => {
    const lib = join(platform, 'scripts/host/lib');
    const original = readFileSync(join(lib, 'releases.sh'), 'utf8');
    const proof = join(root, 'ran-as-root');
    const branch = branchOf('a', 'cache');
    repo.commit(branch, {
      'attack-plan.json': JSON.stringify({ lib, host: join(platform, 'scripts/host'), line: `printf '%s\\n' "$EUID" >>${proof}` }),
      'build.mjs': hostileBuild({
        before: `
          const cache = path.resolve('../../cache');
          for (const [name, target] of [['npm', plan.lib], ['home', plan.host]]) {
            fs.rmSync(path.join(cache, name), { recursive: true, force: true });
            fs.symlinkSync(target, path.join(cache, name));
          }
          try {
            const text = fs.readFileSync(plan.lib + '/releases.sh', 'utf8');
            fs.writeFileSync(plan.lib + '/releases.sh.new', text + '\\n' + plan.line + '\\n');
            fs.renameSync(plan.lib + '/releases.sh.new', plan.lib + '/releases.sh');
            console.log('attack: releases.sh rewritten');
          } catch (error) { console.log('attack: ' + error.code); }`,
      }),
      VERSION: 'a-cache\n',
    });

    await deployed('a', branch);
    expect(lstatSync(join(dirOf('a'), 'cache/npm')).isSymbolicLink(), 'the links are planted').toBe(true);
    await deployed('a', branch); // the team's next deploy: root prepares the cache again
    await deployed('b', branchOf('b', 'live')); // an ordinary deploy of another team sources releases.sh

    for (const dir of [lib, join(platform, 'scripts/host')]) expect(statSync(dir).uid, dir).toBe(0);
    expect(statSync(join(lib, 'releases.sh')).uid).toBe(0);
    expect(readFileSync(join(lib, 'releases.sh'), 'utf8')).toBe(original);
    expect(existsSync(proof)).toBe(false);
  }, 60_000);

  it('a node_modules link in the repository leads neither root\'s hard-link copy nor its cache removal into another team\'s live release', async () => {
    const before = treeOf(victimLive());
    expect(before).toContain('node_modules/.astro/data-store.json 2');
    const branch = branchOf('a', 'linked-modules');
    commitLink(repo, branch, 'node_modules', join(victimLive(), 'node_modules'));

    const result = await deploy('a', branch);

    expect(treeOf(victimLive())).toEqual(before);
    expect(result.code, result.stderr).toBe(0);
    expect(lstatSync(join(dirOf('a'), 'live/node_modules')).isDirectory()).toBe(true);
    expect(await fetchBuild(ports.a)).toMatchObject({ dependency: 'fixture-dep 1.0.0' });
  }, 60_000);

  it('a live release whose node_modules the build made a link is not copied through that link by the next deploy', async () => {
    const before = treeOf(victimLive());
    const branch = branchOf('a', 'relinked');
    repo.commit(branch, {
      'attack-plan.json': JSON.stringify({ victim: join(victimLive(), 'node_modules') }),
      'build.mjs': hostileBuild({ after: "fs.rmSync('node_modules', { recursive: true, force: true }); fs.symlinkSync(plan.victim, 'node_modules');" }),
      VERSION: 'a-relinked\n',
    });
    await deployed('a', branch);
    expect(lstatSync(join(dirOf('a'), 'live/node_modules')).isSymbolicLink(), 'the link is sealed live').toBe(true);

    repo.commit(branch, { 'attack-plan.json': null, 'build.mjs': readFileSync(join(repoRoot, 'test/fixtures/site/build.mjs'), 'utf8'), VERSION: 'a-after-relink\n' });
    const result = await deploy('a', branch);

    expect(treeOf(victimLive())).toEqual(before);
    expect(result.code, result.stderr).toBe(0);
    expect(lstatSync(join(dirOf('a'), 'live/node_modules')).isDirectory()).toBe(true);
    expect(await fetchBuild(ports.a)).toMatchObject({ version: 'a-after-relink', dependency: 'fixture-dep 1.0.0' });
  }, 60_000);

  it.each([
    ['writes a log name from the far future into .deploy-log', "fs.rmSync('.deploy-log', { force: true }); fs.writeFileSync('.deploy-log', 'deploy-99999999999999-0.log\\n');"],
    [
      'makes .deploy-log a link to such a name in its cache',
      "fs.writeFileSync('../../cache/home/log-name', 'deploy-99999999999999-0.log\\n'); fs.rmSync('.deploy-log', { force: true }); fs.symlinkSync(path.resolve('../../cache/home/log-name'), '.deploy-log');",
    ],
  ])('a build that %s does not delete the deploy logs', async (_what, after) => {
    const logs = join(dirOf('a'), 'logs');
    const ownLog = join(logs, `deploy-${logStamp()}-${randomUUID()}.log`);
    writeFileSync(ownLog, 'the server\'s log of this deploy\n', { mode: 0o600 });
    const branch = branchOf('a', `log-${randomUUID().slice(0, 8)}`);
    repo.commit(branch, { 'build.mjs': hostileBuild({ after }), VERSION: 'a-log\n' });

    await deployed('a', branch, { DEPLOY_LOG: ownLog, KEEP_RELEASES: '1' });

    expect(existsSync(ownLog), 'the log of the deploy that just ran').toBe(true);
    expect(existsSync(join(logs, `npm-build-${liveRelease(dirOf('a'))!.replace('deploys/', '')}.log`))).toBe(true);
    const recorded = join(dirOf('a'), 'live/.deploy-log');
    expect(lstatSync(recorded).isFile()).toBe(true);
    expect(readFileSync(recorded, 'utf8')).toBe(`${ownLog.split('/').pop()}\n`);
  }, 60_000);

  it('a build that makes REVISION a folder does not make root forget the live commit: a replay of an older commit is still refused', async () => {
    const branch = branchOf('a', 'revision-dir');
    const older = repo.commit(branch, { VERSION: 'a-older\n' });
    await deployed('a', branch, {}, older);
    const hostile = repo.commit(branch, {
      'build.mjs': hostileBuild({ after: "fs.rmSync('REVISION', { force: true }); fs.mkdirSync('REVISION'); fs.writeFileSync('REVISION/HEAD', 'not a commit');" }),
      VERSION: 'a-revision-dir\n',
    });
    await deployed('a', branch, {}, hostile);
    const live = liveRelease(dirOf('a'));

    const replay = await deploy('a', branch, {}, older);

    expect(replay.code, replay.stderr).toBe(9);
    expect(liveRelease(dirOf('a'))).toBe(live);
    expect((await fetchBuild(ports.a)).version).toBe('a-revision-dir');
    expect(readFileSync(join(dirOf('a'), 'live/REVISION'), 'utf8')).toBe(`${hostile}\n`);
  }, 60_000);

  it('a release whose build planted .release-built and was killed outright is debris: removed by the next deploy, never rolled back to', async () => {
    const dir = dirOf('a');
    const branch = branchOf('a', 'planted-marker');
    repo.commit(branch, { 'build.mjs': hostileBuild({ before: "fs.writeFileSync('.release-built', 'built\\n');" }), SLOW_BUILD: '60\n', VERSION: 'a-never\n' });
    const known = new Set(releasesOf(dir));
    const run = startScript(join(platform, 'scripts/deploy-branch.sh'), [branch, dir, String(ports.a), repo.url], {
      RESTART_COMMAND: restartFixtureSite,
      BUILD_USER: users.a.buildUser,
      SITE_USER: users.a.siteUser,
    });
    const debris = await waitFor(
      () => releasesOf(dir).find((name) => !known.has(name) && existsSync(join(dir, 'deploys', name, '.release-built'))),
      30_000,
      'the planted marker',
    );
    expect(statSync(join(dir, 'deploys', debris, '.release-built')).uid, 'planted by the build').toBe(uidOf(users.a.buildUser));
    process.kill(-run.child.pid!, 'SIGKILL'); // the deploy's process group, as the launcher ends it
    await run.done;
    expect(releasesOf(dir)).toContain(debris);

    repo.commit(branch, { SLOW_BUILD: null, 'build.mjs': readFileSync(join(repoRoot, 'test/fixtures/site/build.mjs'), 'utf8'), VERSION: 'a-after-kill\n' });
    await deployed('a', branch);
    expect(releasesOf(dir)).not.toContain(debris);
    const live = liveRelease(dir);
    const rollback = await runScript(join(platform, 'scripts/host/rollback.sh'), [dir, String(ports.a), 'astro-feature-team-a', debris], {
      RESTART_COMMAND: restartFixtureSite,
      SITE_USER: users.a.siteUser,
    });
    expect(rollback.code, rollback.stderr).toBe(4);
    expect(liveRelease(dir)).toBe(live);
  }, 90_000);

  it('sealing a release changes only what the build owns: a root file hard-linked into the release keeps its owner and mode', () => {
    // The kernel refuses such links to a build when fs.protected_hardlinks=1; a host without it
    // lets a build link any root file it can see, e.g. a set-uid program, into its release.
    const dir = makeTempDir('seal');
    chmodSync(dir, 0o711);
    const [user] = Object.values(users);
    const setuid = join(dir, 'root-setuid');
    const shared = join(dir, 'root-shared');
    writeFileSync(setuid, '#!/bin/sh\n');
    chmodSync(setuid, 0o4755);
    writeFileSync(shared, 'root\n');
    chmodSync(shared, 0o666);
    const release = join(dir, 'release');
    mkdirSync(release);
    execFileSync('ln', [setuid, join(release, 'linked-setuid')]);
    execFileSync('ln', [shared, join(release, 'linked-shared')]);
    writeFileSync(join(release, 'own'), 'built\n');
    chmodSync(join(release, 'own'), 0o4775);
    execFileSync('chown', [`${user!.buildUser}:`, join(release, 'own'), release]);

    try {
      const result = spawnSync('bash', ['-c', `source ${join(repoRoot, 'scripts/host/lib/releases.sh')} && seal_release "$1" "$2"`, 'seal', release, user!.buildUser], { encoding: 'utf8' });

      expect(result.status, result.stderr).toBe(0);
      expect(statSync(setuid).mode & 0o7777).toBe(0o4755);
      expect(statSync(shared).mode & 0o7777).toBe(0o666);
      expect(statSync(join(release, 'own'))).toMatchObject({ uid: 0 });
      expect(statSync(join(release, 'own')).mode & 0o7777).toBe(0o755);
      expect(readdirSync(release).sort()).toEqual(['linked-setuid', 'linked-shared', 'own']);
    } finally {
      rmSync(dir, { recursive: true, force: true }); // a set-uid file does not stay behind
    }
  });
});

function uidOf(user: string): number {
  return Number(execFileSync('id', ['-u', user], { encoding: 'utf8' }).trim());
}
