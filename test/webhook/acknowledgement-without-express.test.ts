/**
 * POST /webhook answered by the node:http listener in front of Express (services/webhook/src/
 * fast-path.ts) must be indistinguishable from Express' answer: the same status, the same headers
 * (apart from Date and the connection headers) and the same body byte for byte, for every kind of
 * request a hostile or a genuine sender can make, the failed-authentication limit included. Two
 * servers with the same targets and secrets get the same requests in the same order; only the
 * deployment ids (random per server) are masked before comparing.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { deflateSync, gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeGracefully, listen } from '../../services/shared/http-server.js';
import { AuthFailureLimiter } from '../../services/webhook/src/auth-failure-limiter.js';
import { BodyReader, InflateBudget } from '../../services/webhook/src/body.js';
import { webhookFastPath } from '../../services/webhook/src/fast-path.js';
import { webhookAcknowledger } from '../../services/webhook/src/routes/webhook.js';
import { SecretBook } from '../../services/webhook/src/secret-book.js';
import { resolveTargetSecrets } from '../../services/webhook/src/secrets.js';
import { speculativeDigests } from '../../services/webhook/src/streaming-digest.js';
import { sendRaw, type RawAnswer } from '../helpers/raw-http.js';
import { githubSignature, pushPayload, seedTargets, startHarness, waitIdle, type Harness } from './support/webhook-harness.js';

const BODY_LIMIT = 64 * 1024;
const secrets = Object.fromEntries(seedTargets().map((t) => [t.secret, randomBytes(32).toString('hex')]));
const env = { WEBHOOK_MAX_BODY_BYTES: String(BODY_LIMIT) };

let fast: Harness;
let slow: Harness;
const extraServers: Server[] = [];

beforeAll(async () => {
  [fast, slow] = await Promise.all([startHarness({ secrets, env, fastPath: true }), startHarness({ secrets, env, fastPath: false })]);
});

afterAll(async () => {
  for (const server of extraServers) await closeGracefully(server, 1_000);
  await Promise.all([fast?.close(), slow?.close()]);
});

interface Sent {
  method?: string;
  path?: string;
  headers: Record<string, string>;
  body?: Buffer;
  /** Send without Content-Length, in pieces (Transfer-Encoding: chunked). */
  chunked?: boolean;
}

const send = (base: string, sent: Sent): Promise<RawAnswer> => sendRaw(base, { ...sent, method: sent.method ?? 'POST', path: sent.path ?? '/webhook' });

/** Deployment ids are random per server; everything else must be equal. */
const maskIds = (answer: RawAnswer): RawAnswer => ({
  ...answer,
  body: answer.body.replace(/"deploymentId":"[0-9a-f-]{36}"/g, '"deploymentId":"<id>"'),
});

const json = (value: unknown): Buffer => Buffer.from(JSON.stringify(value));
const commit = (): string => randomBytes(20).toString('hex');
const delivery = (): string => randomBytes(8).toString('hex');

/** A GitHub-style delivery of `body` signed with the secret of `secretName`. */
function github(body: Buffer, secretName: string, event = 'push', extra: Record<string, string> = {}): Sent {
  return {
    headers: {
      'content-type': 'application/json',
      'x-github-event': event,
      'x-github-delivery': delivery(),
      'x-hub-signature-256': githubSignature(body, secrets[secretName]!),
      ...extra,
    },
    body,
  };
}

