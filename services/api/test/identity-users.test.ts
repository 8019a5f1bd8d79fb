import { createServer } from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { listen } from '../../shared/http-server.js';
import { APP_ORIGIN, startIdentityApi, type IdentityApiHarness } from './identity-harness.js';
import { lacks, requirements } from '../../../test/helpers/requirements.js';

const MISSING = lacks('the API identity tests on the Kratos/Hydra doubles', requirements.contracts());

/**
 * GET /api/users and PUT /api/users/:id/role (admin only). A role change is made in Kratos
 * (metadata_public, through the admin API, its JSON Patch body checked against the spec) and in
 * users.users — both or neither.
 */

let db: TestDatabase;
let api: IdentityApiHarness;
let adminToken: string;

beforeAll(async () => {
  if (MISSING) return;
  db = await createTestDatabase();
  api = await startIdentityApi(db);
  adminToken = await api.jwt('admin', 'the-admin', { email: 'admin@example.org' });
});
afterAll(async () => {
  if (MISSING) return;
  await api?.close();
  await db?.close();
});
afterEach(() => {
  if (MISSING) return;
  api.failPatch = undefined;
  expect([...api.kratos.violations, ...api.hydra.violations]).toEqual([]);
});

async function mirroredRole(id: string): Promise<string | undefined> {
  const { rows } = await db.pool.query<{ role: string }>('SELECT role FROM users.users WHERE id = $1', [id]);
  return rows[0]?.role;
}

/** A user Kratos knows and the API has seen once (so users.users has a row). */
async function knownUser(role: 'guest' | 'contributor' | 'reviewer' | 'admin') {
  const signed = api.signedIn(role);
  expect((await api.request('GET', '/api/features?limit=1', { session: signed.session })).status).toBe(200);
  expect(await mirroredRole(signed.identity.id)).toBe(role);
  return signed;
}

describe.skipIf(MISSING)('GET /api/users', () => {
  it('lists the users the API knows, with e-mail, name and role, to an admin', async () => {
    const { identity } = await knownUser('reviewer');
    const res = await api.request('GET', '/api/users', { bearer: adminToken });
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.json.users).toEqual(
      expect.arrayContaining([expect.objectContaining({ id: identity.id, email: identity.email, name: identity.name, role: 'reviewer', firstSeenAt: expect.stringMatching(/Z$/) })]),
    );
  });

  it('filters by role and pages by id', async () => {
    await knownUser('contributor');
    await knownUser('contributor');
    await knownUser('contributor');
    const first = await api.request('GET', '/api/users?role=contributor&limit=2', { bearer: adminToken });
    expect(first.status).toBe(200);
    expect(first.json.users).toHaveLength(2);
    expect(first.json.users.every((u: { role: string }) => u.role === 'contributor')).toBe(true);
    const second = await api.request('GET', first.json.next, { bearer: adminToken });
    expect(second.status).toBe(200);
    expect(second.json.users[0].id > first.json.users[1].id).toBe(true);
  });

  it('is for admins only: anonymous 401, other roles 403, bad queries 400', async () => {
    expect((await api.request('GET', '/api/users')).status).toBe(401);
    for (const role of ['guest', 'contributor', 'reviewer'] as const) {
      const res = await api.request('GET', '/api/users', { bearer: await api.jwt(role, `not-admin-${role}`) });
      expect(res.status, role).toBe(403);
    }
    const { session } = api.signedIn('reviewer');
    expect((await api.request('GET', '/api/users', { session })).status).toBe(403);
    expect((await api.request('GET', '/api/users?role=emperor', { bearer: adminToken })).status).toBe(400);
    expect((await api.request('GET', '/api/users?limit=1&limit=2', { bearer: adminToken })).status).toBe(400);
  });
});

