import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi, type TestResponse } from '../../../test/helpers/api.js';

/**
 * The seed's role table applied to every endpoint: guest read; contributor and reviewer read,
 * create and update their own; admin everything. No credentials asking for more than read → 401
 * with a Bearer challenge; an authenticated caller lacking the permission → 403 (a token with role
 * guest included); an invalid token → 401 on every endpoint.
 */
const { db, api } = useTestApi();
const tokens: Record<string, string | undefined> = {};

beforeAll(async () => {
  tokens.anonymous = undefined;
  tokens.guest = await api.tokenFor('guest', 'gina');
  tokens.contributor = await api.tokenFor('contributor', 'conny');
  tokens.reviewer = await api.tokenFor('reviewer', 'rita');
  tokens.admin = await api.tokenFor('admin', 'adam');
});

type Caller = 'anonymous' | 'guest' | 'contributor' | 'reviewer' | 'admin';
const CALLERS: Caller[] = ['anonymous', 'guest', 'contributor', 'reviewer', 'admin'];

/** A feature created by `owner` (through the API, so created_by is the owner's sub). */
async function featureOwnedBy(owner: 'contributor' | 'reviewer' | 'admin'): Promise<string> {
  const created = await api.request('POST', '/api/features', { token: tokens[owner], body: aFeature() });
  expect(created.status).toBe(201);
  return created.json.id as string;
}

interface Case {
  endpoint: string;
  expected: Record<Caller, number>;
  call(token: string | undefined): Promise<TestResponse>;
}

const READ = { anonymous: 200, guest: 200, contributor: 200, reviewer: 200, admin: 200 };

const cases: Case[] = [
  { endpoint: 'GET /api/features', expected: READ, call: (token) => api.request('GET', '/api/features', { token }) },
  { endpoint: 'GET /api/features/:id', expected: READ, call: async (token) => api.request('GET', `/api/features/${await featureOwnedBy('admin')}`, { token }) },
  { endpoint: 'GET /api/features/:id/history', expected: READ, call: async (token) => api.request('GET', `/api/features/${await featureOwnedBy('admin')}/history`, { token }) },
  {
    endpoint: 'POST /api/features',
    expected: { anonymous: 401, guest: 403, contributor: 201, reviewer: 201, admin: 201 },
    call: (token) => api.request('POST', '/api/features', { token, body: aFeature() }),
  },
  {
    endpoint: 'PUT /api/features/:id (a feature the caller created)',
    expected: { anonymous: 401, guest: 403, contributor: 200, reviewer: 200, admin: 200 },
    call: async (token) => {
      const owner = (Object.keys(tokens) as Caller[]).find((c) => tokens[c] === token);
      const id = owner === 'contributor' || owner === 'reviewer' || owner === 'admin' ? await featureOwnedBy(owner) : await featureOwnedBy('contributor');
      return api.request('PUT', `/api/features/${id}`, { token, body: aFeature({ properties: { name: 'changed' } }) });
    },
  },
  {
    endpoint: "PUT /api/features/:id (someone else's feature)",
    expected: { anonymous: 401, guest: 403, contributor: 403, reviewer: 403, admin: 200 },
    call: async (token) => {
      const id = tokens.contributor === token ? await featureOwnedBy('reviewer') : await featureOwnedBy('contributor');
      return api.request('PUT', `/api/features/${id}`, { token, body: aFeature({ properties: { name: 'changed' } }) });
    },
  },
  {
    endpoint: 'DELETE /api/features/:id (even a feature the caller created)',
    expected: { anonymous: 401, guest: 403, contributor: 403, reviewer: 403, admin: 204 },
    call: async (token) => {
      const owner = (Object.keys(tokens) as Caller[]).find((c) => tokens[c] === token);
      const id = owner === 'contributor' || owner === 'reviewer' || owner === 'admin' ? await featureOwnedBy(owner) : await featureOwnedBy('admin');
      return api.request('DELETE', `/api/features/${id}`, { token });
    },
  },
];

