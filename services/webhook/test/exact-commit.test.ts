/**
 * Which commit a push deploys, with the real deploy script and a real git repository: exactly the
 * pushed one (not the branch head), never twice, and never an older one (a replayed payload with a
 * fresh delivery id is still a replay). Rolling back is the operator's explicit act.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deployEnv, deployScript, FixtureRepo, fetchBuild, freePort, liveRelease, makeTempDir, stopFixtureSites } from './support/helpers.js';
import { pushPayload, sendGitlab, startHarness, waitForDeployment, type Harness } from './support/webhook-harness.js';

let h: Harness;
let repo: FixtureRepo;
let port: number;
const root = makeTempDir('exact-commit');
const commits: Record<string, string> = {};
const deployDir = () => join(h.root, 'sites/main');
const restarts = () => readFileSync(join(deployDir(), 'restarts.log'), 'utf8').trim().split('\n').length;
const liveCommit = () => readFileSync(join(deployDir(), 'live/REVISION'), 'utf8').trim();

/** The same payload each time (a replay), with a fresh delivery id unless one is given. */
const pushOf = (commit: string, deliveryId?: string) =>
  sendGitlab(h.url, pushPayload('main', commit), h.secrets.SECRET_MAIN!, deliveryId ? { 'idempotency-key': deliveryId } : {});

beforeAll(async () => {
  repo = new FixtureRepo(join(root, 'repo'));
  port = await freePort();
  for (const version of ['c1', 'c2', 'c3']) commits[version] = repo.commit('main', { VERSION: `${version}\n` });
  h = await startHarness({
    root: join(root, 'server'),
    targets: (targets) => targets.filter((t) => t.key === 'main').map((t) => ({ ...t, port, repo: repo.url })),
    env: { ...(deployEnv(root) as Record<string, string>), DEPLOY_SCRIPT: deployScript },
  });
}, 60_000);

afterAll(async () => {
  await h?.close();
  stopFixtureSites(root);
});

describe('deploying exactly the pushed commit', () => {
  it('a push announcing c1 deploys c1 although the branch head is already c3', async () => {
    const res = await pushOf(commits.c1!);
    expect(res.status).toBe(202);
    const deployment = await waitForDeployment(h, String(res.json.deploymentId), 90_000);
    expect(deployment).toMatchObject({ state: 'succeeded', commit: commits.c1, deployedCommit: commits.c1 });
    expect(liveCommit()).toBe(commits.c1);
    expect((await fetchBuild(port)).version).toBe('c1');
  }, 120_000);

  it('the push of c3 then deploys c3', async () => {
    const res = await pushOf(commits.c3!);
    expect(await waitForDeployment(h, String(res.json.deploymentId), 90_000)).toMatchObject({ state: 'succeeded', deployedCommit: commits.c3 });
    expect((await fetchBuild(port)).version).toBe('c3');
  }, 120_000);

  it('a replay of the live push with a new delivery id is answered 200 naming its deployment, and deploys and restarts nothing', async () => {
    const before = restarts();
    const original = h.server.store.list({ target: 'main' }).find((d) => d.commit === commits.c3)!;
    const res = await pushOf(commits.c3!);
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ status: 'duplicate', reason: 'live', deploymentId: original.id });
    expect(restarts()).toBe(before);
  });

  it('a replayed older payload (c1) cannot roll the target back: 200 naming the deployment that put it live before', async () => {
    const before = restarts();
    const original = h.server.store.list({ target: 'main' }).find((d) => d.commit === commits.c1)!;
    const res = await pushOf(commits.c1!);
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ status: 'duplicate', reason: 'deployed-before', deploymentId: original.id });
    expect(liveCommit()).toBe(commits.c3);
    expect(restarts()).toBe(before);
  });

  it('an older commit that was never deployed (c2) is refused by the deploy script, live and the site untouched', async () => {
    const before = restarts();
    const release = liveRelease(deployDir());
    const res = await pushOf(commits.c2!);
    expect(res.status).toBe(202);
    expect(await waitForDeployment(h, String(res.json.deploymentId), 90_000)).toMatchObject({ state: 'refused', exitCode: 9 });
    expect(liveRelease(deployDir())).toBe(release);
    expect(restarts()).toBe(before);
    expect((await fetchBuild(port)).version).toBe('c3');
  }, 120_000);

  it('a commit that is not on the pushed branch is refused', async () => {
    const elsewhere = repo.commit('other', { VERSION: 'elsewhere\n' });
    const res = await pushOf(elsewhere);
    expect(await waitForDeployment(h, String(res.json.deploymentId), 90_000)).toMatchObject({ state: 'refused', exitCode: 9 });
    expect(liveCommit()).toBe(commits.c3);
  }, 120_000);

  it('a new commit after all that deploys forward as usual', async () => {
    const c4 = repo.commit('main', { VERSION: 'c4\n' });
    const res = await pushOf(c4);
    expect(await waitForDeployment(h, String(res.json.deploymentId), 90_000)).toMatchObject({ state: 'succeeded', deployedCommit: c4 });
    expect((await fetchBuild(port)).version).toBe('c4');
  }, 120_000);
});
