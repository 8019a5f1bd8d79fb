import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, startTestApi, useTestApi } from '../../../test/helpers/api.js';

/**
 * OGC API – Features Part 4 over HTTP: create, replace, merge-patch and delete through /ogcapi run
 * the feature API's rules (roles, If-Match → 412, no edits in review, an edit returns a feature to
 * draft) and leave the same history rows.
 */
const { db, api } = useTestApi();
let alice: string;
let bob: string;
let admin: string;
let guest: string;

beforeAll(async () => {
  [alice, bob, admin, guest] = await Promise.all([api.tokenFor('contributor', 'alice'), api.tokenFor('contributor', 'bob'), api.tokenFor('admin', 'root'), api.tokenFor('guest', 'gast')]);
});

const ITEMS = '/ogcapi/collections/friedhof/items';

async function history(id: string): Promise<Array<{ operation: string; version: number; actor: string }>> {
  const { rows } = await db.pool.query('SELECT operation, version, actor FROM history.feature_versions WHERE feature_id = $1::text ORDER BY id', [id]);
  return rows;
}

async function create(token = alice, properties: Record<string, unknown> = {}) {
  const response = await api.request('POST', ITEMS, { token, body: aFeature({ properties }), headers: { 'content-type': 'application/geo+json' } });
  expect(response.status).toBe(201);
  return response;
}

describe('creating through /ogcapi (POST items)', () => {
  it('answers 201 with the Location of the new item, its ETag and a history row, taking the kategorie from the collection', async () => {
    const body = aFeature();
    delete (body.properties as Record<string, unknown>).kategorie;
    const created = await api.request('POST', ITEMS, { token: alice, body, headers: { 'content-type': 'application/geo+json' } });
    expect(created.status).toBe(201);
    const id = created.json.id as string;
    expect(created.headers.get('location')).toBe(`${api.url}${ITEMS}/${id}`);
    expect(created.headers.get('etag')).toBe('"1"');
    expect(created.json.properties).toMatchObject({ kategorie: 'friedhof', status: 'draft', version: 1, createdBy: 'alice' });
    const fetched = await api.request('GET', new URL(created.headers.get('location')!).pathname);
    expect(fetched.status).toBe(200);
    expect(fetched.headers.get('etag')).toBe('"1"');
    expect(await history(id)).toEqual([{ operation: 'insert', version: 1, actor: 'alice' }]);
  });

  it('refuses a feature of another kategorie in a kategorie collection (400), an anonymous caller (401) and a guest (403)', async () => {
    const wrong = await api.request('POST', ITEMS, { token: alice, body: aFeature({ properties: { kategorie: 'denkmal' } }) });
    expect(wrong.status).toBe(400);
    expect(wrong.json.fields).toEqual([{ field: 'properties.kategorie', message: 'must be friedhof in this collection' }]);
    expect((await api.request('POST', ITEMS, { body: aFeature() })).status).toBe(401);
    expect((await api.request('POST', ITEMS, { token: guest, body: aFeature() })).status).toBe(403);
    const { rows } = await db.pool.query("SELECT count(*)::int AS n FROM features.features WHERE kategorie = 'denkmal'");
    expect(rows[0].n).toBe(0);
  });

  it('reads a body in the CRS its Content-Crs names (UTM 33N, or EPSG:4326 latitude first) and stores it in CRS84', async () => {
    const { rows } = await db.pool.query<{ x: number; y: number }>("SELECT ST_X(g) AS x, ST_Y(g) AS y FROM (SELECT ST_Transform('SRID=4326;POINT(13.4 52.5)'::geometry, 25833) g) t");
    const utm = await api.request('POST', ITEMS, {
      token: alice,
      body: aFeature({ geometry: { type: 'Point', coordinates: [rows[0]!.x, rows[0]!.y] } }),
      headers: { 'content-crs': '<http://www.opengis.net/def/crs/EPSG/0/25833>' },
    });
    expect(utm.status).toBe(201);
    expect(utm.headers.get('content-crs')).toBe('<http://www.opengis.net/def/crs/OGC/1.3/CRS84>');
    expect(utm.json.geometry.coordinates[0]).toBeCloseTo(13.4, 8);
    expect(utm.json.geometry.coordinates[1]).toBeCloseTo(52.5, 8);
    const latlon = await api.request('POST', ITEMS, {
      token: alice,
      body: aFeature({ geometry: { type: 'LineString', coordinates: [[52.5, 13.4], [52.6, 13.5]] } }),
      headers: { 'content-crs': '<http://www.opengis.net/def/crs/EPSG/0/4326>' },
    });
    expect(latlon.json.geometry.coordinates).toEqual([[13.4, 52.5], [13.5, 52.6]]);
  });

  it('refuses a Content-Crs it does not support, a geometry PostGIS cannot transform, and a media type it does not read (415)', async () => {
    const gk = await api.request('POST', ITEMS, { token: alice, body: aFeature(), headers: { 'content-crs': '<http://www.opengis.net/def/crs/EPSG/0/31467>' } });
    expect(gk.status).toBe(400);
    const broken = await api.request('POST', ITEMS, {
      token: alice,
      body: aFeature({ geometry: { type: 'Polygon', coordinates: [[[1, 2], [3, 4]]] } }),
      headers: { 'content-crs': '<http://www.opengis.net/def/crs/EPSG/0/25833>' },
    });
    expect(broken.status).toBe(400);
    expect(broken.json.fields[0].field).toMatch(/^geometry/);
    const garbage = await api.request('POST', ITEMS, { token: alice, body: aFeature({ geometry: { type: 'Kreis', coordinates: 'rund' } }), headers: { 'content-crs': '<http://www.opengis.net/def/crs/EPSG/0/25833>' } });
    expect(garbage.status).toBe(400);
    expect(garbage.json.fields[0].field).toBe('geometry');
    const text = await api.request('POST', ITEMS, { token: alice, rawBody: 'name=x', headers: { 'content-type': 'text/plain' } });
    expect(text.status).toBe(415);
  });
});

