/**
 * A hung build with the real deploy script: it fails at the deploy time limit, nothing of it keeps
 * running, and the target's lock is free for the next push at once.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { deployEnv, deployScript, FixtureRepo, fetchBuild, freePort, makeTempDir, stopFixtureSites, waitFor } from './support/helpers.js';
import { pushPayload, sendGitlab, startHarness, waitForDeployment, type Harness } from './support/webhook-harness.js';

let h: Harness;
let repo: FixtureRepo;
let port: number;
const root = makeTempDir('deploy-timeout');

beforeAll(async () => {
  repo = new FixtureRepo(join(root, 'repo'));
  port = await freePort();
  h = await startHarness({
    root: join(root, 'server'),
    targets: (targets) => targets.filter((t) => t.key === 'develop').map((t) => ({ ...t, port, repo: repo.url })),
    env: { ...(deployEnv(root) as Record<string, string>), DEPLOY_SCRIPT: deployScript, DEPLOY_TIMEOUT_SECONDS: '15', LOCK_WAIT_SECONDS: '900' },
  });
});

afterAll(async () => {
  await h?.close();
  stopFixtureSites(root);
});

/** Processes whose working directory is inside `dir` (a build runs in its release). */
function processesIn(dir: string): number[] {
  return readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .map(Number)
    .filter((pid) => {
      try {
        return readlinkSync(`/proc/${pid}/cwd`).startsWith(dir) && !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z');
      } catch {
        return false;
      }
    });
}

it('a hung build fails at the deploy time limit, leaves no process behind and holds no lock', async () => {
  const deploys = join(h.root, 'sites/develop/deploys');
  const hung = repo.commit('develop', { SLOW_BUILD: '600\n', VERSION: 'hung\n' });
  const res = await sendGitlab(h.url, pushPayload('develop', hung), h.secrets.SECRET_DEVELOP!);
  expect(res.status).toBe(202);
  await waitFor(() => processesIn(deploys).length > 0, 15_000, 'the hung build');
  expect(await waitForDeployment(h, String(res.json.deploymentId), 40_000)).toMatchObject({ state: 'timed-out' });
  await waitFor(() => processesIn(deploys).length === 0, 5_000, 'nothing left running in the release');

  const fixed = repo.commit('develop', { SLOW_BUILD: null, VERSION: 'fixed\n' });
  const next = await sendGitlab(h.url, pushPayload('develop', fixed), h.secrets.SECRET_DEVELOP!);
  expect(await waitForDeployment(h, String(next.json.deploymentId), 60_000)).toMatchObject({ state: 'succeeded', deployedCommit: fixed });
  expect((await fetchBuild(port)).version).toBe('fixed');
}, 120_000);
