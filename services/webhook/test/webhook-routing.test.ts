/**
 * Routing and answers of POST /webhook at the boundaries the issue names, through real HTTP.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { matchTarget } from '../src/routing.js';
import {
  githubSignature,
  pushPayload,
  send,
  sendGithub,
  sendGitlab,
  seedTargets,
  startHarness,
  waitForDeployment,
  waitIdle,
  type Harness,
} from './support/webhook-harness.js';

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h.close();
});

describe('branch → target', () => {
  const targets = seedTargets();
  const cases: [string, string | undefined][] = [
    ['main', 'main'],
    ['develop', 'develop'],
    ['main/x', undefined],
    ['mainline', undefined],
    ['feature/team-de1', undefined],
    ['feature/team-de1/', undefined],
    ['feature/team-de1/x', 'feature/team-de1'],
    ['feature/team-de1/a/b', 'feature/team-de1'],
    ['feature/team-de10/x', undefined],
    ['feature/team-de2/x', 'feature/team-de2'],
    ['feature/team-fv/x', 'feature/team-fv'],
    ['feature/team-fvx/x', undefined],
    ['feature/team-xx/x', undefined],
  ];
  it.each(cases)('%s → %s', (branch, key) => {
    expect(matchTarget(targets, branch)?.key).toBe(key);
  });
});

describe('POST /webhook', () => {
  it('queues a GitLab push to main with exactly the five script arguments (the pushed commit last) and answers 202 with the deployment id', async () => {
    const commit = 'a'.repeat(40);
    const res = await sendGitlab(h.url, pushPayload('main', commit), h.secrets.SECRET_MAIN!);
    expect(res.status).toBe(202);
    expect(res.json).toMatchObject({ status: 'queued', target: 'main', branch: 'main', commit });
    const deployment = await waitForDeployment(h, String(res.json.deploymentId));
    expect(deployment).toMatchObject({ target: 'main', commit, state: 'succeeded', exitCode: 0, provider: 'gitlab' });
    expect(deployment.logPath).toMatch(/sites\/main\/logs\/deploy-.*\.log$/);
    const call = h.recordedDeploys().find((d) => d.args[0] === 'main');
    expect(call?.args).toEqual(['main', `${h.root}/sites/main`, '3000', 'https://git.example.org/city/feature-mapping-platform.git', commit]);
    expect(call?.env.SERVICE_NAME).toBe('astro-main');
  });

  it('queues a GitHub-style push to a team branch, also when form-encoded (payload=)', async () => {
    const json = await sendGithub(h.url, pushPayload('feature/team-de1/map'), h.secrets.SECRET_TEAM_DE1!);
    expect(json.status).toBe(202);
    expect(json.json.target).toBe('feature/team-de1');

    const form = `payload=${encodeURIComponent(JSON.stringify(pushPayload('feature/team-de1/form')))}`;
    const res = await send(h.url, form, {
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        'x-gitea-event': 'push',
        'x-hub-signature-256': githubSignature(form, h.secrets.SECRET_TEAM_DE1!),
      },
    });
    expect(res.status).toBe(202);
    expect(res.json.branch).toBe('feature/team-de1/form');
  });

  it.each(['feature/team-de1', 'feature/team-de1/', 'feature/team-de10/x'])('answers 404 to a signed push of %s (not team de1)', async (branch) => {
    const res = await sendGithub(h.url, pushPayload(branch), h.secrets.SECRET_TEAM_DE1!);
    expect(res.status).toBe(404);
    expect(res.json.code).toBe('NO_TARGET');
  });

  it('answers 202 ignored to an unmatched branch when WEBHOOK_UNMATCHED_BRANCH=202', async () => {
    const lenient = await startHarness({ env: { WEBHOOK_UNMATCHED_BRANCH: '202' } });
    try {
      const res = await sendGitlab(lenient.url, pushPayload('release/2.0'), lenient.secrets.SECRET_MAIN!);
      expect(res.status).toBe(202);
      expect(res.json.status).toBe('ignored');
      expect(lenient.recordedDeploys()).toHaveLength(0);
    } finally {
      await lenient.close();
    }
  });

  it('answers a signed GitHub ping with 200 and an unsigned one with 401', async () => {
    const body = JSON.stringify({ zen: 'Keep it logically awesome.', hook_id: 1 });
    const signed = await send(h.url, body, {
      headers: { 'x-github-event': 'ping', 'x-hub-signature-256': githubSignature(body, h.secrets.SECRET_TEAM_FV!) },
    });
    expect(signed.status).toBe(200);
    const unsigned = await send(h.url, body, { headers: { 'x-github-event': 'ping', 'x-hub-signature-256': `sha256=${'0'.repeat(64)}` } });
    expect(unsigned.status).toBe(401);
  });

  it('ignores tag pushes, branch deletions and other events with 202 and deploys nothing', async () => {
    await waitIdle(h);
    const before = h.recordedDeploys().length;
    const tag = await sendGitlab(h.url, pushPayload('refs/tags/v1.0'), h.secrets.SECRET_MAIN!, { 'x-gitlab-event': 'Tag Push Hook' });
    expect(tag).toMatchObject({ status: 202, json: { status: 'ignored' } });
    const tagAsPush = await sendGithub(h.url, pushPayload('refs/tags/v1.0'), h.secrets.SECRET_TEAM_DE2!);
    expect(tagAsPush).toMatchObject({ status: 202, json: { status: 'ignored' } });
    const deletion = await sendGithub(h.url, pushPayload('feature/team-de2/old', '0'.repeat(40)), h.secrets.SECRET_TEAM_DE2!);
    expect(deletion).toMatchObject({ status: 202, json: { status: 'ignored', reason: 'branch deleted' } });
    const issue = await sendGithub(h.url, { action: 'opened' }, h.secrets.SECRET_TEAM_DE2!, { 'x-github-event': 'issues' });
    expect(issue).toMatchObject({ status: 202, json: { status: 'ignored' } });
    await new Promise((r) => setTimeout(r, 200));
    expect(h.server.deployer.activity()).toEqual({ running: [], waiting: [] });
    expect(h.recordedDeploys()).toHaveLength(before);
  });

  it('answers 400 to a signed malformed body and 401 to an unsigned one', async () => {
    const broken = '{"ref": "refs/heads/main", ';
    const signed = await send(h.url, broken, { headers: { 'x-github-event': 'push', 'x-hub-signature-256': githubSignature(broken, h.secrets.SECRET_TEAM_DE1!) } });
    expect(signed.status).toBe(400);
    const unsigned = await send(h.url, broken, { headers: { 'x-github-event': 'push', 'x-hub-signature-256': `sha256=${'1'.repeat(64)}` } });
    expect(unsigned.status).toBe(401);
    const noAfter = await sendGitlab(h.url, { ref: 'refs/heads/main' }, h.secrets.SECRET_MAIN!);
    expect(noAfter.status).toBe(400);
    const badAfter = await sendGitlab(h.url, pushPayload('main', 'not-a-commit; rm -rf /'), h.secrets.SECRET_MAIN!);
    expect(badAfter.status).toBe(400);
    const form = 'nothing=here';
    const emptyForm = await send(h.url, form, {
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-github-event': 'push', 'x-hub-signature-256': githubSignature(form, h.secrets.SECRET_TEAM_DE1!) },
    });
    expect(emptyForm.status).toBe(400);
  });

  it('answers 400 to branch names git would refuse (control characters, .., trailing .lock) without queuing', async () => {
    await waitIdle(h);
    const before = h.recordedDeploys().length;
    for (const branch of ['feature/team-de1/a\u0000b', 'feature/team-de1/a b', 'feature/team-de1/../x', 'feature/team-de1/x.lock', 'feature/team-de1/-x/..']) {
      const res = await sendGithub(h.url, pushPayload(branch), h.secrets.SECRET_TEAM_DE1!);
      expect(res.status, JSON.stringify(branch)).toBe(400);
    }
    expect(h.server.deployer.activity()).toEqual({ running: [], waiting: [] });
    expect(h.recordedDeploys()).toHaveLength(before);
  });

  it('answers 405 to other methods and JSON 404 to other paths', async () => {
    const get = await send(h.url, '', { method: 'GET' });
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    expect(get.headers.get('content-type')).toContain('json');
    expect((await send(h.url, '{}', { method: 'PUT' })).status).toBe(405);
    expect((await send(h.url, '', { method: 'GET', path: '/nope' })).status).toBe(404);
  });

  it('answers GET /health with 200 and no credentials, for container health checks', async () => {
    const res = await send(h.url, '', { method: 'GET', path: '/health' });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ status: 'ok' });
  });

  it('lists deployments newest first with target, commit, state, timings and log path', async () => {
    const res = await send(h.url, '', { method: 'GET', path: '/deployments?target=main', headers: { authorization: `Bearer ${h.adminToken}` } });
    expect(res.status).toBe(200);
    const [latest] = res.json.deployments as Record<string, unknown>[];
    expect(latest).toMatchObject({ target: 'main', state: 'succeeded' });
    for (const field of ['id', 'commit', 'queuedAt', 'startedAt', 'finishedAt', 'durationMs', 'logPath']) expect(latest![field]).toBeTruthy();
    const bad = await send(h.url, '', { method: 'GET', path: '/deployments?limit=0', headers: { authorization: `Bearer ${h.adminToken}` } });
    expect(bad.status).toBe(400);
    const missing = await send(h.url, '', { method: 'GET', path: '/deployments/unknown', headers: { authorization: `Bearer ${h.adminToken}` } });
    expect(missing.status).toBe(404);
  });
});
