/**
 * Requests as an attacker (or an unlucky setup) sends them: compressed bombs before any signature
 * is checked, encodings the server does not speak, the failed-authentication limit under the
 * documented one-hook-per-team setup, and weak secrets at start.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { newSecret } from '../src/secrets.js';
import { makeTempDir, recordDeployScript, waitFor } from './support/helpers.js';
import { githubSignature, pushPayload, send, sendGithub, seedTargets, startHarness, type Harness } from './support/webhook-harness.js';

const harnesses: Harness[] = [];
afterAll(async () => {
  for (const h of harnesses) await h.close();
});

/** Peak and current resident memory of a process, in bytes (Linux /proc). */
function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)![1]) * 1024;
  return { rss: kib('VmRSS'), peak: kib('VmHWM') };
}

function post(port: number, body: Buffer, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/webhook', method: 'POST', headers: { ...headers, 'content-length': String(body.length) } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', () => resolve(0));
    req.end(body);
  });
}

describe('compressed bodies', () => {
  it('100 concurrent gzip bombs (24 KiB inflating to 24 MiB, forged signature) keep the server within its inflation budget', async () => {
    const dir = makeTempDir('webhook-bomb');
    const secrets = Object.fromEntries(seedTargets().map((t) => [t.secret, newSecret()]));
    const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'services/webhook/src/server.ts'], {
      env: { PATH: process.env.PATH, ...secrets, WEBHOOK_PORT: '0', WEBHOOK_STATE_DIR: join(dir, 'state'), DEPLOY_ROOT: join(dir, 'sites'), DEPLOY_SCRIPT: recordDeployScript },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      let output = '';
      child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
      const port = Number(await waitFor(() => /"port":(\d+)/.exec(output)?.[1], 20_000, 'the server to listen'));
      const before = memoryOf(child.pid!);
      const bomb = gzipSync(Buffer.alloc(24 * 1024 * 1024, 0x20), { level: 9 });
      expect(bomb.length).toBeLessThan(48 * 1024);
      const headers = { 'content-type': 'application/json', 'content-encoding': 'gzip', 'x-github-event': 'push', 'x-hub-signature-256': `sha256=${'0'.repeat(64)}` };
      const statuses = await Promise.all(Array.from({ length: 100 }, () => post(port, bomb, headers)));
      const after = memoryOf(child.pid!);
      console.log(`gzip bombs: RSS ${(before.rss / 2 ** 20).toFixed(0)} MiB before, peak ${(after.peak / 2 ** 20).toFixed(0)} MiB (statuses ${[...new Set(statuses)].join(', ')})`);
      // Forged: never accepted; refused as unauthenticated or for lack of inflation budget, never a crash.
      expect(statuses.every((s) => s === 401 || s === 429)).toBe(true);
      expect(statuses).toContain(429);
      // 100 × 24 MiB would be 2.4 GiB; the default budget is 32 MiB.
      expect(after.peak - before.rss).toBeLessThan(256 * 2 ** 20);
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
  }, 60_000);

  it('inflates gzip, deflate and br bodies and checks the signature of the inflated JSON', async () => {
    const h = await startHarness();
    harnesses.push(h);
    for (const [encoding, compress] of [['gzip', gzipSync], ['deflate', deflateSync], ['br', brotliCompressSync]] as const) {
      const json = Buffer.from(JSON.stringify(pushPayload(`feature/team-de2/${encoding}`)));
      const headers = { 'content-encoding': encoding, 'x-github-event': 'push', 'x-hub-signature-256': githubSignature(json, h.secrets.SECRET_TEAM_DE2!) };
      expect((await send(h.url, compress(json), { headers })).status, encoding).toBe(202);
    }
  });

  it('refuses an encoding it does not support with 415, and an inflated body over the limit with 413', async () => {
    const h = await startHarness({ env: { WEBHOOK_MAX_BODY_BYTES: String(64 * 1024) } });
    harnesses.push(h);
    const json = Buffer.from(JSON.stringify(pushPayload('feature/team-de2/x')));
    const signature = githubSignature(json, h.secrets.SECRET_TEAM_DE2!);
    const unsupported = await send(h.url, json, { headers: { 'content-encoding': 'zstd', 'x-github-event': 'push', 'x-hub-signature-256': signature } });
    expect(unsupported.status).toBe(415);
    expect(unsupported.json.code).toBe('UNSUPPORTED_MEDIA_TYPE');
    const big = Buffer.from(JSON.stringify(pushPayload('feature/team-de2/x', undefined, { padding: ' '.repeat(200 * 1024) })));
    const tooBig = await send(h.url, gzipSync(big), { headers: { 'content-encoding': 'gzip', 'x-github-event': 'push', 'x-hub-signature-256': githubSignature(big, h.secrets.SECRET_TEAM_DE2!) } });
    expect(tooBig.status).toBe(413);
    expect(h.recordedDeploys()).toHaveLength(0);
  });
});

describe('failed-authentication limit with one GitHub hook per team on one repository', () => {
  it('60 pushes a minute through three team hooks: every push is accepted on its own team hook', async () => {
    const h = await startHarness({ env: { WEBHOOK_AUTH_FAILURES_PER_MINUTE: '30' } });
    harnesses.push(h);
    const teams = ['DE1', 'DE2', 'FV'] as const;
    const own: number[] = [];
    const others: number[] = [];
    for (let i = 0; i < 60; i++) {
      const team = teams[i % 3]!;
      const payload = pushPayload(`feature/team-${team.toLowerCase()}/push-${i}`);
      // GitHub delivers the push to every hook of the repository, each signed with its own secret.
      const deliveries = await Promise.all(teams.map((hook) => sendGithub(h.url, payload, h.secrets[`SECRET_TEAM_${hook}`]!).then((r) => ({ hook, status: r.status }))));
      for (const { hook, status } of deliveries) (hook === team ? own : others).push(status);
    }
    expect(own.filter((s) => s !== 202)).toEqual([]);
    expect(others.every((s) => s === 401 || s === 429)).toBe(true);
    expect(others).toContain(429); // the limit still works for what fails
  }, 60_000);
});

describe('secret strength at start', () => {
  const weak: Record<string, string> = {
    '31 hex characters': randomBytes(16).toString('hex').slice(0, 31),
    '63 hex characters': randomBytes(32).toString('hex').slice(0, 63),
    'one character 64 times': 'a'.repeat(64),
    'a repeated word': 'password-'.repeat(8),
    'a counting run': '0123456789abcdef'.repeat(4),
  };
  for (const [what, value] of Object.entries(weak)) {
    it(`refuses ${what}, naming the variable`, async () => {
      const secrets = Object.fromEntries(seedTargets().map((t) => [t.secret, newSecret()]));
      secrets.SECRET_TEAM_DE1 = value;
      await expect(startHarness({ secrets })).rejects.toThrow(/SECRET_TEAM_DE1 \(target feature\/team-de1\): the secret/);
    });
  }

  it('accepts what secrets init generates (32 random bytes, 64 hex characters)', async () => {
    const h = await startHarness();
    harnesses.push(h);
    expect((await sendGithub(h.url, pushPayload('feature/team-de1/ok'), h.secrets.SECRET_TEAM_DE1!)).status).toBe(202);
  });
});
