/**
 * Root never follows a path a build can change, seen from the webhook server: what a build leaves
 * as `REVISION` in its release is read by the root launcher after every deploy (the deployed
 * commit) and before a push to an idle target (the live commit). Real Unix users, real git, the real
 * deploy script, the server with DEPLOY_ISOLATION=users and real signed pushes of two teams.
 * Needs root; skipped with one printed line otherwise.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, closeSync, constants, existsSync, lstatSync, openSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureUsers, removeUsers, usersOf } from '../src/host/users.js';
import { FixtureRepo, fetchBuild, freePort, makeTempDir, stopFixtureSites } from './support/helpers.js';
import { hostileBuild, isolationMissing, startTeamsHarness, teamUsers } from './support/root-paths.js';
import { pushPayload, send, sendGithub, waitForDeployment, type Harness } from './support/webhook-harness.js';

const missing = isolationMissing();
if (missing) console.warn(`skipping root-paths tests (webhook): ${missing}`);

type Team = 'de1' | 'de2';
const users = teamUsers('rw', ['de1', 'de2'] as const);
let h: Harness;
let repo: FixtureRepo;
let root: string;
const ports = {} as Record<Team, number>;
const dirOf = (team: Team) => join(h.root, 'sites', `feature-${team}`);
const journal = () => join(h.root, 'state', 'deployments.jsonl');

/** A signed push of a new commit; its answer must come within `withinMs`. */
async function push(team: Team, files: Record<string, string | null>, withinMs = 5_000): Promise<{ commit: string; deploymentId: string }> {
  const branch = `feature/team-${team}/rp`;
  const commit = repo.commit(branch, files);
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`push of ${team} not answered within ${withinMs} ms`)), withinMs)));
  try {
    const res = await Promise.race([sendGithub(h.url, pushPayload(branch, commit), h.secrets[`SECRET_TEAM_${team.toUpperCase()}`]!), late]);
    expect(res.status, JSON.stringify(res.json)).toBe(202);
    return { commit, deploymentId: String(res.json.deploymentId) };
  } finally {
    clearTimeout(timer);
  }
}

async function deployments(): Promise<string> {
  const res = await send(h.url, '', { method: 'GET', path: '/deployments?limit=50', headers: { authorization: `Bearer ${h.adminToken}` } });
  expect(res.status).toBe(200);
  return JSON.stringify(res.json);
}

/** A deploy that reached its end, recorded with exactly the pushed commit, which is live. */
async function expectDeployed(team: Team, { commit, deploymentId }: { commit: string; deploymentId: string }): Promise<void> {
  const deployment = await waitForDeployment(h, deploymentId, 30_000);
  expect(deployment.state).toBe('succeeded');
  expect(String(deployment.deployedCommit).slice(0, 200)).toBe(commit); // (a failure prints no megabytes)
  const revision = join(dirOf(team), 'live/REVISION');
  expect(lstatSync(revision).isFile()).toBe(true);
  expect(readFileSync(revision, 'utf8')).toBe(`${commit}\n`);
}

/** A launcher of the code before this change blocks in a FIFO: give it a writer so the suite can end. */
function releaseFifos(): void {
  if (!h) return;
  for (const team of ['de1', 'de2'] as const) {
    const deploys = join(dirOf(team), 'deploys');
    if (!existsSync(deploys)) continue;
    for (const release of readdirSync(deploys)) {
      const revision = join(deploys, release, 'REVISION');
      try {
        if (!lstatSync(revision).isFIFO()) continue;
        const fd = openSync(revision, constants.O_WRONLY | constants.O_NONBLOCK);
        writeSync(fd, 'x');
        closeSync(fd);
      } catch {
        // no reader, or gone
      }
    }
  }
}

describe.skipIf(missing)('root never follows a path the build can change (webhook launcher and journal)', () => {
  beforeAll(async () => {
    root = makeTempDir('root-paths-webhook');
    chmodSync(root, 0o711);
    ensureUsers(usersOf([users.de1, users.de2]));
    repo = new FixtureRepo(join(root, 'repo'));
    ports.de1 = await freePort();
    ports.de2 = await freePort();
    h = await startTeamsHarness(root, users, repo.url, ports);
    await expectDeployed('de2', await push('de2', { VERSION: 'de2-1\n' }));
    await expectDeployed('de1', await push('de1', { VERSION: 'de1-1\n' }));
  }, 120_000);

  afterAll(async () => {
    releaseFifos();
    await h?.close();
    if (root) stopFixtureSites(root);
    removeUsers(Object.values(users).flatMap((u) => [u.buildUser, u.siteUser]));
  });

  it('a build that leaves REVISION as a FIFO stalls nothing: its deploy is recorded, another team\'s signed push is answered at once, /health stays 200', async () => {
    const hostile = await push('de1', {
      'build.mjs': hostileBuild({ after: "fs.rmSync('REVISION', { force: true }); cp.execFileSync('mkfifo', ['REVISION']);" }),
      VERSION: 'de1-fifo\n',
    });
    await expectDeployed('de1', hostile);

    const other = await push('de2', { VERSION: 'de2-after-fifo\n' }, 2_000);
    await expectDeployed('de2', other);
    expect((await send(h.url, '', { method: 'GET', path: '/health' })).status).toBe(200);
    expect((await fetchBuild(ports.de1)).version).toBe('de1-fifo');
  }, 90_000);

  it('REVISION made a link to a root-only file copies nothing of it into the journal or GET /deployments', async () => {
    const secretText = `root-only-${randomBytes(16).toString('hex')}`;
    const secret = join(root, 'root-only.txt');
    writeFileSync(secret, `${secretText}\n`, { mode: 0o600 });
    const hostile = await push('de1', {
      'attack-plan.json': JSON.stringify({ secret }),
      'build.mjs': hostileBuild({ after: "fs.rmSync('REVISION', { force: true }); fs.symlinkSync(plan.secret, 'REVISION');" }),
      VERSION: 'de1-link\n',
    });

    await expectDeployed('de1', hostile);

    expect(await deployments()).not.toContain(secretText);
    await h.server.store.flush();
    expect(readFileSync(journal(), 'utf8')).not.toContain(secretText);
  }, 60_000);

  it('a huge REVISION (32 MiB) is not read: the deploy records its commit and the journal stays small', async () => {
    const hostile = await push('de1', {
      'build.mjs': hostileBuild({ after: "fs.rmSync('REVISION', { force: true }); fs.writeFileSync('REVISION', 'f'.repeat(32 * 1024 * 1024));" }),
      VERSION: 'de1-huge\n',
    });

    await expectDeployed('de1', hostile);

    await h.server.store.flush();
    expect(statSync(journal()).size).toBeLessThan(256 * 1024);
    expect((await deployments()).length).toBeLessThan(64 * 1024);
  }, 60_000);

  it('a live release left with REVISION as a FIFO (sealed before this change) stalls no push: both teams\' pushes are answered and deployed', async () => {
    const revision = join(realpathSync(join(dirOf('de1'), 'live')), 'REVISION');
    rmSync(revision);
    expect(spawnSync('mkfifo', ['-m', '644', revision]).status).toBe(0);

    const own = await push('de1', { VERSION: 'de1-after-old-fifo\n' }, 2_000); // de1's lane is idle: the live commit is asked for
    const other = await push('de2', { VERSION: 'de2-after-old-fifo\n' }, 2_000);

    await expectDeployed('de1', own);
    await expectDeployed('de2', other);
    expect((await fetchBuild(ports.de1)).version).toBe('de1-after-old-fifo');
  }, 60_000);
});
