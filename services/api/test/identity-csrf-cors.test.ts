import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { aFeature } from '../../../test/helpers/api.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { APP_ORIGIN, startIdentityApi, type IdentityApiHarness } from './identity-harness.js';
import { lacks, requirements } from '../../../test/helpers/requirements.js';

const MISSING = lacks('the API identity tests on the Kratos/Hydra doubles', requirements.contracts());

/**
 * Cookie-authenticated changes must come from our own pages (Origin check); Bearer requests are not
 * subject to it. CORS answers only the configured origins (CORS_ORIGINS = https://app.example.org here).
 */

let db: TestDatabase;
let api: IdentityApiHarness;

beforeAll(async () => {
  if (MISSING) return;
  db = await createTestDatabase();
  api = await startIdentityApi(db);
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

describe.skipIf(MISSING)('CSRF: Origin check for cookie-authenticated changes', () => {
  it('refuses a cookie-authenticated POST without an Origin header with 403, and creates nothing', async () => {
    const { identity, session } = api.signedIn('admin');
    const res = await api.request('POST', '/api/features', { session, body: aFeature({ properties: { name: 'csrf-missing' } }) });
    expect(res.status).toBe(403);
    expect(res.json.code).toBe('CSRF_REJECTED');
    expect(res.json.detail).toMatch(/Origin/);
    const { rows } = await db.pool.query("SELECT 1 FROM features.features WHERE created_by = $1 OR name = 'csrf-missing'", [identity.id]);
    expect(rows).toHaveLength(0);
  });

  it('refuses a cookie-authenticated change from a foreign or opaque (null) origin with 403', async () => {
    const { session } = api.signedIn('admin');
    for (const origin of ['https://evil.example.net', 'https://app.example.org.evil.net', 'http://app.example.org', 'null']) {
      const res = await api.request('POST', '/api/features', { session, origin, body: aFeature() });
      expect(res.status, origin).toBe(403);
      expect(res.json.code).toBe('CSRF_REJECTED');
    }
  });

  it('protects PUT, DELETE and the user administration alike', async () => {
    const { session } = api.signedIn('admin');
    const created = await api.request('POST', '/api/features', { session, origin: APP_ORIGIN, body: aFeature() });
    expect(created.status).toBe(201);
    const id = created.json.id as string;
    expect((await api.request('PUT', `/api/features/${id}`, { session, origin: 'https://evil.example.net', body: aFeature({ id }) })).status).toBe(403);
    expect((await api.request('DELETE', `/api/features/${id}`, { session })).status).toBe(403);
    expect((await api.request('PUT', `/api/users/${id}/role`, { session, body: { role: 'admin' } })).status).toBe(403);
    expect((await api.request('DELETE', `/api/features/${id}`, { session, origin: APP_ORIGIN })).status).toBe(204);
  });

  it('accepts a cookie-authenticated change from a configured origin and from the API itself', async () => {
    const { session } = api.signedIn('contributor');
    expect((await api.request('POST', '/api/features', { session, origin: APP_ORIGIN, body: aFeature() })).status).toBe(201);
    expect((await api.request('POST', '/api/features', { session, origin: api.url, body: aFeature() })).status).toBe(201);
  });

  it('reading with the cookie needs no Origin', async () => {
    const { session } = api.signedIn('contributor');
    expect((await api.request('GET', '/api/features?limit=1', { session })).status).toBe(200);
  });

  it('Bearer requests are not subject to it, with or without a foreign Origin — even when a cookie is sent too', async () => {
    const jwt = await api.jwt('contributor', 'bearer-user');
    expect((await api.request('POST', '/api/features', { bearer: jwt, body: aFeature() })).status).toBe(201);
    expect((await api.request('POST', '/api/features', { bearer: jwt, origin: 'https://evil.example.net', body: aFeature() })).status).toBe(201);
    const opaque = await api.opaqueToken('opaque-user', { role: 'contributor' });
    expect((await api.request('POST', '/api/features', { bearer: opaque, body: aFeature() })).status).toBe(201);
    // The Bearer token wins over the cookie: the change is made as the token's subject.
    const { session } = api.signedIn('admin');
    const both = await api.request('POST', '/api/features', { bearer: jwt, session, body: aFeature() });
    expect(both.status).toBe(201);
    expect(both.json.properties.createdBy).toBe('bearer-user');
  });
});

describe.skipIf(MISSING)('CORS', () => {
  it('answers a preflight from a configured origin with the allowed methods and headers, credentials included', async () => {
    const res = await api.request('OPTIONS', '/api/features', {
      origin: APP_ORIGIN,
      headers: { 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, if-match' },
    });
    expect(res.status).toBe(204);
    expect(res.headers.get('access-control-allow-origin')).toBe(APP_ORIGIN);
    expect(res.headers.get('access-control-allow-credentials')).toBe('true');
    expect(res.headers.get('access-control-allow-methods')).toContain('POST');
    expect(res.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('if-match');
    expect(res.headers.get('vary')).toMatch(/Origin/);
  });


  it('allows PATCH in a preflight for an /ogcapi item, so a browser may send a JSON merge patch', async () => {
    const res = await api.request('OPTIONS', '/ogcapi/collections/features/items/some-id', {
      origin: APP_ORIGIN,
      headers: { 'access-control-request-method': 'PATCH', 'access-control-request-headers': 'content-type, if-match' },
    });
    expect(res.status).toBe(204);
    expect(res.headers.get('access-control-allow-origin')).toBe(APP_ORIGIN);
    const methods = (res.headers.get('access-control-allow-methods') ?? '').split(',').map((m) => m.trim());
    expect(methods).toContain('PATCH');
  });
  it('gives no CORS headers to another origin: its preflight is refused and its answers are not shared', async () => {
    const preflight = await api.request('OPTIONS', '/api/features', { origin: 'https://evil.example.net', headers: { 'access-control-request-method': 'POST' } });
    expect(preflight.status).toBe(403);
    expect(preflight.headers.get('access-control-allow-origin')).toBeNull();
    expect(preflight.headers.get('access-control-allow-methods')).toBeNull();
    const read = await api.request('GET', '/api/features?limit=1', { origin: 'https://evil.example.net' });
    expect(read.status).toBe(200);
    expect(read.headers.get('access-control-allow-origin')).toBeNull();
  });

  it('shares answers with a configured origin and exposes ETag and Location', async () => {
    const res = await api.request('GET', '/api/features?limit=1', { origin: APP_ORIGIN });
    expect(res.headers.get('access-control-allow-origin')).toBe(APP_ORIGIN);
    expect(res.headers.get('access-control-expose-headers')).toMatch(/ETag/);
    expect(res.headers.get('access-control-expose-headers')).toMatch(/Location/);
  });
});
