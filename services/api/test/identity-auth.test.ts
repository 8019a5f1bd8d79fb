import { Writable } from 'node:stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { aFeature } from '../../../test/helpers/api.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { createLogger } from '../../shared/logger.js';
import { loadApiConfig } from '../src/config.js';
import { ACCESS_TOKEN_SECONDS, APP_ORIGIN, startIdentityApi, type IdentityApiHarness } from './identity-harness.js';
import { lacks, requirements } from '../../../test/helpers/requirements.js';

const MISSING = lacks('the API identity tests on the Kratos/Hydra doubles', requirements.contracts());

/**
 * The API trusts three kinds of credentials: a JWT (JWKS), an opaque Hydra access token (introspection,
 * cached at most until it expires) and a Kratos session cookie (whoami, cached briefly). Real HTTP, a real
 * database, Kratos and Hydra as contract-checked doubles.
 */

let db: TestDatabase;
let api: IdentityApiHarness;

beforeAll(async () => {
  if (MISSING) return;
  db = await createTestDatabase();
  api = await startIdentityApi(db, { sessionTtlMs: 10_000 });
});
afterAll(async () => {
  if (MISSING) return;
  await api?.close();
  await db?.close();
});
afterEach(() => {
  if (MISSING) return;
  expect([...api.kratos.violations, ...api.hydra.violations]).toEqual([]);
});

async function createdFeature(): Promise<string> {
  const res = await api.request('POST', '/api/features', { bearer: await api.jwt('admin', 'seeder'), body: aFeature() });
  expect(res.status).toBe(201);
  return res.json.id as string;
}

describe.skipIf(MISSING)('Kratos session cookie', () => {
  it('authenticates a browser by its session cookie, with the role from metadata_public', async () => {
    const { identity, session } = api.signedIn('contributor');
    const res = await api.request('POST', '/api/features', { session, origin: APP_ORIGIN, body: aFeature() });
    expect(res.status).toBe(201);
    expect(res.json.properties.createdBy).toBe(identity.id);
  });

  it('a session without a role in metadata_public is a guest: it may read but not create (403, not 401)', async () => {
    const { session } = api.signedIn(undefined);
    const id = await createdFeature();
    expect((await api.request('GET', `/api/features/${id}`, { session })).status).toBe(200);
    const res = await api.request('POST', '/api/features', { session, origin: APP_ORIGIN, body: aFeature() });
    expect(res.status).toBe(403);
    expect(res.json.code).toBe('FORBIDDEN');
  });

  it('asks Kratos once per session within the cache time, and again after it', async () => {
    const { session } = api.signedIn('reviewer');
    const id = await createdFeature();
    const before = api.kratos.public.count('toSession');
    for (let i = 0; i < 5; i++) expect((await api.request('GET', `/api/features/${id}`, { session })).status).toBe(200);
    await Promise.all(Array.from({ length: 5 }, () => api.request('GET', `/api/features/${id}`, { session })));
    expect(api.kratos.public.count('toSession') - before).toBe(1);
    api.clock.advance(11);
    expect((await api.request('GET', `/api/features/${id}`, { session })).status).toBe(200);
    expect(api.kratos.public.count('toSession') - before).toBe(2);
  });

  it('a session ended in Kratos stops authenticating once the short cache runs out', async () => {
    const { session, sessionId } = api.signedIn('admin');
    expect((await api.request('POST', '/api/features', { session, origin: APP_ORIGIN, body: aFeature() })).status).toBe(201);
    api.kratos.sessions.get(session)!.active = false;
    expect(sessionId).toBeTruthy();
    api.clock.advance(11);
    const res = await api.request('POST', '/api/features', { session, origin: APP_ORIGIN, body: aFeature() });
    expect(res.status).toBe(401);
    expect(res.json.code).toBe('UNAUTHENTICATED');
  });

  it('a session waiting for its second factor is refused with 401 and a clear message', async () => {
    const identity = api.kratos.addIdentity({ email: 'mfa@example.org', name: 'MFA', password: 'x', role: 'admin', secondFactor: true });
    const stored = api.kratos.createSession(identity.id, { aal: 'aal1' });
    const res = await api.request('GET', '/api/features', { session: stored.token });
    expect(res.status).toBe(401);
    expect(res.json.detail).toMatch(/second factor/);
  });

  it('an unknown cookie is anonymous: reading works, changing asks for authentication', async () => {
    expect((await api.request('GET', '/api/features?limit=1', { session: 'not-a-session' })).status).toBe(200);
    const res = await api.request('POST', '/api/features', { session: 'not-a-session', origin: APP_ORIGIN, body: aFeature() });
    expect(res.status).toBe(401);
  });
});

