import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { issueOpaqueToken } from '../../test/doubles/ory/code-flow.js';
import { HydraDouble } from '../../services/shared/testing/ory/hydra-double.js';
import { KratosDouble } from '../../services/shared/testing/ory/kratos-double.js';
import { createTestDatabase, type TestDatabase } from '../../test/helpers/db.js';
import { freePort } from '../../services/shared/testing/ports.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';
import { GEOSERVER_IDENTITY, proxyRoutes } from '../routes.js';
import { GeoServerClient } from '../geoserver/client.js';
import { provisionGeoServer, SESSION_CLOSEUP_SQL, SESSION_SQL_JAVA_OPTIONS, SESSION_STARTUP_SQL } from '../geoserver/provision.js';
import { ensureHeaderAuthentication, OWS_CHAIN_NAME } from '../geoserver/security.js';
import { FakeWfs } from '../geoserver/testing/fake-wfs.js';
import { startFakeGeoServer, type FakeGeoServer } from '../geoserver/testing/fake-geoserver.js';
import { startApiProcess, type ApiProcess } from '../testing/api-process.js';
import { CaddyRunner, EXAMPLE_DOMAINS } from '../testing/caddy-runner.js';

/**
 * WFS-T writes are tied to platform users, end to end on one machine: the real Caddy with the
 * rendered GeoServer route (forward_auth to the API), the API as a real process with the environment
 * the stack gives it (Kratos and Hydra as their contract-checked doubles), the
 * GeoServer double provisioned by the real provisioning code (header authentication in its data
 * directory, the store's session SQL), and a real PostGIS where the history trigger (migration 013)
 * names the writer. GeoServer's double connects as the database role geoserver, as GeoServer does.
 */

const MISSING = lacks(
  'the WFS-T identity tests',
  requirements.caddy(),
  requirements.contracts(),
  requirements.postgres('a PostgreSQL + PostGIS server: the history tells database roles apart'),
);

const GEO = EXAMPLE_DOMAINS.geo;
const GEOSERVER_DB_PASSWORD = 'wfs-identity-test-geoserver';
const ADMIN = { user: 'admin', password: 'geoserver-admin-secret' };

let db: TestDatabase;
let kratos: KratosDouble;
let hydra: HydraDouble;
let api: ApiProcess | undefined;
let geoserver: FakeGeoServer;
let caddy: CaddyRunner | undefined;
let proxyPort: number;
let dir: string;

const transaction = (name: string) => `<wfs:Transaction service="WFS" version="1.1.0" xmlns:wfs="http://www.opengis.net/wfs" xmlns:gml="http://www.opengis.net/gml" xmlns:geodata="https://geo.example.org/features">
  <wfs:Insert><geodata:features><geodata:name>${name}</geodata:name><geodata:kategorie>denkmal</geodata:kategorie>
  <geodata:geom><gml:Point srsName="EPSG:4326"><gml:pos>13.4 52.5</gml:pos></gml:Point></geodata:geom></geodata:features></wfs:Insert>
</wfs:Transaction>`;

