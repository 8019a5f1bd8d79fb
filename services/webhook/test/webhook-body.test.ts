/**
 * POST /webhook reads the body itself (body.ts), not through Fastify: a presized buffer or chunked
 * pieces, compressed bodies, the limits, buffers reused across concurrent deliveries, UTF-8 and
 * ASCII decoding; GitLab tokens refused before the body is decoded; and deploy scripts started by
 * the small launcher process.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from './support/helpers.js';
import {
  githubSignature,
  pushPayload,
  send,
  sendGithub,
  sendGitlab,
  startHarness,
  waitForDeployment,
  waitIdle,
  type Harness,
} from './support/webhook-harness.js';

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ env: { WEBHOOK_MAX_BODY_BYTES: String(64 * 1024) } });
});
afterAll(async () => {
  await h.close();
});

/** POST with Transfer-Encoding: chunked (no Content-Length), the body written in pieces. */
function postChunked(url: string, pieces: Buffer[], headers: Record<string, string>): Promise<{ status: number; json: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) as Record<string, unknown> }));
    });
    req.on('error', reject);
    for (const piece of pieces) req.write(piece);
    req.end();
  });
}

const pieces = (body: Buffer, size: number): Buffer[] => Array.from({ length: Math.ceil(body.length / size) }, (_, i) => body.subarray(i * size, (i + 1) * size));