describe.skipIf(MISSING)('opaque Hydra access token', () => {
  it('authenticates by introspection, with the role from the token session (ext.role)', async () => {
    const token = await api.opaqueToken('hydra-user-1', { role: 'contributor', email: 'h1@example.org', name: 'Hydra One' });
    expect(token).toMatch(/^ory_at_/);
    const res = await api.request('POST', '/api/features', { bearer: token, body: aFeature() });
    expect(res.status).toBe(201);
    expect(res.json.properties.createdBy).toBe('hydra-user-1');
    const asAdmin = await api.request('GET', '/api/users', { bearer: token });
    expect(asAdmin.status).toBe(403);
  });

  it('introspects a token once and reuses the answer until the token expires, then answers 401', async () => {
    const token = await api.opaqueToken('hydra-user-2', { role: 'reviewer' });
    const id = await createdFeature();
    const before = api.hydra.admin.count('introspectOAuth2Token');
    for (let i = 0; i < 5; i++) expect((await api.request('GET', `/api/features/${id}`, { bearer: token })).status).toBe(200);
    await Promise.all(Array.from({ length: 5 }, () => api.request('GET', `/api/features/${id}`, { bearer: token })));
    api.clock.advance(ACCESS_TOKEN_SECONDS - 10);
    expect((await api.request('GET', `/api/features/${id}`, { bearer: token })).status).toBe(200);
    expect(api.hydra.admin.count('introspectOAuth2Token') - before).toBe(1);

    api.clock.advance(11); // past exp: the cached answer must not outlive the token
    const expired = await api.request('GET', `/api/features/${id}`, { bearer: token });
    expect(expired.status).toBe(401);
    expect(expired.json.code).toBe('INVALID_TOKEN');
    expect(expired.headers.get('www-authenticate')).toMatch(/error="invalid_token"/);
    expect(api.hydra.admin.count('introspectOAuth2Token') - before).toBe(2);
  });

  it('an unknown or revoked token is refused with 401 INVALID_TOKEN, also for reading', async () => {
    const unknown = await api.request('GET', '/api/features', { bearer: 'ory_at_unknown-token' });
    expect(unknown.status).toBe(401);
    expect(unknown.json.code).toBe('INVALID_TOKEN');

    const token = await api.opaqueToken('hydra-user-3', { role: 'admin' });
    api.hydra.revoke(token);
    expect((await api.request('GET', '/api/features', { bearer: token })).status).toBe(401);
  });

  it('a JWT-shaped bearer token is verified against the JWKS, never sent to introspection', async () => {
    const before = api.hydra.admin.count('introspectOAuth2Token');
    const jwt = await api.jwt('contributor', 'jwt-user');
    expect((await api.request('POST', '/api/features', { bearer: jwt, body: aFeature() })).status).toBe(201);
    const forged = `${jwt.slice(0, jwt.lastIndexOf('.'))}.AAAA`;
    const res = await api.request('GET', '/api/features', { bearer: forged });
    expect(res.status).toBe(401);
    expect(res.json.detail).toMatch(/signature/);
    expect(api.hydra.admin.count('introspectOAuth2Token')).toBe(before);
  });
});