describe.skipIf(MISSING)('PUT /api/users/:id/role', () => {
  it('sets the role in Kratos metadata_public and in users.users; the user’s next request has it', async () => {
    const { identity, session } = await knownUser('contributor');
    const res = await api.request('PUT', `/api/users/${identity.id}/role`, { bearer: adminToken, body: { role: 'reviewer' } });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ id: identity.id, role: 'reviewer', email: identity.email });
    expect(api.kratos.identities.get(identity.id)!.role).toBe('reviewer');
    expect(await mirroredRole(identity.id)).toBe('reviewer');
    expect(api.patches.at(-1)).toEqual([{ op: 'add', path: '/metadata_public', value: { role: 'reviewer' } }]);
    // The session cache may hold the old role for SESSION_CACHE_SECONDS; after it the new one applies.
    api.clock.advance(16);
    expect((await api.request('GET', '/api/users', { session })).status).toBe(403);
    expect(await mirroredRole(identity.id)).toBe('reviewer');
  });

  it('works for an identity the API has never seen (the row is created from Kratos’ traits)', async () => {
    const identity = api.kratos.addIdentity({ email: 'fresh@example.org', name: 'Fresh', password: 'x' });
    const res = await api.request('PUT', `/api/users/${identity.id}/role`, { bearer: adminToken, body: { role: 'admin' } });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ id: identity.id, email: 'fresh@example.org', name: 'Fresh', role: 'admin' });
    expect(api.kratos.identities.get(identity.id)!.role).toBe('admin');
  });

  it('a session admin can change roles from the platform’s own origin', async () => {
    const { session } = api.signedIn('admin');
    const { identity } = await knownUser('guest');
    const res = await api.request('PUT', `/api/users/${identity.id}/role`, { session, origin: APP_ORIGIN, body: { role: 'contributor' } });
    expect(res.status).toBe(200);
    expect(await mirroredRole(identity.id)).toBe('contributor');
  });

  it('is for admins only and validates the body, before Kratos is asked', async () => {
    const { identity } = await knownUser('contributor');
    const patchesBefore = api.patches.length;
    expect((await api.request('PUT', `/api/users/${identity.id}/role`, { body: { role: 'admin' } })).status).toBe(401);
    const self = await api.request('PUT', `/api/users/${identity.id}/role`, { bearer: await api.jwt('reviewer', identity.id), body: { role: 'admin' } });
    expect(self.status).toBe(403);
    const bad = await api.request('PUT', `/api/users/${identity.id}/role`, { bearer: adminToken, body: { role: 'emperor' } });
    expect(bad.status).toBe(400);
    expect(bad.json.fields).toEqual([expect.objectContaining({ field: 'role' })]);
    expect((await api.request('PUT', `/api/users/${identity.id}/role`, { bearer: adminToken, body: { role: 'admin', extra: 1 } })).status).toBe(400);
    expect((await api.request('PUT', `/api/users/%20bad/role`, { bearer: adminToken, body: { role: 'admin' } })).status).toBe(400);
    expect(api.patches.length).toBe(patchesBefore);
    expect(await mirroredRole(identity.id)).toBe('contributor');
  });

  it('answers 404 for an identity Kratos does not know, and stores nothing', async () => {
    const res = await api.request('PUT', '/api/users/00000000-0000-4000-8000-000000000000/role', { bearer: adminToken, body: { role: 'admin' } });
    expect(res.status).toBe(404);
    expect(res.json.code).toBe('USER_NOT_FOUND');
    expect(await mirroredRole('00000000-0000-4000-8000-000000000000')).toBeUndefined();
  });

  it('when Kratos refuses the change: 502 naming Kratos, and users.users keeps the old role', async () => {
    const { identity } = await knownUser('contributor');
    api.failPatch = { status: 500 };
    const res = await api.request('PUT', `/api/users/${identity.id}/role`, { bearer: adminToken, body: { role: 'admin' } });
    expect(res.status).toBe(502);
    expect(res.json.detail).toMatch(/Kratos refused .*nothing was changed/);
    expect(await mirroredRole(identity.id)).toBe('contributor');
    expect(api.kratos.identities.get(identity.id)!.role).toBe('contributor');
  });

  it('when Kratos cannot be reached: 503, and users.users keeps the old role', async () => {
    const dead = createServer();
    const port = await listen(dead, 0, '127.0.0.1');
    await new Promise((resolve) => dead.close(resolve));
    const unreachable = await startIdentityApi(db, { kratosAdminUrl: `http://127.0.0.1:${port}` });
    try {
      const { identity, session } = unreachable.signedIn('contributor');
      await unreachable.request('GET', '/api/features?limit=1', { session });
      const res = await unreachable.request('PUT', `/api/users/${identity.id}/role`, { bearer: await unreachable.jwt('admin', 'the-admin'), body: { role: 'admin' } });
      expect(res.status).toBe(503);
      expect(res.json.detail).toMatch(/Kratos cannot be reached/);
      expect(await mirroredRole(identity.id)).toBe('contributor');
    } finally {
      await unreachable.close();
    }
  });

  it('when the database refuses after Kratos accepted, Kratos is set back: both keep the old role', async () => {
    // An address Kratos accepts but users.users cannot hold (over 320 characters): the row's write fails.
    const identity = api.kratos.addIdentity({ email: `${'x'.repeat(330)}@example.org`, name: 'Long', password: 'x', role: 'contributor' });
    const res = await api.request('PUT', `/api/users/${identity.id}/role`, { bearer: adminToken, body: { role: 'reviewer' } });
    expect(res.status).toBe(400);
    expect(api.patches.slice(-2)).toEqual([
      [{ op: 'add', path: '/metadata_public', value: { role: 'reviewer' } }],
      [{ op: 'add', path: '/metadata_public', value: { role: 'contributor' } }],
    ]);
    expect(api.kratos.identities.get(identity.id)!.role).toBe('contributor');
    expect(await mirroredRole(identity.id)).toBeUndefined();
  });

  it('if Kratos cannot be set back either, the answer says the two disagree (500 ROLE_OUT_OF_SYNC), never silently', async () => {
    const identity = api.kratos.addIdentity({ email: `${'y'.repeat(330)}@example.org`, name: 'Long Two', password: 'x', role: 'contributor' });
    const session = api.kratos.createSession(identity.id).token;
    await api.request('GET', '/api/features?limit=1', { session }); // recorded (without the over-long address)
    expect(await mirroredRole(identity.id)).toBe('contributor');
    // The change goes through; the undo (the next patch) fails.
    let calls = 0;
    api.kratos.admin.on('patchIdentity', (request) => {
      calls++;
      if (calls === 2) return { status: 500, body: { error: { code: 500, message: 'down' } } };
      const body = request.body as Array<{ value: { role?: string } }>;
      api.patches.push(body);
      const stored = api.kratos.identities.get(request.pathParams.id as string)!;
      stored.role = body[0]!.value.role!;
      return { status: 200, body: api.kratos.identityJson(stored) };
    });
    const res = await api.request('PUT', `/api/users/${identity.id}/role`, { bearer: adminToken, body: { role: 'admin' } });
    expect(res.status).toBe(500);
    expect(res.json.code).toBe('ROLE_OUT_OF_SYNC');
    expect(res.json.detail).toMatch(/set to admin in Kratos but could not be stored/);
    expect(calls).toBe(2);
    expect(api.kratos.identities.get(identity.id)!.role).toBe('admin');
    expect(await mirroredRole(identity.id)).toBe('contributor');
    // Reconciliation: the user's next session sign-in copies Kratos' role into users.users.
    api.clock.advance(16);
    await api.request('GET', '/api/features?limit=1', { session });
    expect(await mirroredRole(identity.id)).toBe('admin');
  });
});

describe.skipIf(MISSING)('OpenAPI', () => {
  it('documents /api/users, the role change and the session cookie scheme', async () => {
    const res = await api.request('GET', '/api/openapi.json');
    expect(res.status).toBe(200);
    expect(Object.keys(res.json.paths)).toEqual(expect.arrayContaining(['/api/users', '/api/users/{id}/role']));
    expect(Object.keys(res.json.paths['/api/users/{id}/role'].put.responses)).toEqual(expect.arrayContaining(['200', '400', '401', '403', '404', '502', '503']));
    expect(res.json.components.securitySchemes.session).toMatchObject({ type: 'apiKey', in: 'cookie', name: 'ory_kratos_session' });
  });
});
