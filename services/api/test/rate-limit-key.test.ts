/**
 * Whose budget a change counts against (RATE_LIMIT_WRITES_PER_MINUTE, docs/api.md "Rate limit").
 *
 * In the stack every request reaches the API from the proxy, so a limit keyed on the TCP peer is one
 * bucket for all users. The key is the authenticated caller when there is one, else the client address,
 * which X-Forwarded-For names only when the peer is a proxy named in API_TRUST_PROXY. Through real HTTP
 * on 127.0.0.1: loopback plays the proxy when trusted, and an untrusted client otherwise.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadApiConfig } from '../src/config.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { aFeature, startTestApi, type TestApi } from '../../../test/helpers/api.js';

const LIMIT = 3;
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db.close();
});

/** Statuses of `count` creates, sequential, each with its own headers. */
async function creates(api: TestApi, count: number, headers: (i: number) => Record<string, string>, token?: (i: number) => string | undefined): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < count; i++) {
    const answer = await api.request('POST', '/api/features', { token: token?.(i), headers: headers(i), body: aFeature() });
    statuses.push(answer.status);
  }
  return statuses;
}

describe('behind a trusted proxy (API_TRUST_PROXY=loopback)', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startTestApi(db, { config: { rateLimit: { writesPerMinute: LIMIT, trustProxy: ['loopback'] } } });
  });
  afterAll(async () => {
    await api.close();
  });

  it('two users behind the same proxy address each get their own budget', async () => {
    const alice = await api.tokenFor('contributor', 'rl-alice');
    const bob = await api.tokenFor('contributor', 'rl-bob');
    const sameClient = () => ({ 'x-forwarded-for': '198.51.100.10' });
    expect(await creates(api, LIMIT + 1, sameClient, () => alice)).toEqual([201, 201, 201, 429]);
    expect(await creates(api, LIMIT, sameClient, () => bob)).toEqual([201, 201, 201]);
  });

  it("a user's budget follows the user, whichever address the proxy names", async () => {
    const carol = await api.tokenFor('contributor', 'rl-carol');
    expect(await creates(api, LIMIT + 1, (i) => ({ 'x-forwarded-for': `198.51.100.${20 + i}` }), () => carol)).toEqual([201, 201, 201, 429]);
  });

  it('callers without credentials are told apart by the address the proxy names', async () => {
    // Anonymous creates are refused (401), but they count: the limit comes first.
    expect(await creates(api, LIMIT + 1, () => ({ 'x-forwarded-for': '203.0.113.7' }))).toEqual([401, 401, 401, 429]);
    expect(await creates(api, 1, () => ({ 'x-forwarded-for': '203.0.113.8' }))).toEqual([401]);
  });

  it('believes only the hop the proxy added: an address the client put in front does not help', async () => {
    const spoofed = (i: number) => ({ 'x-forwarded-for': `192.0.2.${i + 1}, 203.0.113.9` });
    expect(await creates(api, LIMIT + 1, spoofed)).toEqual([401, 401, 401, 429]);
  });

  it('a forged token, whatever its subject, counts against the address, not a fresh user', async () => {
    const forged = (i: number) => `eyJhbGciOiJub25lIn0.${Buffer.from(JSON.stringify({ sub: `forged-${i}` })).toString('base64url')}.`;
    expect(await creates(api, LIMIT + 1, () => ({ 'x-forwarded-for': '203.0.113.10' }), forged)).toEqual([401, 401, 401, 429]);
  });
});

describe('X-Forwarded-For from a peer that is not a trusted proxy', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startTestApi(db, { config: { rateLimit: { writesPerMinute: LIMIT, trustProxy: ['10.0.0.0/8'] } } });
  });
  afterAll(async () => {
    await api.close();
  });

  it('a spoofed X-Forwarded-For does not give an anonymous caller a fresh budget', async () => {
    expect(await creates(api, LIMIT + 2, (i) => ({ 'x-forwarded-for': `203.0.113.${50 + i}` }))).toEqual([401, 401, 401, 429, 429]);
  });

  it('users still have budgets of their own', async () => {
    const dave = await api.tokenFor('contributor', 'rl-dave');
    expect(await creates(api, LIMIT + 1, () => ({ 'x-forwarded-for': '203.0.113.60' }), () => dave)).toEqual([201, 201, 201, 429]);
  });
});

describe('API_TRUST_PROXY', () => {
  const base = { NODE_ENV: 'development' };

  it('trusts no proxy by default', () => {
    expect(loadApiConfig(base).rateLimit.trustProxy).toEqual([]);
  });

  it('takes proxy-addr names, addresses and subnets, comma-separated', () => {
    expect(loadApiConfig({ ...base, API_TRUST_PROXY: 'loopback, 172.30.0.0/24,10.1.2.3' }).rateLimit.trustProxy).toEqual(['loopback', '172.30.0.0/24', '10.1.2.3']);
  });

  it.each(['true', '1', 'proxy.example.org', '10.0.0.0/99'])('refuses %s, naming the variable', (value) => {
    expect(() => loadApiConfig({ ...base, API_TRUST_PROXY: value })).toThrow(/API_TRUST_PROXY/);
  });
});