describe.skipIf(MISSING)('callers are recorded in users.users', () => {
  it('records id, email, name and role of a session caller on first sight and follows changes', async () => {
    const { identity, session } = api.signedIn('reviewer', { name: 'Rita Reviewer', email: 'rita@example.org' });
    await api.request('GET', '/api/features?limit=1', { session });
    const row = async () => (await db.pool.query('SELECT email, name, role FROM users.users WHERE id = $1', [identity.id])).rows[0];
    expect(await row()).toEqual({ email: 'rita@example.org', name: 'Rita Reviewer', role: 'reviewer' });

    identity.role = 'admin';
    identity.name = 'Rita Admin';
    api.clock.advance(11); // the next whoami sees the change
    await api.request('GET', '/api/features?limit=1', { session });
    expect(await row()).toEqual({ email: 'rita@example.org', name: 'Rita Admin', role: 'admin' });
  });

  it('records a token caller, but an older token never overwrites the role of a known user', async () => {
    const token = await api.opaqueToken('hydra-user-4', { role: 'reviewer', email: 'h4@example.org' });
    await api.request('GET', '/api/features?limit=1', { bearer: token });
    const row = async () => (await db.pool.query('SELECT email, role FROM users.users WHERE id = $1', ['hydra-user-4'])).rows[0];
    expect(await row()).toEqual({ email: 'h4@example.org', role: 'reviewer' });
    await db.pool.query("UPDATE users.users SET role = 'contributor' WHERE id = 'hydra-user-4'"); // an admin demoted the user
    const stale = await api.jwt('reviewer', 'hydra-user-4', { email: 'new@example.org' });
    await api.request('GET', '/api/features?limit=1', { bearer: stale });
    expect(await row()).toEqual({ email: 'new@example.org', role: 'contributor' });
  });

  it('writes once per caller and claims, not once per request', async () => {
    let inserts = 0;
    const counting = new Proxy(db.pool, {
      get(target, property) {
        if (property === 'query') {
          return (...args: Parameters<typeof target.query>) => {
            // A statement's text, given as a string or in a query config ({ text, values }).
            const [statement] = args as unknown[];
            const text = typeof statement === 'string' ? statement : (statement as { text?: unknown } | null)?.text;
            if (typeof text === 'string' && text.includes('INSERT INTO users.users')) inserts++;
            return (target.query as (...a: unknown[]) => unknown).apply(target, args);
          };
        }
        const value = Reflect.get(target, property) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const counted = await startIdentityApi(db, { pool: counting });
    try {
      const token = await counted.jwt('contributor', 'counted-user', { email: 'c@example.org' });
      for (let i = 0; i < 10; i++) expect((await counted.request('GET', '/api/features?limit=1', { bearer: token })).status).toBe(200);
      expect(inserts).toBe(1);
      const renamed = await counted.jwt('contributor', 'counted-user', { email: 'c2@example.org' });
      await counted.request('GET', '/api/features?limit=1', { bearer: renamed });
      expect(inserts).toBe(2);
    } finally {
      await counted.close();
    }
  });
});

describe.skipIf(MISSING)('outages and wiring', () => {
  it('answers 503 when Kratos cannot be reached to check a session, and the log-safe error names no cookie', async () => {
    const outage = await startIdentityApi(db);
    const { session } = outage.signedIn('admin');
    await outage.kratos.close();
    const res = await outage.request('GET', '/api/features', { session });
    expect(res.status).toBe(503);
    expect(res.json.detail).toMatch(/Kratos/);
    expect(JSON.stringify(res.json)).not.toContain(session);
    await outage.close().catch(() => undefined);
  });

  it('logs an Ory outage without the cookie or the token it forwarded', async () => {
    const lines: string[] = [];
    const logger = createLogger('api', { level: 'debug', destination: new Writable({ write: (chunk, _enc, done) => (lines.push(String(chunk)), done()) }) });
    const outage = await startIdentityApi(db, { logger });
    const { session } = outage.signedIn('admin');
    const token = await outage.opaqueToken('logged-user', { role: 'admin' });
    await Promise.all([outage.kratos.close(), outage.hydra.close()]);
    expect((await outage.request('GET', '/api/features', { session })).status).toBe(503);
    expect((await outage.request('GET', '/api/features', { bearer: token })).status).toBe(503);
    const log = lines.join('');
    expect(log).not.toContain(session);
    expect(log).not.toContain(token);
    expect(log).toMatch(/Kratos/);
    expect(log).toMatch(/Hydra/);
    expect(log).toMatch(/\/sessions\/whoami/);
    await outage.close().catch(() => undefined);
  });

  it('the configuration builds the same authenticator: cookie and opaque token accepted through createAuthenticator', async () => {
    const configured = await startIdentityApi(db, { via: 'config' });
    try {
      const { session } = configured.signedIn('contributor');
      expect((await configured.request('POST', '/api/features', { session, origin: APP_ORIGIN, body: aFeature() })).status).toBe(201);
      const token = await configured.opaqueToken('configured-user', { role: 'contributor' });
      expect((await configured.request('POST', '/api/features', { bearer: token, body: aFeature() })).status).toBe(201);
      expect([...configured.kratos.violations, ...configured.hydra.violations]).toEqual([]);
    } finally {
      await configured.close();
    }
  });

  it('reads the identity variables, all optional, and names a bad CORS origin', () => {
    const bare = loadApiConfig({});
    expect(bare.identity).toMatchObject({ kratosPublicUrl: undefined, hydraAdminUrl: undefined, sessionCacheMs: 15_000, introspectionCacheMs: 300_000 });
    expect(bare.cors.origins).toEqual([]);
    const full = loadApiConfig({ KRATOS_PUBLIC_URL: 'http://kratos:4433', HYDRA_ADMIN_URL: 'http://hydra:4445', SESSION_CACHE_SECONDS: '5', CORS_ORIGINS: 'https://app.example.org, https://map.example.org/' });
    expect(full.identity).toMatchObject({ kratosPublicUrl: 'http://kratos:4433', hydraAdminUrl: 'http://hydra:4445', sessionCacheMs: 5_000 });
    expect(full.cors.origins).toEqual(['https://app.example.org', 'https://map.example.org']);
    expect(() => loadApiConfig({ CORS_ORIGINS: 'https://app.example.org/path' })).toThrow(/CORS_ORIGINS/);
    expect(() => loadApiConfig({ SESSION_CACHE_SECONDS: '-1' })).toThrow(/SESSION_CACHE_SECONDS/);
  });
});
