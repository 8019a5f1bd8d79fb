import { execFile } from 'node:child_process';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GeoServerClient } from '../geoserver/client.js';
import { provisionGeoServer } from '../geoserver/provision.js';
import { KATEGORIE_STYLES, revisionOf } from '../geoserver/styles.js';
import { provisionOptions, startFakeGeoServer, type FakeGeoServer } from '../geoserver/testing/fake-geoserver.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

const MISSING = lacks('the GeoServer provisioning tests (the fake checks requests against the REST specification)', requirements.contracts());

/**
 * Provisioning against a fake GeoServer that checks every request against the vendored REST
 * specification (testing/rest-spec.ts) and keeps state like GeoServer does.
 */

const ADMIN = { user: 'admin', password: 'test-admin-password' };
const WRITES = new Set(['POST', 'PUT', 'DELETE']);

let geoserver: FakeGeoServer;
let client: GeoServerClient;

beforeEach(async () => {
  if (MISSING) return;
  geoserver = await startFakeGeoServer(ADMIN);
  client = new GeoServerClient({ baseUrl: geoserver.url, ...ADMIN });
});

afterEach(async () => {
  if (MISSING) return;
  await geoserver.close();
});

const writesSince = (index: number) => geoserver.requests.slice(index).filter((r) => WRITES.has(r.method)).map((r) => `${r.method} ${r.path.replace('/geoserver/rest', '')}`);

describe.skipIf(MISSING)('provisioning an empty GeoServer', () => {
  it('creates the workspace, the PostGIS store with primary keys exposed and the feature layer', async () => {
    const report = await provisionGeoServer(client, provisionOptions());
    expect(geoserver.violations).toEqual([]);
    expect(geoserver.state.workspaces.has('geodata')).toBe(true);
    const store = geoserver.state.datastores.get('geodata/features-db');
    expect(store?.params).toMatchObject({ dbtype: 'postgis', host: 'features-db', schema: 'features', user: 'geoserver', 'Expose primary keys': 'true' });
    expect(store?.password).toBe('db-password-1');
    expect(geoserver.state.featureTypes.get('geodata/features-db/features')).toMatchObject({ nativeName: 'features', srs: 'EPSG:4326' });
    expect(report.changes).toContain('published feature type geodata:features');
  });

  it('uploads one SLD style per kategorie and makes the layer offer them, with a combined default', async () => {
    await provisionGeoServer(client, provisionOptions());
    for (const { kategorie } of KATEGORIE_STYLES) {
      const sld = geoserver.state.styles.get(`geodata/features-${kategorie}`);
      expect(sld, kategorie).toContain(`<ogc:Literal>${kategorie}</ogc:Literal>`);
    }
    expect(geoserver.state.layers.get('geodata:features')).toEqual({
      defaultStyle: 'geodata:features-default',
      styles: KATEGORIE_STYLES.map((s) => `geodata:features-${s.kategorie}`).sort(),
    });
  });

  it('publishes the approved-only view for anonymous readers, with the same styles', async () => {
    const report = await provisionGeoServer(client, provisionOptions());
    expect(geoserver.violations).toEqual([]);
    expect(geoserver.state.featureTypes.get('geodata/features-db/public_features')).toMatchObject({ nativeName: 'public_features', srs: 'EPSG:4326' });
    expect(geoserver.state.layers.get('geodata:public_features')).toEqual(geoserver.state.layers.get('geodata:features'));
    expect(report.changes).toContain('published feature type geodata:public_features');
  });

  it('makes WFS transactional, keeps WMS 1.3.0; anonymous users read only the public view, the table is for authenticated users', async () => {
    await provisionGeoServer(client, provisionOptions());
    expect(geoserver.state.wfs.serviceLevel).toBe('TRANSACTIONAL');
    expect(geoserver.state.wms).toEqual({ enabled: true, versions: ['1.1.1', '1.3.0'] });
    // The table holds drafts, telefon and the authors: never readable by '*'.
    expect(geoserver.state.layerRules).toMatchObject({
      'geodata.public_features.r': '*',
      'geodata.features.r': 'ROLE_AUTHENTICATED',
      'geodata.features.w': 'ROLE_AUTHENTICATED',
      '*.*.w': 'GROUP_ADMIN,ADMIN',
    });
    expect(geoserver.state.serviceRules).toEqual({ '*.*': '*', 'wfs.Transaction': 'ROLE_AUTHENTICATED' });
  });
});

