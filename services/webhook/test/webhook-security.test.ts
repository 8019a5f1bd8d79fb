/**
 * The webhook server refuses every forged push: real HTTP on port 0, a recording deploy script at
 * the process boundary (so "nothing deployed" is observed, not assumed).
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from './support/helpers.js';
import {
  commitId,
  githubSignature,
  pushPayload,
  send,
  sendGithub,
  sendGitlab,
  startHarness,
  waitForDeployment,
  type Harness,
} from './support/webhook-harness.js';

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h.close();
});

const DE1 = 'SECRET_TEAM_DE1';
const signedBody = (payload: unknown) => JSON.stringify(payload);

describe('webhook authentication', () => {
  it('refuses a GitHub-style push with a forged signature', async () => {
    const body = signedBody(pushPayload('feature/team-de1/map'));
    const res = await send(h.url, body, {
      headers: { 'x-github-event': 'push', 'x-hub-signature-256': `sha256=${randomBytes(32).toString('hex')}` },
    });
    expect(res.status).toBe(401);
    expect(res.json.code).toBe('UNAUTHENTICATED');
  });

  it('refuses a push without any signature or token', async () => {
    const res = await send(h.url, signedBody(pushPayload('main')), { headers: { 'x-gitlab-event': 'Push Hook' } });
    expect(res.status).toBe(401);
  });

  it('refuses a truncated signature, a signature over another body and the SHA-1 header alone', async () => {
    const payload = pushPayload('feature/team-de1/map');
    const body = signedBody(payload);
    const good = githubSignature(body, h.secrets[DE1]!);
    const variants: Record<string, string>[] = [
      { 'x-hub-signature-256': good.slice(0, -1) },
      { 'x-hub-signature-256': good.slice(0, 20) },
      { 'x-hub-signature-256': good.replace('sha256=', '') },
      { 'x-hub-signature-256': githubSignature(`${body} `, h.secrets[DE1]!) },
      { 'x-hub-signature': `sha1=${'0'.repeat(40)}` },
    ];
    for (const headers of variants) {
      const res = await send(h.url, body, { headers: { 'x-github-event': 'push', ...headers } });
      expect(res.status, JSON.stringify(headers)).toBe(401);
    }
  });

  it("does not count the other provider's header: a GitLab token for a GitHub target, a signature for a GitLab target", async () => {
    const feature = await sendGitlab(h.url, pushPayload('feature/team-de1/map'), h.secrets[DE1]!);
    expect(feature.status).toBe(401);
    const mainBody = signedBody(pushPayload('main'));
    const main = await send(h.url, mainBody, {
      headers: { 'x-gitlab-event': 'Push Hook', 'x-hub-signature-256': githubSignature(mainBody, h.secrets.SECRET_MAIN!) },
    });
    expect(main.status).toBe(401);
  });

  it("refuses another team's secret: team de2 cannot deploy team de1's target, develop cannot deploy main", async () => {
    expect((await sendGithub(h.url, pushPayload('feature/team-de1/map'), h.secrets.SECRET_TEAM_DE2!)).status).toBe(401);
    expect((await sendGitlab(h.url, pushPayload('main'), h.secrets.SECRET_DEVELOP!)).status).toBe(401);
    expect(h.recordedDeploys()).toHaveLength(0);
  });

  it('answers 401 rather than 404 for an unknown branch unless the request authenticates for some target', async () => {
    const forged = await sendGithub(h.url, pushPayload('feature/team-xx/map'), 'not-a-secret-of-any-target');
    expect(forged.status).toBe(401);
    const genuine = await sendGithub(h.url, pushPayload('feature/team-xx/map'), h.secrets[DE1]!);
    expect(genuine.status).toBe(404);
  });

  it('deploys a replayed delivery only once, also after a restart of the server', async () => {
    const root = join(h.root, 'replay');
    const first = await startHarness({ root });
    const payload = pushPayload('develop');
    const headers = { 'idempotency-key': 'a6b1c7e2-replayed-delivery' };
    const accepted = await sendGitlab(first.url, payload, first.secrets.SECRET_DEVELOP!, headers);
    expect(accepted.status).toBe(202);
    await waitForDeployment(first, String(accepted.json.deploymentId));
    const replay = await sendGitlab(first.url, pushPayload('develop'), first.secrets.SECRET_DEVELOP!, headers);
    expect(replay.status).toBe(200);
    expect(replay.json).toMatchObject({ status: 'duplicate', reason: 'delivery', deploymentId: accepted.json.deploymentId });
    await first.close();

    const second = await startHarness({ root, secrets: first.secrets });
    try {
      const afterRestart = await sendGitlab(second.url, pushPayload('develop'), second.secrets.SECRET_DEVELOP!, headers);
      expect(afterRestart.status).toBe(200);
      expect(afterRestart.json.reason).toBe('delivery');
      expect(second.recordedDeploys()).toHaveLength(1);
    } finally {
      await second.close();
    }
  });

  it('answers 413 to a body over 25 MB without deploying', async () => {
    const huge = Buffer.alloc(25 * 1024 * 1024 + 1, 0x20);
    const res = await send(h.url, huge, {
      headers: { 'x-github-event': 'push', 'x-hub-signature-256': githubSignature(huge, h.secrets[DE1]!) },
    });
    expect(res.status).toBe(413);
    expect(res.json.code).toBe('PAYLOAD_TOO_LARGE');
  });

  it('accepts a signed push of almost 25 MB', async () => {
    const payload = pushPayload('feature/team-fv/big', undefined, { padding: 'x'.repeat(24 * 1024 * 1024) });
    const res = await sendGithub(h.url, payload, h.secrets.SECRET_TEAM_FV!);
    expect(res.status).toBe(202);
    await waitForDeployment(h, String(res.json.deploymentId));
  });

  it('passes branch names with shell metacharacters to the script as one inert argument', async () => {
    const sentinel = join(h.root, 'pwned');
    // Valid as a git branch name (no spaces or backslashes), so it really reaches the script.
    const branch = `feature/team-de2/x;touch\${IFS}${sentinel};$(touch\${IFS}${sentinel})\`touch\${IFS}${sentinel}\`|&&'"<>`;
    const commit = commitId();
    const res = await sendGithub(h.url, pushPayload(branch, commit), h.secrets.SECRET_TEAM_DE2!);
    expect(res.status).toBe(202);
    await waitForDeployment(h, String(res.json.deploymentId));
    const call = h.recordedDeploys().find((d) => d.args[0] === branch);
    expect(call?.args).toEqual([branch, join(h.root, 'sites/feature-de2'), '3003', 'https://git.example.org/city/site.git', commit]);
    expect(existsSync(sentinel)).toBe(false);
  });

  it('takes the repository URL from the targets file, never from the payload', async () => {
    const res = await sendGitlab(h.url, pushPayload('main', undefined, { project: { git_http_url: '--upload-pack=touch /tmp/x' } }), h.secrets.SECRET_MAIN!);
    expect(res.status).toBe(202);
    await waitForDeployment(h, String(res.json.deploymentId));
    const call = h.recordedDeploys().find((d) => d.args[0] === 'main');
    // main deploys the platform's own web app (config/targets.yaml), whatever the payload names.
    expect(call?.args[3]).toBe('https://git.example.org/city/feature-mapping-platform.git');
  });

  it('keeps every secret out of the deploy script environment and out of the logs', async () => {
    await waitFor(() => h.recordedDeploys().length > 0, 5000, 'a deploy');
    for (const call of h.recordedDeploys()) {
      expect(Object.keys(call.env).filter((k) => k.startsWith('SECRET_') || k === 'WEBHOOK_ADMIN_TOKEN')).toEqual([]);
      expect(call.env.SERVICE_NAME).toMatch(/^astro-/);
    }
    const logs = h.logs();
    expect(logs.length).toBeGreaterThan(0);
    for (const secret of [...Object.values(h.secrets), h.adminToken]) expect(logs).not.toContain(secret);
  });

  it('reads /deployments only with the admin bearer token', async () => {
    expect((await send(h.url, '', { method: 'GET', path: '/deployments' })).status).toBe(401);
    const wrong = await send(h.url, '', { method: 'GET', path: '/deployments', headers: { authorization: 'Bearer wrong-token-wrong-token' } });
    expect(wrong.status).toBe(401);
    const ok = await send(h.url, '', { method: 'GET', path: '/deployments', headers: { authorization: `Bearer ${h.adminToken}` } });
    expect(ok.status).toBe(200);
    expect(Array.isArray(ok.json.deployments)).toBe(true);
  });

  it('answers 429 to an address after too many failed authentications, yet accepts its correctly signed push', async () => {
    const limited = await startHarness({ env: { WEBHOOK_AUTH_FAILURES_PER_MINUTE: '3' } });
    try {
      const forged = () => sendGithub(limited.url, pushPayload('feature/team-de1/x'), 'wrong-secret-wrong-secret');
      const statuses = [];
      for (let i = 0; i < 5; i++) statuses.push((await forged()).status);
      expect(statuses).toEqual([401, 401, 401, 429, 429]);
      const genuine = await sendGithub(limited.url, pushPayload('feature/team-de1/x'), limited.secrets[DE1]!);
      expect(genuine.status).toBe(202);
      expect((await forged()).status).toBe(429);
    } finally {
      await limited.close();
    }
  });
});