const UTM_33 = '<http://www.opengis.net/def/crs/EPSG/0/25833>';
const PSEUDO_MERCATOR = '<http://www.opengis.net/def/crs/EPSG/0/3857>';
const LAT_LON = '<http://www.opengis.net/def/crs/EPSG/0/4326>';

/** Berlin (13.4, 52.5) in UTM 33N, as PostGIS transforms it. */
async function berlinInUtm(): Promise<[number, number]> {
  const { rows } = await db.pool.query<{ x: number; y: number }>("SELECT ST_X(g) AS x, ST_Y(g) AS y FROM (SELECT ST_Transform('SRID=4326;POINT(13.4 52.5)'::geometry, 25833) g) t");
  return [rows[0]!.x, rows[0]!.y];
}

async function featureCount(): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM features.features');
  return rows[0]!.n;
}

describe('coordinates outside the valid domain of the Content-Crs', () => {
  it.each([
    ['EPSG:3857, a y far beyond the pole', PSEUDO_MERCATOR, [0, -5e9]],
    ['EPSG:3857, an x beyond the antimeridian', PSEUDO_MERCATOR, [5e7, 5e6]],
    ['EPSG:25833, a northing beyond the pole', UTM_33, [0, -5e9]],
    ['EPSG:25833, a northing twice around the earth', UTM_33, [500000, 2e7]],
  ])('are refused with a 400 naming the geometry (%s), and nothing is stored', async (_what, crs, coordinates) => {
    const before = await featureCount();
    const response = await api.request('POST', ITEMS, { token: alice, body: aFeature({ geometry: { type: 'Point', coordinates } }), headers: { 'content-crs': crs } });
    expect(response.status, response.text).toBe(400);
    expect(response.json.fields).toEqual([{ field: 'geometry.coordinates', message: expect.stringMatching(/outside the valid domain/) }]);
    expect(await featureCount()).toBe(before);
  });

  it('are refused in a line too, where only one position lies outside', async () => {
    const [x, y] = await berlinInUtm();
    const response = await api.request('POST', ITEMS, {
      token: alice,
      body: aFeature({ geometry: { type: 'LineString', coordinates: [[x, y], [x + 10, y], [0, -5e9]] } }),
      headers: { 'content-crs': UTM_33 },
    });
    expect(response.status).toBe(400);
    expect(response.json.fields[0].field).toBe('geometry.coordinates');
  });

  it('a geometry well inside the domain still goes through, to the millimetre', async () => {
    const [x, y] = await berlinInUtm();
    const response = await api.request('POST', ITEMS, { token: alice, body: aFeature({ geometry: { type: 'Point', coordinates: [x, y] } }), headers: { 'content-crs': UTM_33 } });
    expect(response.status).toBe(201);
    expect(response.json.geometry.coordinates[0]).toBeCloseTo(13.4, 8);
  });
});

