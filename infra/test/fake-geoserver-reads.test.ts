import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../test/helpers/db.js';
import { initialState, startFakeGeoServer, type FakeGeoServer } from '../geoserver/testing/fake-geoserver.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

/**
 * The GeoServer double's reads, which the stack rehearsal's step 5c relies on: anonymous WFS
 * GetFeature (GeoJSON) and WMS GetMap (SVG, one shape per feature) from the layer's view or table on a
 * real PostGIS, through the store's connection; a layer the caller may not read hidden as in
 * GeoServer's catalog mode HIDE; WMS 1.3.0's latitude-first EPSG:4326 box; formats it does not draw refused.
 */
const MISSING = lacks(
  "the GeoServer double's reads",
  requirements.postgres('a PostgreSQL + PostGIS server'),
  // The double checks every request against GeoServer's REST specification, one of the pinned contracts.
  requirements.contracts(),
);

const ADMIN = { user: 'admin', password: 'geoserver-admin-reads' };
let db: TestDatabase;
let geoserver: FakeGeoServer;
let dataDir: string;
const ids: Record<'approved' | 'draft', string> = { approved: '', draft: '' };

beforeAll(async () => {
  if (MISSING) return;
  db = await createTestDatabase();
  const insert = `INSERT INTO features.features (name, kategorie, geom, created_by) VALUES ($1, 'denkmal', ST_SetSRID(ST_MakePoint($2, $3), 4326), 'user-1') RETURNING id`;
  ids.approved = (await db.pool.query<{ id: string }>(insert, ['Approved stone', 13.4, 52.5])).rows[0]!.id;
  ids.draft = (await db.pool.query<{ id: string }>(insert, ['Draft stone', 13.4005, 52.5005])).rows[0]!.id;
  await db.pool.query("UPDATE features.features SET status = 'approved' WHERE id = $1", [ids.approved]);
  const url = new URL(db.url);
  // The state the provisioning job leaves: one store, the table and the view published, the view readable by everyone.
  const state = initialState();
  state.workspaces.add('geodata');
  state.datastores.set('geodata/features', {
    name: 'features',
    enabled: true,
    params: { host: url.hostname, port: url.port || '5432', database: url.pathname.slice(1), user: decodeURIComponent(url.username), schema: 'features' },
    password: decodeURIComponent(url.password),
  });
  state.featureTypes.set('geodata/features/features', { name: 'features', nativeName: 'features', title: 'Features', srs: 'EPSG:4326' });
  state.featureTypes.set('geodata/features/public_features', { name: 'public_features', nativeName: 'public_features', title: 'Features (approved)', srs: 'EPSG:4326' });
  Object.assign(state.layerRules, { 'geodata.public_features.r': '*', 'geodata.features.r': 'ROLE_ADMINISTRATOR' });
  dataDir = mkdtempSync(join(tmpdir(), 'fake-geoserver-reads-'));
  geoserver = await startFakeGeoServer({ ...ADMIN, state, wfs: { dataDir } });
}, 120_000);

afterAll(async () => {
  await geoserver?.close();
  await db?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

const get = (path: string, headers: Record<string, string> = {}) => fetch(`${geoserver.url}/${path}`, { headers });
const getFeature = (layer: string, extra = '', headers: Record<string, string> = {}) =>
  get(`wfs?SERVICE=WFS&version=2.0.0&Request=GetFeature&typeNames=${layer}&outputFormat=application/json${extra}`, headers);
const admin = { authorization: `Basic ${Buffer.from(`${ADMIN.user}:${ADMIN.password}`).toString('base64')}` };
const shapes = (svg: string) => (svg.match(/<(circle|path)\b/g) ?? []).length;

describe.skipIf(MISSING)("the GeoServer double's reads (WFS GetFeature, WMS GetMap)", () => {
  it('answers an anonymous GetFeature of the public layer with the approved features only, as GeoJSON', async () => {
    const response = await getFeature('geodata:public_features');
    expect(response.status).toBe(200);
    const collection = (await response.json()) as { type: string; numberMatched: number; features: { id: string; geometry: { type: string; coordinates: number[] }; properties: Record<string, unknown> }[] };
    expect(collection.type).toBe('FeatureCollection');
    expect(collection.features.map((f) => f.properties.id)).toEqual([ids.approved]);
    expect(collection.features[0]).toMatchObject({ id: `public_features.${ids.approved}`, geometry: { type: 'Point', coordinates: [13.4, 52.5] }, properties: { name: 'Approved stone' } });
    expect(collection.features[0]!.properties).not.toHaveProperty('geom');
    expect(collection.features[0]!.properties).not.toHaveProperty('created_by');
  });

  it("hides the editors' layer from anonymous readers (unknown, as in catalog mode HIDE) and shows it to a role its read rule names", async () => {
    const anonymous = await getFeature('geodata:features');
    expect(anonymous.status).toBe(400);
    expect(await anonymous.text()).toContain('Feature type geodata:features unknown');
    const map = await get('wms?service=WMS&version=1.3.0&request=GetMap&layers=geodata:features&crs=EPSG:4326&bbox=52,13,53,14&width=64&height=64&format=image/svg%2Bxml');
    expect(await map.text()).toContain('LayerNotDefined');
    const asAdmin = await getFeature('geodata:features', '', admin);
    expect(asAdmin.status).toBe(200);
    expect(((await asAdmin.json()) as { features: unknown[] }).features).toHaveLength(2);
  });

  it('draws one shape per feature in the box by GetMap as SVG, latitude first for EPSG:4326 in WMS 1.3.0, longitude first in 1.1.1', async () => {
    const map = (version: string, crs: string, bbox: string) =>
      get(`wms?service=WMS&version=${version}&request=GetMap&layers=geodata:public_features&styles=&${version === '1.3.0' ? 'crs' : 'srs'}=${crs}&bbox=${bbox}&width=256&height=256&format=image/svg%2Bxml`);
    const latFirst = await map('1.3.0', 'EPSG:4326', '52.499,13.399,52.501,13.401');
    expect(latFirst.headers.get('content-type')).toBe('image/svg+xml');
    expect(shapes(await latFirst.text())).toBe(1);
    expect(shapes(await (await map('1.1.1', 'EPSG:4326', '13.399,52.499,13.401,52.501')).text())).toBe(1);
    // The same numbers read the other way round are a box elsewhere.
    expect(shapes(await (await map('1.3.0', 'EPSG:4326', '13.399,52.499,13.401,52.501')).text())).toBe(0);
    // The draft next to it is never drawn for the public layer.
    expect(shapes(await (await map('1.3.0', 'EPSG:4326', '52.5002,13.4002,52.501,13.401')).text())).toBe(0);
  });

  it('refuses output formats it does not produce, instead of answering something else', async () => {
    expect((await get('wfs?service=WFS&version=2.0.0&request=GetFeature&typeNames=geodata:public_features')).status).toBe(501);
    expect((await get('wms?service=WMS&version=1.3.0&request=GetMap&layers=geodata:public_features&crs=EPSG:4326&bbox=52,13,53,14&width=64&height=64&format=image/png')).status).toBe(501);
    expect((await get('wfs?service=WFS&request=DescribeFeatureType&typeNames=geodata:public_features')).status).toBe(501);
  });
});