describe.each(cases)('$endpoint', ({ expected, call }) => {
  it.each(CALLERS)('as %s', async (caller) => {
    const response = await call(tokens[caller]);
    expect(response.status).toBe(expected[caller]);
    if (response.status === 401) {
      expect(response.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(response.json.code).toBe('UNAUTHENTICATED');
    }
    if (response.status === 403) expect(response.json.code).toBe('FORBIDDEN');
  });
});

describe('refused changes leave no trace', () => {
  it("a contributor's PUT on someone else's feature changes nothing", async () => {
    const id = await featureOwnedBy('reviewer');
    const response = await api.request('PUT', `/api/features/${id}`, { token: tokens.contributor, body: aFeature({ properties: { name: 'hijacked' } }) });
    expect(response.status).toBe(403);
    const feature = await api.request('GET', `/api/features/${id}`);
    expect(feature.json.properties).toMatchObject({ name: 'Alter Friedhof', version: 1 });
  });

  it('an anonymous POST is refused before its body is read (401 even for a malformed body)', async () => {
    const response = await api.request('POST', '/api/features', { rawBody: '{not json', headers: { 'content-type': 'application/json' } });
    expect(response.status).toBe(401);
  });
});

describe('tokens', () => {
  const endpoints: Array<[string, string]> = [
    ['GET', '/api/features'],
    ['GET', '/api/features/x'],
    ['POST', '/api/features'],
    ['DELETE', '/api/features/x'],
  ];

  it('an expired, wrongly signed, foreign-issuer or garbage token gets 401 on every endpoint', async () => {
    const expired = await api.issuer.sign({ sub: 'adam', role: 'admin', exp: Math.floor(Date.now() / 1000) - 3600 }, { expiresIn: Math.floor(Date.now() / 1000) - 3600 });
    const foreignIssuer = await api.issuer.sign({ sub: 'adam', role: 'admin' }, { issuer: 'https://evil.example/' });
    const valid = tokens.admin!;
    const [header, payload] = valid.split('.');
    const tampered = `${header}.${Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(payload!, 'base64url').toString()), role: 'admin', sub: 'eve' })).toString('base64url')}.${valid.split('.')[2]}`;
    for (const token of [expired, foreignIssuer, tampered, 'not-a-jwt', `${header}.${payload}.`]) {
      for (const [method, path] of endpoints) {
        const response = await api.request(method, path, { token, ...(method === 'POST' ? { body: aFeature() } : {}) });
        expect(response.status, `${method} ${path} with ${token.slice(0, 20)}…`).toBe(401);
        expect(response.headers.get('www-authenticate')).toMatch(/^Bearer/);
      }
    }
  });

  it('a validly signed token whose claims the database cannot hold (NUL, lone surrogate, overlong) gets 401 INVALID_TOKEN at authentication', async () => {
    const unusable: Array<Record<string, unknown> & { sub: string }> = [
      { sub: 'ad\u0000am', role: 'admin' },
      { sub: 'ad\ud800am', role: 'admin' },
      { sub: 'a'.repeat(256), role: 'admin' },
      { sub: 'adam', role: 'admin', name: 'Adam\u0000' },
      { sub: 'adam', role: 'admin', email: `${'a'.repeat(320)}@example.org` },
    ];
    for (const claims of unusable) {
      const token = await api.issuer.sign(claims);
      for (const [method, path] of endpoints) {
        const response = await api.request(method, path, { token, ...(method === 'POST' ? { body: aFeature() } : {}) });
        expect(response.status, `${method} ${path} with ${JSON.stringify(claims).slice(0, 60)}`).toBe(401);
        expect(response.json.code).toBe('INVALID_TOKEN');
        expect(response.headers.get('www-authenticate')).toMatch(/^Bearer .*error="invalid_token"/);
      }
    }
    const recorded = await db.pool.query(`SELECT count(*)::int AS n FROM users.users WHERE (id LIKE 'ad%am' AND id <> 'adam') OR char_length(id) > 255`);
    expect(recorded.rows[0].n).toBe(0);
    // The limits themselves are fine: 255 characters of subject (emoji count as one each).
    const longest = await api.issuer.sign({ sub: '🌹'.repeat(255), role: 'contributor' });
    expect((await api.request('POST', '/api/features', { token: longest, body: aFeature() })).status).toBe(201);
  });

  it('takes the role from ext.role (where Hydra puts session claims)', async () => {
    const token = await api.issuer.sign({ sub: 'hydra-user', ext: { role: 'contributor' } });
    const response = await api.request('POST', '/api/features', { token, body: aFeature() });
    expect(response.status).toBe(201);
    expect(response.json.properties.createdBy).toBe('hydra-user');
  });
  // Key rotation is covered by services/api/test/auth.test.ts (jose refetches an unknown kid
  // after its 30 s cooldown, which a test here could only wait out).
});