describe('a body in another Content-Crs is refused for what a CRS84 body is refused for', () => {
  const point = (coordinates: number[], extra: Record<string, unknown> = {}) => ({ type: 'Point', coordinates, ...extra });

  it('an unknown geometry member (crs) is "not a known property", in UTM and in EPSG:4326 as in CRS84', async () => {
    const [x, y] = await berlinInUtm();
    const crsMember = { crs: { type: 'name', properties: { name: 'EPSG:25833' } } };
    const cases: Array<[string | undefined, number[]]> = [
      [undefined, [13.4, 52.5]],
      [UTM_33, [x, y]],
      [LAT_LON, [52.5, 13.4]],
    ];
    for (const [crs, coordinates] of cases) {
      const response = await api.request('POST', ITEMS, { token: alice, body: aFeature({ geometry: point(coordinates, crsMember) }), headers: crs ? { 'content-crs': crs } : {} });
      expect(response.status, `${crs}: ${response.text}`).toBe(400);
      expect(response.json.fields, crs).toEqual([{ field: 'geometry.crs', message: 'is not a known property' }]);
    }
  });

  it('a bbox (feature or geometry) is checked in the coordinates of the Content-Crs: one enclosing the geometry is accepted, one that does not is refused', async () => {
    const [x, y] = await berlinInUtm();
    const around = [x - 10, y - 10, x + 10, y + 10];
    const elsewhere = [x + 100, y + 100, x + 200, y + 200];
    const headers = { 'content-crs': UTM_33 };
    const ok = await api.request('POST', ITEMS, { token: alice, body: { ...aFeature({ geometry: point([x, y], { bbox: around }) }), bbox: around }, headers });
    expect(ok.status, ok.text).toBe(201);
    expect(ok.json.bbox).toBeUndefined();
    expect(ok.json.geometry.bbox).toBeUndefined();
    const feature = await api.request('POST', ITEMS, { token: alice, body: { ...aFeature({ geometry: point([x, y]) }), bbox: elsewhere }, headers });
    expect(feature.status).toBe(400);
    expect(feature.json.fields).toEqual([{ field: 'bbox', message: expect.stringMatching(/^does not enclose the geometry/) }]);
    const geometry = await api.request('POST', ITEMS, { token: alice, body: aFeature({ geometry: point([x, y], { bbox: elsewhere }) }), headers });
    expect(geometry.status).toBe(400);
    expect(geometry.json.fields).toEqual([{ field: 'geometry.bbox', message: expect.stringMatching(/^does not enclose the geometry/) }]);
    const malformed = await api.request('POST', ITEMS, { token: alice, body: { ...aFeature({ geometry: point([x, y]) }), bbox: [x - 10, y - 10, x + 10] }, headers });
    expect(malformed.status).toBe(400);
    expect(malformed.json.fields[0].field).toBe('bbox');
  });

  it('in EPSG:4326 a bbox is read latitude first like the coordinates', async () => {
    const headers = { 'content-crs': LAT_LON };
    const around = [52, 13, 53, 14];
    const ok = await api.request('POST', ITEMS, { token: alice, body: { ...aFeature({ geometry: point([52.5, 13.4], { bbox: around }) }), bbox: around }, headers });
    expect(ok.status, ok.text).toBe(201);
    expect(ok.json.geometry.coordinates).toEqual([13.4, 52.5]);
    // The same numbers read longitude first would be a box in the Arctic Ocean.
    const lonFirst = [13, 52, 14, 53];
    const refused = await api.request('POST', ITEMS, { token: alice, body: { ...aFeature({ geometry: point([52.5, 13.4]) }), bbox: lonFirst }, headers });
    expect(refused.status).toBe(400);
    expect(refused.json.fields[0].field).toBe('bbox');
  });

  it('a merge patch in UTM with a bbox is checked against the patched geometry, and the bbox is not stored', async () => {
    const id = (await create()).json.id as string;
    const [x, y] = await berlinInUtm();
    const headers = { 'content-type': 'application/merge-patch+json', 'content-crs': UTM_33 };
    const refused = await api.request('PATCH', `${ITEMS}/${id}`, { token: alice, rawBody: JSON.stringify({ geometry: point([x, y]), bbox: [x + 100, y + 100, x + 200, y + 200] }), headers });
    expect(refused.status).toBe(400);
    expect(refused.json.fields[0].field).toBe('bbox');
    const ok = await api.request('PATCH', `${ITEMS}/${id}`, { token: alice, rawBody: JSON.stringify({ geometry: point([x, y]), bbox: [x - 1, y - 1, x + 1, y + 1] }), headers });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.json.bbox).toBeUndefined();
  });
});