function gitlab(body: Buffer, token: string, extra: Record<string, string> = {}): Sent {
  return { headers: { 'content-type': 'application/json', 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': token, 'idempotency-key': delivery(), ...extra }, body };
}

interface Case {
  name: string;
  /** The request(s), sent to both servers in this order; each answer is compared. */
  requests: () => Sent[];
  /** The status of the last answer (so a case cannot pass by both servers failing alike). */
  status: number;
  /** Who answers on the server with the fast path: the listener in front, or Express. */
  answeredBy?: 'fast path' | 'express';
}

const de1Push = (extra: Record<string, unknown> = {}) => json(pushPayload('feature/team-de1/ack', commit(), extra));

const CASES: Case[] = [
  { name: 'a push signed with the GitHub HMAC of its team', requests: () => [github(de1Push(), 'SECRET_TEAM_DE1')], status: 202 },
  { name: 'a push with the GitLab token of its target', requests: () => [gitlab(json(pushPayload('main', commit())), secrets.SECRET_MAIN!)], status: 202 },
  {
    name: 'a push signed with Gitea headers',
    requests: () => {
      const body = json(pushPayload('feature/team-de2/gitea', commit()));
      return [{ headers: { 'content-type': 'application/json', 'x-gitea-event': 'push', 'x-gitea-delivery': delivery(), 'x-hub-signature-256': githubSignature(body, secrets.SECRET_TEAM_DE2!) }, body }];
    },
    status: 202,
  },
  { name: 'a push with a forged signature', requests: () => [github(de1Push(), 'SECRET_TEAM_DE1', 'push', { 'x-hub-signature-256': `sha256=${'0'.repeat(64)}` })], status: 401 },
  { name: 'a push signed with another team\'s secret', requests: () => [github(de1Push(), 'SECRET_TEAM_DE2')], status: 401 },
  { name: 'a push with a wrong GitLab token', requests: () => [gitlab(json(pushPayload('main', commit())), 'not-the-token')], status: 401 },
  { name: 'a GitLab token sent for a GitHub-style target', requests: () => [gitlab(de1Push(), secrets.SECRET_TEAM_DE1!)], status: 401 },
  { name: 'a push without any credential', requests: () => [{ headers: { 'content-type': 'application/json', 'x-github-event': 'push' }, body: de1Push() }], status: 401 },
  {
    name: 'a push whose signature header is repeated',
    requests: () => {
      const sent = github(de1Push(), 'SECRET_TEAM_DE1');
      return [{ ...sent, headers: { ...sent.headers, 'x-hub-signature-256': [sent.headers['x-hub-signature-256'], sent.headers['x-hub-signature-256']] as unknown as string } }];
    },
    status: 401,
  },
  { name: 'signed malformed JSON', requests: () => [github(Buffer.from('{"ref": "refs/heads/feature/team-de1/x",'), 'SECRET_TEAM_DE1')], status: 400 },
  { name: 'a signed push without a commit', requests: () => [github(json({ ref: 'refs/heads/feature/team-de1/x' }), 'SECRET_TEAM_DE1')], status: 400 },
  { name: 'a signed empty body', requests: () => [github(Buffer.alloc(0), 'SECRET_TEAM_DE1')], status: 400 },
  { name: 'a signed ping', requests: () => [github(json({ zen: 'Keep it logically awesome.', hook_id: 1 }), 'SECRET_TEAM_DE1', 'ping')], status: 200 },
  { name: 'a signed event that is not a push', requests: () => [github(json({ action: 'opened' }), 'SECRET_TEAM_DE1', 'issues')], status: 202 },
  { name: 'a signed tag push', requests: () => [github(json(pushPayload('refs/tags/v1.0.0', commit())), 'SECRET_TEAM_DE1')], status: 202 },
  { name: 'a signed push of a branch no target matches', requests: () => [github(json(pushPayload('hotfix/x', commit())), 'SECRET_TEAM_DE1')], status: 404 },
  { name: 'a signed push of a branch name git refuses', requests: () => [github(json(pushPayload('feature/team-de1/a..b', commit())), 'SECRET_TEAM_DE1')], status: 400 },
  { name: 'a signed branch deletion', requests: () => [github(json(pushPayload('feature/team-de1/gone', '0'.repeat(40))), 'SECRET_TEAM_DE1')], status: 202 },
  {
    name: 'a form-encoded signed push',
    requests: () => {
      const body = Buffer.from(`payload=${encodeURIComponent(JSON.stringify(pushPayload('feature/team-fv/form', commit())))}`);
      return [{ ...github(body, 'SECRET_TEAM_FV'), headers: { ...github(body, 'SECRET_TEAM_FV').headers, 'content-type': 'application/x-www-form-urlencoded' } }];
    },
    status: 202,
  },
  { name: 'a signed push declared as text/plain', requests: () => [github(de1Push(), 'SECRET_TEAM_DE1', 'push', { 'content-type': 'text/plain' })], status: 202 },
  { name: 'a signed push sent chunked', requests: () => [{ ...github(de1Push({ padding: 'c'.repeat(20_000) }), 'SECRET_TEAM_DE1'), chunked: true }], status: 202 },
  { name: 'a body over the limit, announced by its length', requests: () => [github(de1Push({ padding: 'x'.repeat(BODY_LIMIT) }), 'SECRET_TEAM_DE1')], status: 413 },
  { name: 'a chunked body over the limit', requests: () => [{ ...github(de1Push({ padding: 'x'.repeat(BODY_LIMIT) }), 'SECRET_TEAM_DE1'), chunked: true }], status: 413 },
  {
    name: 'a gzip body signed over its inflated bytes',
    requests: () => {
      const body = de1Push();
      return [{ ...github(body, 'SECRET_TEAM_DE1', 'push', { 'content-encoding': 'gzip' }), body: gzipSync(body) }];
    },
    status: 202,
  },
  {
    name: 'a deflate body signed over its inflated bytes',
    requests: () => {
      const body = de1Push();
      return [{ ...github(body, 'SECRET_TEAM_DE1', 'push', { 'content-encoding': 'deflate' }), body: deflateSync(body) }];
    },
    status: 202,
  },
  {
    name: 'a gzip bomb with a forged signature',
    requests: () => [{ ...github(Buffer.alloc(0), 'SECRET_TEAM_DE1', 'push', { 'content-encoding': 'gzip' }), body: gzipSync(Buffer.alloc(4 * 1024 * 1024, 0x20)) }],
    status: 413,
  },
  { name: 'a body that is not gzip though declared so', requests: () => [{ ...github(de1Push(), 'SECRET_TEAM_DE1', 'push', { 'content-encoding': 'gzip' }) }], status: 400 },
  { name: 'an unsupported Content-Encoding', requests: () => [github(de1Push(), 'SECRET_TEAM_DE1', 'push', { 'content-encoding': 'compress' })], status: 415 },
  {
    name: 'a redelivery of the same delivery id',
    requests: () => {
      const sent = github(de1Push(), 'SECRET_TEAM_DE1');
      return [sent, sent];
    },
    status: 200,
  },
  {
    name: 'a replay of a pushed commit under a new delivery id',
    requests: () => {
      const body = de1Push();
      return [github(body, 'SECRET_TEAM_DE1'), github(body, 'SECRET_TEAM_DE1')];
    },
    status: 200,
  },
  {
    name: 'a GitLab retry with the same Idempotency-Key',
    requests: () => {
      const sent = gitlab(json(pushPayload('develop', commit())), secrets.SECRET_DEVELOP!);
      return [sent, sent];
    },
    status: 200,
  },
  { name: 'a query string (left to Express)', requests: () => [{ ...github(de1Push(), 'SECRET_TEAM_DE1'), path: '/webhook?source=test' }], status: 202, answeredBy: 'express' },
  { name: 'a trailing slash (left to Express)', requests: () => [{ ...github(de1Push(), 'SECRET_TEAM_DE1'), path: '/webhook/' }], status: 202, answeredBy: 'express' },
  { name: 'a GET of /webhook (left to Express)', requests: () => [{ method: 'GET', headers: {} }], status: 405, answeredBy: 'express' },
  { name: 'a PUT of /webhook (left to Express)', requests: () => [{ ...github(de1Push(), 'SECRET_TEAM_DE1'), method: 'PUT' }], status: 405, answeredBy: 'express' },
];

describe('the acknowledgement without Express', () => {
  for (const c of CASES) {
    it(`answers ${c.name} exactly as Express does`, async () => {
      let last: RawAnswer | undefined;
      for (const sent of c.requests()) {
        const [a, b] = [await send(fast.url, sent), await send(slow.url, sent)];
        expect(maskIds(a)).toEqual(maskIds(b));
        last = a;
      }
      // Both queues idle before the next case (a push is judged on what is queued or running).
      await Promise.all([waitIdle(fast), waitIdle(slow)]);
      expect(last!.status).toBe(c.status);
    });
  }

  it('logs the same lines on both paths, and no secret on either', () => {
    const lines = (h: Harness) =>
      h
        .logs()
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as Record<string, unknown>)
        .filter((line) => /^webhook|^deploy queued|superseded/.test(String(line.msg)))
        .map((line) => String(line.msg));
    expect(lines(fast)).toEqual(lines(slow));
    expect(lines(fast).length).toBeGreaterThan(10);
    for (const secret of Object.values(secrets)) expect(fast.logs()).not.toContain(secret);
  });

  it('answers POST /webhook itself and hands every other request to Express', async () => {
    // The fast path alone in front of a stand-in for Express that answers 599: every case it takes
    // gets its real answer, every other one reaches the stand-in.
    const { config, deployer, logger } = fast.server;
    const acknowledge = webhookAcknowledger({
      config,
      secrets: new SecretBook(resolveTargetSecrets(config.targets, secrets)),
      deployer,
      logger,
      bodies: new BodyReader(config.maxBodyBytes, new InflateBudget(config.inflateBudgetBytes), speculativeDigests(config.targets, new SecretBook(resolveTargetSecrets(config.targets, secrets)))),
    });
    const fastPath = webhookFastPath({ acknowledge, limiter: new AuthFailureLimiter(1_000), trustProxy: () => false, logger });
    const fellBack: string[] = [];
    const server = createServer((req, res) =>
      fastPath(req, res, () => {
        fellBack.push(`${req.method} ${req.url}`);
        req.resume();
        res.writeHead(599).end();
      }),
    );
    extraServers.push(server);
    const base = `http://127.0.0.1:${await listen(server, 0, '127.0.0.1')}`;
    for (const c of CASES) {
      let last: RawAnswer | undefined;
      for (const sent of c.requests()) last = await send(base, sent);
      await waitIdle(fast);
      expect(last!.status, c.name).toBe(c.answeredBy === 'express' ? 599 : c.status);
    }
    expect(fellBack).toHaveLength(CASES.filter((c) => c.answeredBy === 'express').length);
  });
});

describe('the failed-authentication limit without Express', () => {
  const LIMIT = 2;
  let fastLimited: Harness;
  let slowLimited: Harness;
  beforeAll(async () => {
    const limited = { ...env, WEBHOOK_AUTH_FAILURES_PER_MINUTE: String(LIMIT) };
    [fastLimited, slowLimited] = await Promise.all([startHarness({ secrets, env: limited, fastPath: true }), startHarness({ secrets, env: limited, fastPath: false })]);
  });
  afterAll(async () => {
    await Promise.all([fastLimited?.close(), slowLimited?.close()]);
  });

  /** Retry-After counts down from when each server opened its window (a few ms apart). */
  const maskRetry = (answer: RawAnswer): RawAnswer => {
    const retry = answer.headers['retry-after'];
    if (retry !== undefined) expect(Number(retry)).toBeLessThanOrEqual(60);
    return maskIds({ ...answer, headers: retry === undefined ? answer.headers : { ...answer.headers, 'retry-after': '<s>' } });
  };

  const forged = (forwardedFor?: string): Sent => {
    const sent = github(de1Push(), 'SECRET_TEAM_DE2');
    return forwardedFor ? { ...sent, headers: { ...sent.headers, 'x-forwarded-for': forwardedFor } } : sent;
  };

  it('counts and refuses failures exactly as Express does, per client address behind the trusted proxy, and never refuses a correctly signed push', async () => {
    const sequence: [Sent, number][] = [
      [forged('203.0.113.7'), 401],
      [forged('203.0.113.7'), 401],
      [forged('203.0.113.7'), 429],
      // The one-hook-per-team setup: the same sender's genuine push for its own team still passes.
      [github(de1Push(), 'SECRET_TEAM_DE1', 'push', { 'x-forwarded-for': '203.0.113.7' }), 202],
      [forged('203.0.113.8'), 401],
      [forged('203.0.113.7'), 429],
    ];
    for (const [i, [sent, status]] of sequence.entries()) {
      const [a, b] = [await send(fastLimited.url, sent), await send(slowLimited.url, sent)];
      expect(maskRetry(a), `request ${i}`).toEqual(maskRetry(b));
      expect(a.status, `request ${i}`).toBe(status);
    }
  });

  it('shares one count with the requests Express answers', async () => {
    const address = '198.51.100.9';
    const statuses: number[] = [];
    // Alternating the fast path (/webhook) and Express (/webhook/ reaches the same route there).
    for (let i = 0; i < LIMIT + 1; i++) {
      const sent = { ...forged(address), path: i % 2 === 0 ? '/webhook' : '/webhook/' };
      statuses.push((await send(fastLimited.url, sent)).status);
    }
    expect(statuses).toEqual([401, 401, 429]);
  });
});