/** node:http, not fetch: fetch drops the Host header. */
function post(path: string, body: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string; headers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: proxyPort, path, method: 'POST', headers: { host: GEO, 'content-type': 'text/xml', ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text, headers: res.headers }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const cookie = (session: string) => ({ cookie: `ory_kratos_session=${session}` });

/** An identity in Kratos with a live session (the role in metadata_public, as the stack's Kratos keeps it). */
function signedIn(role: string | undefined, aal: 'aal1' | 'aal2' = 'aal1'): { identity: { id: string }; session: string } {
  const suffix = randomUUID().slice(0, 8);
  const identity = kratos.addIdentity({ email: `u-${suffix}@example.org`, name: `User ${suffix}`, password: 'irrelevant', ...(role ? { role } : {}) });
  return { identity, session: kratos.createSession(identity.id, { aal }).token };
}


async function historyOf(name: string): Promise<{ actor: string; createdBy: string }[]> {
  const { rows } = await db.pool.query<{ actor: string; createdBy: string }>(
    `SELECT h.actor, f.created_by AS "createdBy" FROM history.feature_versions h JOIN features.features f ON f.id = h.feature_id WHERE f.name = $1 ORDER BY h.id`,
    [name],
  );
  return rows;
}

beforeAll(async () => {
  if (MISSING) return;
  dir = mkdtempSync(join(tmpdir(), 'wfs-identity-'));
  db = await createTestDatabase();
  // The database role GeoServer's store connects as (infra/jobs/features-db-roles.sh grants the same).
  await db.pool.query(`DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'geoserver') THEN CREATE ROLE geoserver LOGIN; END IF; END $$`);
  await db.pool.query(`ALTER ROLE geoserver WITH LOGIN PASSWORD '${GEOSERVER_DB_PASSWORD}'`);
  const dbName = new URL(db.url).pathname.slice(1);
  await db.pool.query(`GRANT CONNECT ON DATABASE ${pg.escapeIdentifier(dbName)} TO geoserver`);
  await db.pool.query('GRANT USAGE ON SCHEMA features, history TO geoserver');
  await db.pool.query('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA features, history TO geoserver');
  await db.pool.query('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA features, history TO geoserver');

  kratos = await new KratosDouble({ loginUiUrl: 'http://auth.invalid/login', allowedReturnUrls: [] }).start();
  hydra = await new HydraDouble({ loginUrl: 'http://auth.invalid/login', consentUrl: 'http://auth.invalid/consent', logoutUrl: 'http://auth.invalid/logout', postLogoutRedirect: 'http://auth.invalid/' }).start();
  const apiPort = await freePort();
  // The API as the stack runs it (infra/stack/features.ts), from the sources.
  api = await startApiProcess(['--import', 'tsx', 'services/api/src/server.ts'], {
    cwd: join(import.meta.dirname, '..', '..'),
    env: {
      PATH: process.env.PATH ?? '',
      NODE_ENV: 'production',
      PORT: String(apiPort),
      DATABASE_URL: db.url,
      AUTH_AUDIENCE: 'geodata-api',
      HYDRA_ADMIN_URL: hydra.admin.url,
      KRATOS_PUBLIC_URL: kratos.public.url,
      KRATOS_ADMIN_URL: kratos.admin.url,
      CORS_ORIGINS: 'https://geo.example.org,https://app.example.org',
      DATA_DIR: join(dir, 'api-data'),
      LOG_LEVEL: 'warn',
    },
    port: apiPort,
  });
  const dbUrl = new URL(db.url);
  geoserver = await startFakeGeoServer({ ...ADMIN, wfs: { dataDir: join(dir, 'geoserver_data'), jvmOptions: SESSION_SQL_JAVA_OPTIONS.join(' ') } });
  await provisionGeoServer(new GeoServerClient({ baseUrl: geoserver.url, ...ADMIN }), {
    workspace: 'geodata',
    namespaceUri: 'https://geo.example.org/features',
    datastore: 'features-db',
    database: { host: dbUrl.hostname, port: Number(dbUrl.port || 5432), name: dbName, schema: 'features', user: 'geoserver', password: GEOSERVER_DB_PASSWORD },
    layer: 'features',
    publicLayer: 'public_features',
    geometryProperty: 'geom',
    title: 'Features',
    readRoles: '*',
    writeRoles: 'ROLE_CONTRIBUTOR,ROLE_REVIEWER,ROLE_ADMIN',
    dataDir: join(dir, 'geoserver_data'),
    headerAuthentication: { userHeader: GEOSERVER_IDENTITY.userHeader, roleHeader: GEOSERVER_IDENTITY.roleHeader },
    readyPollMs: 50,
  });

  // The GeoServer route exactly as the stack renders it, its upstreams on loopback.
  const route = proxyRoutes(EXAMPLE_DOMAINS, [], { selfServiceUi: false }).find((r) => r.domain === GEO)!;
  const apiAddress = new URL(api.url).host;
  const geoRoute = { ...route, upstream: new URL(geoserver.url).host, forwardAuth: { ...route.forwardAuth!, upstream: apiAddress } };
  caddy = new CaddyRunner();
  proxyPort = await caddy.start(['10.0.0.0/8'], [geoRoute]);
}, 120_000);

afterAll(async () => {
  if (MISSING) return;
  caddy?.stopAll();
  await geoserver?.close();
  await api?.stop();
  await Promise.all([kratos?.close(), hydra?.close()]);
  await db?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(MISSING)('a WFS-T write through the proxy', () => {
  it('by a signed-in contributor is recorded in the history under that user, not the role geoserver', async () => {
    const { identity, session } = signedIn('contributor');
    const res = await post('/geoserver/wfs', transaction('WFS-T by a contributor'), cookie(session));
    expect(res.status, res.body).toBe(200);
    expect(res.body).toContain('<wfs:totalInserted>1</wfs:totalInserted>');
    expect(await historyOf('WFS-T by a contributor')).toEqual([{ actor: identity.id, createdBy: identity.id }]);
    expect(geoserver.wfs!.sessionSql).toContain(`SET geodata.gs_user = u_${identity.id.replace(/-/g, '')}`);
    expect(geoserver.wfs!.sessionSql.at(-1)).toBe(SESSION_CLOSEUP_SQL);
    expect(geoserver.violations, 'REST requests off the vendored contract').toEqual([]);
  });

  it('works on the per-workspace endpoint and /ows too, with a bearer token as well as the cookie', async () => {
    const { identity, session } = signedIn('reviewer', 'aal2');
    expect((await post('/geoserver/geodata/wfs', transaction('WFS-T on the workspace'), cookie(session))).status).toBe(200);
    const token = await issueOpaqueToken(hydra, identity.id, { role: 'reviewer', acr: 'aal2', amr: ['password', 'totp'] }, ['geodata-api']);
    expect((await post('/geoserver/ows', transaction('WFS-T with a token'), { authorization: `Bearer ${token}` })).status).toBe(200);
    expect((await historyOf('WFS-T on the workspace')).map((h) => h.actor)).toEqual([identity.id]);
    expect((await historyOf('WFS-T with a token')).map((h) => h.actor)).toEqual([identity.id]);
  });

  it('anonymous is refused with 401 before GeoServer sees it, even with forged identity headers', async () => {
    const before = geoserver.requests.length;
    const forged = { 'X-Geodata-User': 'u_00000000000000000000000000000001', 'X-Geodata-Role': 'ROLE_ADMIN' };
    const res = await post('/geoserver/wfs', transaction('WFS-T anonymous'), forged);
    expect(res.status).toBe(401);
    expect(geoserver.requests.length).toBe(before);
    expect(await historyOf('WFS-T anonymous')).toEqual([]);
  });

  it('a reviewer or admin without a second factor is refused with 403 before GeoServer sees it (a transaction may delete; AUTH_AAL2_ROLES)', async () => {
    const before = geoserver.requests.length;
    for (const role of ['reviewer', 'admin']) {
      const res = await post('/geoserver/wfs', transaction(`WFS-T ${role} aal1`), cookie(signedIn(role).session));
      expect(res.status).toBe(403);
      expect(await historyOf(`WFS-T ${role} aal1`)).toEqual([]);
    }
    expect(geoserver.requests.length).toBe(before);
  });

  it('a guest (signed in, no role) is refused with 403', async () => {
    const { session } = signedIn(undefined);
    expect((await post('/geoserver/wfs', transaction('WFS-T by a guest'), cookie(session))).status).toBe(403);
    expect(await historyOf('WFS-T by a guest')).toEqual([]);
  });

  it('a contributor cannot write under another user\'s name: the proxy replaces the forged header', async () => {
    const { identity, session } = signedIn('contributor');
    const victim = signedIn('admin').identity;
    const forged = { 'X-Geodata-User': `u_${victim.id.replace(/-/g, '')}`, 'X-Geodata-Role': 'ROLE_ADMIN', ...cookie(session) };
    expect((await post('/geoserver/wfs', transaction('WFS-T forged name'), forged)).status).toBe(200);
    expect((await historyOf('WFS-T forged name')).map((h) => h.actor)).toEqual([identity.id]);
  });

  it('a session cookie sent from a foreign page is refused (the write is a change)', async () => {
    const { session } = signedIn('contributor');
    const res = await post('/geoserver/wfs', transaction('WFS-T cross-site'), { ...cookie(session), origin: 'https://evil.example.net' });
    expect(res.status).toBe(403);
    expect(await historyOf('WFS-T cross-site')).toEqual([]);
  });
});

describe.skipIf(MISSING)('the history trigger (migration 013)', () => {
  const asGeoServer = async <T>(work: (client: pg.Client) => Promise<T>): Promise<T> => {
    const url = new URL(db.url);
    url.username = 'geoserver';
    url.password = GEOSERVER_DB_PASSWORD;
    const client = new pg.Client({ connectionString: url.toString() });
    await client.connect();
    try {
      return await work(client);
    } finally {
      await client.end();
    }
  };
  const insert = "INSERT INTO features.features (name, kategorie, geom) VALUES ($1, 'denkmal', ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326))";

  it('names the role geoserver for a GeoServer session without a user, or with one not in the proxy\'s shape', async () => {
    await asGeoServer(async (c) => {
      await c.query(insert, ['no gs user']);
      await c.query("SELECT set_config('geodata.gs_user', $1, false)", ["u_1'; DROP TABLE features.features; --"]);
      await c.query(insert, ['malformed gs user']);
      await c.query("SELECT set_config('geodata.gs_user', 'anonymous', false)");
      await c.query(insert, ['anonymous gs user']);
    });
    for (const name of ['no gs user', 'malformed gs user', 'anonymous gs user']) expect((await historyOf(name)).map((h) => h.actor), name).toEqual(['geoserver']);
  });

  it('ignores app.actor in a GeoServer session, and geodata.gs_user in any other role\'s session', async () => {
    await asGeoServer(async (c) => {
      await c.query("SELECT set_config('app.actor', 'someone-else', false)");
      await c.query(insert, ['geoserver claims app.actor']);
    });
    const client = await db.pool.connect();
    try {
      await client.query("SELECT set_config('geodata.gs_user', 'u_0123456789abcdef0123456789abcdef', false)");
      await client.query(insert, ['api borrows gs_user']);
      await client.query("SELECT set_config('geodata.gs_user', '', false)");
    } finally {
      client.release();
    }
    expect((await historyOf('geoserver claims app.actor')).map((h) => h.actor)).toEqual(['geoserver']);
    const owner = (await db.pool.query<{ u: string }>('SELECT session_user AS u')).rows[0]!.u;
    expect((await historyOf('api borrows gs_user')).map((h) => h.actor)).toEqual([owner]);
  });
});

describe('the store\'s session SQL under GeoTools\' restrictions', () => {
  const wfs = (jvmOptions?: string) => new FakeWfs({ dataDir: mkdtempSync(join(tmpdir(), 'wfs-sql-')), admin: ADMIN, ...(jvmOptions ? { jvmOptions } : {}) });

  it('is accepted with the JVM options the stack gives GeoServer, and refused without them', () => {
    const allowed = wfs(SESSION_SQL_JAVA_OPTIONS.join(' '));
    expect(allowed.sessionCommand(SESSION_STARTUP_SQL, 'startup', 'u_0123456789abcdef0123456789abcdef')).toBe('SET geodata.gs_user = u_0123456789abcdef0123456789abcdef');
    expect(allowed.sessionCommand(SESSION_STARTUP_SQL, 'startup', null)).toBe('SET geodata.gs_user = anonymous');
    expect(allowed.sessionCommand(SESSION_CLOSEUP_SQL, 'closeup', 'u_0123456789abcdef0123456789abcdef')).toBe('RESET geodata.gs_user');
    expect(() => wfs().sessionCommand(SESSION_STARTUP_SQL, 'startup', 'u_0')).toThrow(/does not match allowed pattern/);
  });

  it('never lets a user name carry SQL: a value that is not an identifier is refused', () => {
    expect(() => wfs(SESSION_SQL_JAVA_OPTIONS.join(' ')).sessionCommand(SESSION_STARTUP_SQL, 'startup', "x; DROP TABLE features.features")).toThrow(/does not match allowed pattern/);
  });
});

describe('GeoServer\'s header authentication in its data directory', () => {
  const headers = { userHeader: GEOSERVER_IDENTITY.userHeader, roleHeader: GEOSERVER_IDENTITY.roleHeader };

  it('is written once: the filter, and its chain first for the OWS services only; a second run changes nothing', () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'gs-data-'));
    const wfs = new FakeWfs({ dataDir, admin: ADMIN }); // initialises security/config.xml as GeoServer does
    expect(wfs.authenticate('/wfs', { 'x-geodata-user': 'u_1', 'x-geodata-role': 'ROLE_ADMIN' }).user).toBeNull();
    expect(ensureHeaderAuthentication(dataDir, headers)).toHaveLength(2);
    expect(ensureHeaderAuthentication(dataDir, headers)).toEqual([]);
    wfs.reload();
    for (const path of ['/wfs', '/ows', '/geodata/wfs', '/geodata/features/ows', '/wms']) expect(wfs.chainFor(path)?.name, path).toBe(OWS_CHAIN_NAME);
    for (const path of ['/rest/workspaces', '/web/', '/gwc/rest/layers']) expect(wfs.chainFor(path)?.name, path).not.toBe(OWS_CHAIN_NAME);
    expect(wfs.authenticate('/wfs', { 'x-geodata-user': 'u_1', 'x-geodata-role': 'ROLE_CONTRIBUTOR' })).toEqual({ user: 'u_1', roles: ['ROLE_CONTRIBUTOR', 'ROLE_AUTHENTICATED'] });
    // The REST API never takes a user from the headers: only GeoServer's own accounts.
    expect(wfs.authenticate('/rest/workspaces', { 'x-geodata-user': 'u_1', 'x-geodata-role': 'ROLE_ADMINISTRATOR' }).user).toBeNull();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('refuses a data directory GeoServer has not initialised', () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'gs-empty-'));
    expect(() => ensureHeaderAuthentication(dataDir, headers)).toThrow(/has not initialised its data directory/);
    rmSync(dataDir, { recursive: true, force: true });
  });
});