describe('what a Part 4 client sends back', () => {
  it('a fetched item PUT back unchanged with its ETag is a 200: the links GET added are ignored', async () => {
    const id = (await create()).json.id as string;
    const fetched = await api.request('GET', `${ITEMS}/${id}`);
    expect(fetched.json.links.length).toBeGreaterThan(0);
    const put = await api.request('PUT', `${ITEMS}/${id}`, { token: alice, rawBody: fetched.text, headers: { 'content-type': 'application/geo+json', 'if-match': fetched.headers.get('etag')! } });
    expect(put.status, put.text).toBe(200);
    expect(put.json).toMatchObject({ id, geometry: fetched.json.geometry, properties: { name: fetched.json.properties.name } });
    expect(put.json.links).toBeUndefined();
  });

  it('links are ignored on POST and in a merge patch too, and nothing else unknown is', async () => {
    const links = [{ rel: 'self', href: 'http://example.org/x' }];
    const created = await api.request('POST', ITEMS, { token: alice, body: { ...aFeature(), links } });
    expect(created.status, created.text).toBe(201);
    const id = created.json.id as string;
    const patched = await api.request('PATCH', `${ITEMS}/${id}`, { token: alice, rawBody: JSON.stringify({ links, properties: { name: 'Mit Links' } }), headers: { 'content-type': 'application/merge-patch+json' } });
    expect(patched.status, patched.text).toBe(200);
    const unknown = await api.request('POST', ITEMS, { token: alice, body: { ...aFeature(), links, rels: [] } });
    expect(unknown.status).toBe(400);
    expect(unknown.json.fields).toEqual([{ field: 'rels', message: 'is not a known property' }]);
  });
});

describe('what desktop GIS clients send', () => {
  it('accepts a new feature the way QGIS writes it: every layer field, the server-maintained ones null, an id field', async () => {
    const created = await api.request('POST', ITEMS, {
      token: alice,
      body: {
        type: 'Feature',
        geometry: { type: 'Point', coordinates: [13.4, 52.5] },
        properties: { id: null, name: 'Aus QGIS', kategorie: 'friedhof', adresse: null, telefon: null, status: null, version: null, createdBy: null, createdAt: null, updatedBy: null, updatedAt: null },
      },
    });
    expect(created.status).toBe(201);
    expect(created.json.properties).toMatchObject({ name: 'Aus QGIS', status: 'draft', version: 1, createdBy: 'alice' });
    const withId = await api.request('POST', ITEMS, { token: alice, body: aFeature({ properties: { id: 'qgis-1' } }) });
    expect(withId.status).toBe(201);
    expect(withId.json.id).toBe('qgis-1');
  });

  it('accepts a replacement carrying the read-back fields and an id field equal to the URL, and refuses a different id', async () => {
    const fetched = (await create()).json;
    const url = `${ITEMS}/${fetched.id}`;
    const put = await api.request('PUT', url, { token: alice, body: { ...fetched, properties: { ...fetched.properties, id: fetched.id, name: 'Umbenannt', createdAt: '2020-01-01T00:00:00', version: 99 } } });
    expect(put.status).toBe(200);
    expect(put.json.properties).toMatchObject({ name: 'Umbenannt', version: 2, createdBy: 'alice' });
    const other = await api.request('PUT', url, { token: alice, body: aFeature({ properties: { id: 'someone-else' } }) });
    expect(other.status).toBe(400);
    expect(other.json.fields).toEqual([{ field: 'properties.id', message: `must equal the feature id (${fetched.id})` }]);
  });
});