describe('reading the body', () => {
  it('accepts a signed push sent chunked, without a Content-Length', async () => {
    const body = Buffer.from(JSON.stringify(pushPayload('feature/team-de1/chunked', undefined, { padding: 'y'.repeat(20_000) })));
    const signature = githubSignature(body, h.secrets.SECRET_TEAM_DE1!);
    const res = await postChunked(h.url, pieces(body, 1000), { 'x-github-event': 'push', 'x-hub-signature-256': signature });
    expect(res.status).toBe(202);
    expect(res.json.branch).toBe('feature/team-de1/chunked');
  });

  it('gives every one of many concurrent pushes its own body, though body buffers are reused as soon as each answer is decided', async () => {
    const pushes = Array.from({ length: 24 }, (_, i) => {
      const after = randomBytes(20).toString('hex');
      const branch = `feature/team-de1/reuse-${i}`;
      const body = Buffer.from(JSON.stringify(pushPayload(branch, after, { padding: String(i % 10).repeat(30_000 + i * 100) })));
      // Every fourth is signed with another team's secret: it must be refused whatever is read around it.
      const forged = i % 4 === 3;
      const signature = githubSignature(body, forged ? h.secrets.SECRET_TEAM_DE2! : h.secrets.SECRET_TEAM_DE1!);
      return { branch, after, forged, body, signature };
    });
    const answers = await Promise.all(
      pushes.map((p) => send(h.url, p.body, { headers: { 'x-github-event': 'push', 'x-github-delivery': randomBytes(8).toString('hex'), 'x-hub-signature-256': p.signature } })),
    );
    answers.forEach((answer, i) => {
      const push = pushes[i]!;
      expect(answer.status).toBe(push.forged ? 401 : 202);
      if (!push.forged) expect([answer.json.branch, answer.json.commit]).toEqual([push.branch, push.after]);
    });
    await waitIdle(h);
  });

  it('answers 413 to a body over the limit, announced or streamed, and deploys nothing', async () => {
    await waitIdle(h); // the deploy of the previous test's push is recorded first
    const before = h.recordedDeploys().length;
    const body = Buffer.from(JSON.stringify(pushPayload('feature/team-de1/big', undefined, { padding: 'z'.repeat(70 * 1024) })));
    const headers = { 'x-github-event': 'push', 'x-hub-signature-256': githubSignature(body, h.secrets.SECRET_TEAM_DE1!) };
    const announced = await send(h.url, body, { headers });
    expect(announced.status).toBe(413);
    expect(announced.json.code).toBe('PAYLOAD_TOO_LARGE');
    const streamed = await postChunked(h.url, pieces(body, 4096), headers);
    expect(streamed.status).toBe(413);
    expect(h.recordedDeploys()).toHaveLength(before);
  });

  it('still inflates a gzip-compressed body (Content-Encoding) and checks the signature of the JSON', async () => {
    const json = Buffer.from(JSON.stringify(pushPayload('feature/team-de2/gzip')));
    const res = await send(h.url, gzipSync(json), {
      headers: { 'content-encoding': 'gzip', 'x-github-event': 'push', 'x-hub-signature-256': githubSignature(json, h.secrets.SECRET_TEAM_DE2!) },
    });
    expect(res.status).toBe(202);
    expect(res.json.branch).toBe('feature/team-de2/gzip');
  });

  it('decodes a body with non-ASCII characters as UTF-8 (the branch name arrives intact)', async () => {
    const branch = 'feature/team-fv/straße-ümlaut-地図';
    const res = await sendGithub(h.url, pushPayload(branch, undefined, { head_commit: { message: 'Grünflächen ✓' } }), h.secrets.SECRET_TEAM_FV!);
    expect(res.status).toBe(202);
    expect(res.json.branch).toBe(branch);
    await waitForDeployment(h, String(res.json.deploymentId));
    expect(h.recordedDeploys().find((d) => d.args[0] === branch)).toBeDefined();
  });

  it('answers 400 to invalid JSON whichever decoding path it takes (ASCII or UTF-8)', async () => {
    for (const broken of ['{"ref":"refs/heads/main","after":"' + 'a'.repeat(40) + '"', '{"ref":"refs/heads/mäin",}', '{"ref":"a\u0001b"}']) {
      const malformed = await send(h.url, broken, { headers: { 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': h.secrets.SECRET_MAIN! } });
      expect(malformed.status, broken).toBe(400);
    }
  });
});

describe('authentication before decoding', () => {
  it('refuses a GitLab token that is no GitLab target secret with 401, even with a malformed body', async () => {
    const res = await send(h.url, '{"this is": not json', { headers: { 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': randomBytes(32).toString('hex') } });
    expect(res.status).toBe(401);
    // A GitHub-style team secret sent as a GitLab token is no GitLab secret either.
    const teamSecret = await send(h.url, '{"this is": not json', { headers: { 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': h.secrets.SECRET_TEAM_DE1! } });
    expect(teamSecret.status).toBe(401);
    const genuine = await send(h.url, '{"this is": not json', { headers: { 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': h.secrets.SECRET_MAIN! } });
    expect(genuine.status).toBe(400);
  });
});

/** Parent pid of a running process (Linux /proc). */
const parentOf = (pid: number): number => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);

/** Running: exists and is no zombie (an orphan's new parent may be slow to reap it). */
function isRunning(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]![0] !== 'Z';
  } catch {
    return false;
  }
}

describe('deploy launcher', () => {
  it('starts deploy scripts from the small launcher process, not by forking the server', async () => {
    const slow = await startHarness({ env: { RECORD_DEPLOY_SLEEP: '3' } }); // long enough to look at the running script
    try {
      const res = await sendGitlab(slow.url, pushPayload('develop'), slow.secrets.SECRET_DEVELOP!);
      expect(res.status).toBe(202);
      await waitFor(() => slow.recordedDeploys().length === 1, 5000, 'the script to start');
      const scriptPid = (slow.recordedDeploys()[0] as unknown as { pid: number }).pid;
      const launcherPid = parentOf(scriptPid);
      expect(launcherPid).not.toBe(process.pid);
      expect(parentOf(launcherPid)).toBe(process.pid); // the launcher is a child of the server
      expect(readFileSync(`/proc/${launcherPid}/cmdline`, 'utf8')).toContain('launcher-process.mjs');
      expect(await waitForDeployment(slow, String(res.json.deploymentId))).toMatchObject({ state: 'succeeded', exitCode: 0 });
    } finally {
      await slow.close();
    }
  });

  it('when the launcher dies, its running deploy is stopped and recorded failed, and the next push deploys with a new launcher', async () => {
    const slow = await startHarness({ env: { RECORD_DEPLOY_SLEEP: '30', WEBHOOK_SHUTDOWN_GRACE_SECONDS: '1' } });
    try {
      const first = await sendGitlab(slow.url, pushPayload('main'), slow.secrets.SECRET_MAIN!);
      await waitFor(() => slow.recordedDeploys().length === 1, 5000, 'the script to start');
      const scriptPid = (slow.recordedDeploys()[0] as unknown as { pid: number }).pid;
      process.kill(parentOf(scriptPid), 'SIGKILL');
      const failed = await waitForDeployment(slow, String(first.json.deploymentId), 10_000);
      expect(failed.state).toBe('failed');
      // The orphaned script got SIGTERM (its process group), so nothing of it outlives the failure.
      await waitFor(() => !isRunning(scriptPid), 5000, 'the orphaned deploy script to stop');
      const second = await sendGitlab(slow.url, pushPayload('main'), slow.secrets.SECRET_MAIN!);
      expect(second.status).toBe(202);
      await waitFor(() => slow.recordedDeploys().length === 2, 5000, 'the second script to start');
    } finally {
      await slow.close();
    }
  });
});