describe.skipIf(MISSING)('running provisioning twice', () => {
  it('the second run sends no write request and reports no change', async () => {
    const first = await provisionGeoServer(client, provisionOptions());
    expect(first.changes.length).toBeGreaterThanOrEqual(10);
    const mark = geoserver.requests.length;
    const second = await provisionGeoServer(client, provisionOptions());
    expect(second.changes).toEqual([]);
    expect(writesSince(mark)).toEqual([]);
    expect(geoserver.requests.length - mark).toBeGreaterThan(5); // it did look
    expect(geoserver.violations).toEqual([]);
  });

  it('repairs drift, and only the drift', async () => {
    await provisionGeoServer(client, provisionOptions());
    geoserver.state.wfs.serviceLevel = 'BASIC';
    geoserver.state.wms.versions = ['1.1.1'];
    delete geoserver.state.layerRules['geodata.features.w'];
    geoserver.state.serviceRules['wfs.Transaction'] = '*';
    geoserver.state.styles.set('geodata/features-denkmal', '<StyledLayerDescriptor version="1.0.0"/>');
    const mark = geoserver.requests.length;
    const report = await provisionGeoServer(client, provisionOptions());
    expect(writesSince(mark).sort()).toEqual([
      'POST /security/acl/layers',
      'PUT /security/acl/services',
      'PUT /services/wfs/settings',
      'PUT /services/wms/settings',
      'PUT /workspaces/geodata/styles/features-denkmal',
    ]);
    expect(report.changes).toHaveLength(5);
    expect(geoserver.state.wms.versions).toContain('1.3.0');
    expect(revisionOf(geoserver.state.styles.get('geodata/features-denkmal') ?? '')).toBeDefined();
    expect(geoserver.violations).toEqual([]);
  });

  it('a rotated database password updates the datastore and nothing else', async () => {
    await provisionGeoServer(client, provisionOptions());
    const mark = geoserver.requests.length;
    const report = await provisionGeoServer(client, provisionOptions({ database: { ...provisionOptions().database, password: 'db-password-2' } }));
    expect(writesSince(mark)).toEqual(['PUT /workspaces/geodata/datastores/features-db']);
    expect(report.changes).toEqual(['updated datastore features-db (credentials)']);
    expect(geoserver.state.datastores.get('geodata/features-db')?.password).toBe('db-password-2');
  });
});