describe('replacing through /ogcapi (PUT)', () => {
  it('replaces with a current If-Match, refuses a stale one with 412 and the current ETag, and records one history row per change', async () => {
    const created = await create();
    const id = created.json.id as string;
    const url = `${ITEMS}/${id}`;
    const replaced = await api.request('PUT', url, { token: alice, body: aFeature({ properties: { name: 'Neuer Friedhof' } }), headers: { 'if-match': '"1"' } });
    expect(replaced.status).toBe(200);
    expect(replaced.headers.get('etag')).toBe('"2"');
    expect(replaced.json.properties).toMatchObject({ name: 'Neuer Friedhof', version: 2 });
    const stale = await api.request('PUT', url, { token: alice, body: aFeature({ properties: { name: 'Verloren' } }), headers: { 'if-match': '"1"' } });
    expect(stale.status).toBe(412);
    expect(stale.headers.get('etag')).toBe('"2"');
    expect((await api.request('GET', url)).json.properties.name).toBe('Neuer Friedhof');
    expect(await history(id)).toEqual([
      { operation: 'insert', version: 1, actor: 'alice' },
      { operation: 'update', version: 2, actor: 'alice' },
    ]);
  });

  it('returns an approved feature to draft when it is edited, as the QC rules say', async () => {
    const id = (await create()).json.id as string;
    await db.pool.query("UPDATE features.features SET status = 'approved' WHERE id = $1::text", [id]);
    const edited = await api.request('PUT', `${ITEMS}/${id}`, { token: alice, body: aFeature({ properties: { name: 'Geändert' } }) });
    expect(edited.status).toBe(200);
    expect(edited.json.properties.status).toBe('draft');
    const { rows } = await db.pool.query('SELECT action, from_status AS "from", to_status AS "to" FROM qc.transitions WHERE feature_id = $1::text', [id]);
    expect(rows).toEqual([{ action: 'reopen', from: 'approved', to: 'draft' }]);
  });

  it('refuses another contributor (403), a feature in review (409) and a feature of another collection (404)', async () => {
    const id = (await create()).json.id as string;
    expect((await api.request('PUT', `${ITEMS}/${id}`, { token: bob, body: aFeature() })).status).toBe(403);
    expect((await api.request('PUT', `/ogcapi/collections/denkmal/items/${id}`, { token: alice, body: aFeature({ properties: { kategorie: 'denkmal' } }) })).status).toBe(404);
    await db.pool.query("UPDATE features.features SET status = 'in_qc' WHERE id = $1::text", [id]);
    expect((await api.request('PUT', `${ITEMS}/${id}`, { token: alice, body: aFeature() })).status).toBe(409);
    expect(await history(id)).toHaveLength(1);
  });
});

describe('updating through /ogcapi (PATCH, JSON merge patch)', () => {
  it('merges the patch into the current feature: a member set, a member removed with null, the rest kept', async () => {
    const created = await create(alice, { adresse: 'Weg 1', telefon: '030 1' });
    const id = created.json.id as string;
    const patched = await api.request('PATCH', `${ITEMS}/${id}`, {
      token: alice,
      rawBody: JSON.stringify({ properties: { adresse: 'Weg 2', telefon: null } }),
      headers: { 'content-type': 'application/merge-patch+json', 'if-match': '"1"' },
    });
    expect(patched.status).toBe(200);
    expect(patched.headers.get('etag')).toBe('"2"');
    expect(patched.json.properties).toMatchObject({ name: 'Alter Friedhof', kategorie: 'friedhof', adresse: 'Weg 2', version: 2 });
    expect(patched.json.properties.telefon).toBeUndefined();
    expect(patched.json.geometry).toEqual(created.json.geometry);
    expect(await history(id)).toEqual([
      { operation: 'insert', version: 1, actor: 'alice' },
      { operation: 'update', version: 2, actor: 'alice' },
    ]);
  });

  it('leaves a geometry the patch does not touch bit-identical, even with more decimals than are served', async () => {
    const id = (await create()).json.id as string;
    await db.pool.query("UPDATE features.features SET geom = ST_SetSRID(ST_MakePoint(13.123456789012344, 52.30000000000000004), 4326) WHERE id = $1::text", [id]);
    const before = await db.pool.query('SELECT ST_AsEWKB(geom) AS wkb FROM features.features WHERE id = $1::text', [id]);
    const patched = await api.request('PATCH', `${ITEMS}/${id}`, { token: alice, rawBody: '{"properties":{"name":"Nur der Name"}}', headers: { 'content-type': 'application/merge-patch+json' } });
    expect(patched.status).toBe(200);
    const after = await db.pool.query('SELECT ST_AsEWKB(geom) AS wkb FROM features.features WHERE id = $1::text', [id]);
    expect(after.rows[0].wkb.equals(before.rows[0].wkb)).toBe(true);
  });

  it('answers a stale If-Match with 412 and changes nothing', async () => {
    const id = (await create()).json.id as string;
    await api.request('PUT', `${ITEMS}/${id}`, { token: alice, body: aFeature({ properties: { name: 'Zwei' } }) });
    const stale = await api.request('PATCH', `${ITEMS}/${id}`, {
      token: alice,
      rawBody: JSON.stringify({ properties: { name: 'Drei' } }),
      headers: { 'content-type': 'application/merge-patch+json', 'if-match': '"1"' },
    });
    expect(stale.status).toBe(412);
    expect(stale.headers.get('etag')).toBe('"2"');
    expect((await api.request('GET', `${ITEMS}/${id}`)).json.properties.name).toBe('Zwei');
    expect(await history(id)).toHaveLength(2);
  });

  it('validates the merged feature like any other: a patch making it invalid is a 400 naming the field', async () => {
    const id = (await create()).json.id as string;
    const bad = await api.request('PATCH', `${ITEMS}/${id}`, { token: alice, rawBody: JSON.stringify({ properties: { name: '' } }), headers: { 'content-type': 'application/merge-patch+json' } });
    expect(bad.status).toBe(400);
    expect(bad.json.fields).toEqual([{ field: 'properties.name', message: 'must not be empty' }]);
    const notObject = await api.request('PATCH', `${ITEMS}/${id}`, { token: alice, rawBody: '[1]', headers: { 'content-type': 'application/merge-patch+json' } });
    expect(notObject.status).toBe(400);
    expect(await history(id)).toHaveLength(1);
  });
});

describe('deleting through /ogcapi (DELETE)', () => {
  it('lets only an admin delete, refuses a stale If-Match with 412, and keeps the history with a delete row', async () => {
    const id = (await create()).json.id as string;
    expect((await api.request('DELETE', `${ITEMS}/${id}`, { token: alice })).status).toBe(403);
    expect((await api.request('DELETE', `${ITEMS}/${id}`, { token: admin, headers: { 'if-match': '"7"' } })).status).toBe(412);
    const deleted = await api.request('DELETE', `${ITEMS}/${id}`, { token: admin, headers: { 'if-match': '"1"' } });
    expect(deleted.status).toBe(204);
    expect((await api.request('GET', `${ITEMS}/${id}`)).status).toBe(404);
    expect(await history(id)).toEqual([
      { operation: 'insert', version: 1, actor: 'alice' },
      { operation: 'delete', version: 1, actor: 'root' },
    ]);
  });
});

describe('OPTIONS announces the methods this caller may use', () => {
  it('lists only reads for an anonymous caller, POST for a contributor and every write on an item for an admin', async () => {
    const id = (await create()).json.id as string;
    const anonymous = await api.request('OPTIONS', ITEMS);
    expect(anonymous.status).toBe(204);
    expect(anonymous.headers.get('allow')).toBe('GET, HEAD, OPTIONS');
    expect((await api.request('OPTIONS', ITEMS, { token: alice })).headers.get('allow')).toBe('GET, HEAD, POST, OPTIONS');
    expect((await api.request('OPTIONS', `${ITEMS}/${id}`, { token: alice })).headers.get('allow')).toBe('GET, HEAD, PUT, PATCH, OPTIONS');
    expect((await api.request('OPTIONS', `${ITEMS}/${id}`, { token: admin })).headers.get('allow')).toBe('GET, HEAD, PUT, PATCH, DELETE, OPTIONS');
  });

  it('answers a method the resource does not have with 405 and its Allow header', async () => {
    const response = await api.request('POST', '/ogcapi/collections');
    expect(response.status).toBe(405);
    expect(response.headers.get('allow')).toBe('GET, HEAD');
  });
});

describe('the write rate limit', () => {
  it('counts changes through /ogcapi and /api/features against one budget per address (429 after it)', async () => {
    const limited = await startTestApi(db, { config: { rateLimit: { writesPerMinute: 2 } } });
    try {
      const token = await limited.tokenFor('contributor', 'rita');
      expect((await limited.request('POST', ITEMS, { token, body: aFeature() })).status).toBe(201);
      expect((await limited.request('POST', '/api/features', { token, body: aFeature() })).status).toBe(201);
      const third = await limited.request('POST', ITEMS, { token, body: aFeature() });
      expect(third.status).toBe(429);
      expect(third.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect((await limited.request('GET', ITEMS)).status).toBe(200);
    } finally {
      await limited.close();
    }
  });
});