describe.skipIf(MISSING)('readiness and errors', () => {
  it('waits while GeoServer is still starting', async () => {
    geoserver.unavailableFor(3);
    const report = await provisionGeoServer(client, provisionOptions());
    expect(geoserver.requests.slice(0, 3).map((r) => r.status)).toEqual([503, 503, 503]);
    expect(report.changes.length).toBeGreaterThan(0);
  });

  it('fails fast on wrong credentials, without the password in the message', async () => {
    const wrong = new GeoServerClient({ baseUrl: geoserver.url, user: 'admin', password: 'not-the-password' });
    const started = Date.now();
    const error = await provisionGeoServer(wrong, provisionOptions()).then(
      () => new Error('provisioning succeeded with wrong credentials'),
      (e: unknown) => e as Error,
    );
    expect(error.message).toContain('401');
    expect(error.message).not.toContain('not-the-password');
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('gives up with a clear message when GeoServer never answers', async () => {
    const unreachable = new GeoServerClient({ baseUrl: 'http://127.0.0.1:9/geoserver', ...ADMIN, timeoutMs: 200 });
    await expect(provisionGeoServer(unreachable, provisionOptions({ readyTimeoutMs: 300 }))).rejects.toThrow(/not ready in time/);
  });
});

describe.skipIf(MISSING)('the fake refuses what the REST specification does not allow', () => {
  const send = (method: string, path: string, body?: string, contentType = 'application/json') =>
    fetch(`${geoserver.url}/rest${path}`, {
      method,
      body,
      headers: { authorization: `Basic ${Buffer.from(`${ADMIN.user}:${ADMIN.password}`).toString('base64')}`, ...(body ? { 'content-type': contentType } : {}) },
    });

  it.each([
    ['an undocumented path', 'GET', '/workspaces/geodata/nonsense/x', undefined, undefined, /no such path/],
    ['a method documented only as 405', 'PUT', '/workspaces', '{"workspace":{"name":"x"}}', undefined, /method not documented/],
    ['an undeclared query parameter', 'GET', '/services/wfs/settings?verbose=true', undefined, undefined, /undeclared query parameter verbose/],
    ['a non-boolean boolean', 'GET', '/workspaces/x?quietOnNotFound=yes', undefined, undefined, /not a boolean/],
    ['a member the schema does not declare', 'PUT', '/services/wfs/settings', '{"wfs":{"serviceLevl":"TRANSACTIONAL"}}', undefined, /does not declare: serviceLevl/],
    ['a value outside the enum', 'PUT', '/services/wfs/settings', '{"wfs":{"serviceLevel":"FULL"}}', undefined, /must be one of/],
    ['a missing required member', 'POST', '/workspaces', '{"workspace":{}}', undefined, /misses required member name/],
    ['a content type the operation does not consume', 'POST', '/workspaces', 'name=x', 'application/x-www-form-urlencoded', /not consumed/],
    ['a malformed layer ACL rule', 'POST', '/security/acl/layers', '{"geodata.features.x":"*"}', undefined, /documented form/],
    ['a malformed SLD', 'POST', '/workspaces/geodata/styles?name=s', '<StyledLayerDescriptor>', 'application/vnd.ogc.sld+xml', /malformed XML/],
  ])('%s', async (_name, method, path, body, contentType, reason) => {
    const response = await send(method, path, body, contentType);
    expect(response.status).toBe(400);
    expect(await response.text()).toMatch(reason);
    expect(geoserver.violations.at(-1)).toMatch(reason);
  });
});

describe.skipIf(MISSING)('npm run geoserver:provision', () => {
  // Asynchronous on purpose: the fake GeoServer answers from this process's event loop.
  const run = (env: Record<string, string>) =>
    new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        ['--import', 'tsx', 'infra/geoserver/cli.ts'],
        { cwd: new URL('../..', import.meta.url).pathname, env: { PATH: process.env.PATH ?? '', ...env }, encoding: 'utf8', timeout: 20_000 },
        (error, stdout, stderr) => resolve({ status: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr }),
      );
    });
  const env = () => ({ GEOSERVER_URL: geoserver.url, GEOSERVER_ADMIN_PASSWORD: ADMIN.password, GEOSERVER_DB_PASSWORD: 'db-password-1' });

  it('provisions, and says "no changes" the second time', async () => {
    const first = await run(env());
    expect(first.status, first.stderr).toBe(0);
    expect(first.stdout).toContain('geoserver: created workspace geodata');
    const second = await run(env());
    expect(second.status, second.stderr).toBe(0);
    expect(second.stdout.trim()).toBe('geoserver: no changes');
    expect(geoserver.violations).toEqual([]);
  });

  it('exits 2 naming the missing variable', async () => {
    const result = await run({ GEOSERVER_URL: geoserver.url, GEOSERVER_DB_PASSWORD: 'x' });
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('GEOSERVER_ADMIN_PASSWORD');
  });
});
