import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi, type FeatureJson } from '../../../test/helpers/api.js';

const { db, api } = useTestApi();
let alice: string;
let bob: string;
let admin: string;

beforeAll(async () => {
  alice = await api.tokenFor('contributor', 'alice');
  bob = await api.tokenFor('contributor', 'bob');
  admin = await api.tokenFor('admin', 'root');
});

const polygon = {
  type: 'Polygon',
  coordinates: [[[13.0, 52.0], [13.1, 52.0], [13.1, 52.1], [13.0, 52.1], [13.0, 52.0]]],
};

describe('creating and reading a feature', () => {
  it('answers 201 with Location, a strong ETag and the stored feature with a string id', async () => {
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature({ geometry: polygon, properties: { telefon: '+49 30 1234-5' } }) });
    expect(created.status).toBe(201);
    expect(created.headers.get('content-type')).toMatch(/^application\/geo\+json/);
    expect(typeof created.json.id).toBe('string');
    expect(created.headers.get('location')).toBe(`/api/features/${created.json.id}`);
    expect(created.headers.get('etag')).toBe('"1"');
    expect(created.json.properties).toMatchObject({ name: 'Alter Friedhof', kategorie: 'friedhof', telefon: '+49 30 1234-5', status: 'draft', version: 1, createdBy: 'alice', updatedBy: 'alice' });
    expect(created.json.geometry).toEqual(polygon);

    const fetched = await api.request('GET', created.headers.get('location')!);
    expect(fetched.status).toBe(200);
    expect(fetched.headers.get('etag')).toBe('"1"');
    expect(fetched.json).toEqual(created.json);
  });

  it('keeps an id chosen by the client and refuses a second feature with it (409)', async () => {
    const first = await api.request('POST', '/api/features', { token: alice, body: aFeature({ id: 'denkmal-42', properties: { kategorie: 'denkmal' } }) });
    expect(first.status).toBe(201);
    expect(first.json.id).toBe('denkmal-42');
    const again = await api.request('POST', '/api/features', { token: alice, body: aFeature({ id: 'denkmal-42' }) });
    expect(again.status).toBe(409);
    expect(again.json.code).toBe('CONFLICT');
  });

  it('answers an unknown id with 404 FEATURE_NOT_FOUND as problem+json', async () => {
    const response = await api.request('GET', '/api/features/does-not-exist');
    expect(response.status).toBe(404);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(response.json).toMatchObject({ status: 404, code: 'FEATURE_NOT_FOUND', title: 'Not Found' });
    expect(typeof response.json.detail).toBe('string');
  });
});

describe('replacing a feature', () => {
  it('treats a feature fetched by GET and sent back unchanged as a no-op: same version, no history row, QC status kept', async () => {
    // 15 decimals in, as a client computing coordinates would send them.
    const precise = { type: 'Polygon', coordinates: [[[13.0, 52.0], [13.12345678901234, 52.0000000001], [13.1, 52.1], [13.0, 52.1], [13.0, 52.0]]] };
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature({ geometry: precise, properties: { adresse: 'Hauptstraße 1' } }) });
    expect(created.status, created.text).toBe(201);
    const id = created.json.id as string;
    await db.pool.query(`UPDATE features.features SET status = 'approved' WHERE id = $1`, [id]);
    const fetched = await api.request('GET', `/api/features/${id}`);
    expect(fetched.json.properties.status).toBe('approved');

    const put = await api.request('PUT', `/api/features/${id}`, { token: alice, body: fetched.json, headers: { 'if-match': fetched.headers.get('etag')! } });
    expect(put.status).toBe(200);
    expect(put.headers.get('etag')).toBe('"1"');
    expect(put.json).toEqual(fetched.json);
    const history = await db.pool.query('SELECT count(*)::int AS n FROM history.feature_versions WHERE feature_id = $1', [id]);
    expect(history.rows[0].n).toBe(1);
    const transitions = await db.pool.query(`SELECT count(*)::int AS n FROM qc.transitions WHERE feature_id = $1 AND action = 'reopen'`, [id]);
    expect(transitions.rows[0].n).toBe(0);
    expect((await api.request('GET', `/api/features/${id}`)).json).toEqual(fetched.json);
  });

  it('answers a PUT whose data equals the current version with 200 and that version, also without If-Match', async () => {
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature({ geometry: polygon, properties: { telefon: '030 1' } }) });
    const same = aFeature({ geometry: polygon, properties: { telefon: '030 1' } });
    const put = await api.request('PUT', `/api/features/${created.json.id}`, { token: alice, body: same });
    expect(put.status).toBe(200);
    expect(put.json.properties.version).toBe(1);
    expect(put.json).toEqual(created.json);
    const changed = await api.request('PUT', `/api/features/${created.json.id}`, { token: alice, body: aFeature({ geometry: polygon, properties: { telefon: '030 2' } }) });
    expect(changed.json.properties.version).toBe(2);
  });

  it('stores coordinates at the precision it serves them (9 decimals), so what it answers is what it keeps', async () => {
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature({ geometry: { type: 'Point', coordinates: [13.12345678901234, -52.98765432109876] } }) });
    expect(created.json.geometry.coordinates).toEqual([13.123456789, -52.987654321]);
    const stored = await db.pool.query('SELECT ST_X(geom) AS x, ST_Y(geom) AS y FROM features.features WHERE id = $1', [created.json.id]);
    expect([stored.rows[0].x, stored.rows[0].y]).toEqual([13.123456789, -52.987654321]);
  });

  it('treats a GET body of a feature written outside the API (15 decimals, clockwise ring) sent back as a no-op', async () => {
    await db.pool.query(`INSERT INTO features.features (id, name, kategorie, geom)
      VALUES ('wfs-written', 'WFS', 'denkmal', ST_GeomFromText('POLYGON((13.12345678901234 52, 13 52.1, 13.1 52.1, 13.12345678901234 52))', 4326))`);
    const fetched = await api.request('GET', '/api/features/wfs-written');
    const put = await api.request('PUT', '/api/features/wfs-written', { token: admin, body: fetched.json });
    expect(put.status).toBe(200);
    expect(put.json.properties.version).toBe(1);
  });

  it('replaces every editable field (a property left out is removed)', async () => {
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature({ properties: { adresse: 'Weg 2', telefon: '030 1' } }) });
    const body = aFeature({ properties: { name: 'Rosenbeet', kategorie: 'blumenbeet' }, geometry: { type: 'LineString', coordinates: [[1, 2], [3, 4]] } });
    const put = await api.request('PUT', `/api/features/${created.json.id}`, { token: alice, body });
    expect(put.status).toBe(200);
    expect(put.json.properties).toMatchObject({ name: 'Rosenbeet', kategorie: 'blumenbeet', version: 2 });
    expect(put.json.properties).not.toHaveProperty('adresse');
    expect(put.json.properties).not.toHaveProperty('telefon');
    expect(put.json.geometry).toEqual(body.geometry);
  });

  it('answers a stale If-Match with 412 and changes nothing', async () => {
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature() });
    const id = created.json.id as string;
    const first = await api.request('PUT', `/api/features/${id}`, { token: alice, body: aFeature({ properties: { name: 'first edit' } }), headers: { 'if-match': '"1"' } });
    expect(first.status).toBe(200);
    const before = await db.pool.query('SELECT count(*)::int AS n FROM history.feature_versions WHERE feature_id = $1', [id]);

    for (const ifMatch of ['"1"', 'W/"2"', '"banana"', '"1", "3"']) {
      const stale = await api.request('PUT', `/api/features/${id}`, { token: alice, body: aFeature({ properties: { name: 'lost update' } }), headers: { 'if-match': ifMatch } });
      expect(stale.status, ifMatch).toBe(412);
      expect(stale.json.code).toBe('PRECONDITION_FAILED');
      expect(stale.headers.get('etag')).toBe('"2"');
    }
    const staleDelete = await api.request('DELETE', `/api/features/${id}`, { token: admin, headers: { 'if-match': '"1"' } });
    expect(staleDelete.status).toBe(412);

    const after = await api.request('GET', `/api/features/${id}`);
    expect(after.json.properties).toMatchObject({ name: 'first edit', version: 2 });
    const history = await db.pool.query('SELECT count(*)::int AS n FROM history.feature_versions WHERE feature_id = $1', [id]);
    expect(history.rows[0].n).toBe(before.rows[0].n);

    const matching = await api.request('PUT', `/api/features/${id}`, { token: alice, body: aFeature({ properties: { name: 'second edit' } }), headers: { 'if-match': '"7", "2"' } });
    expect(matching.status).toBe(200);
    const star = await api.request('PUT', `/api/features/${id}`, { token: alice, body: aFeature(), headers: { 'if-match': '*' } });
    expect(star.status).toBe(200);
  });

  it('refuses a body whose id differs from the URL', async () => {
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature() });
    const put = await api.request('PUT', `/api/features/${created.json.id}`, { token: alice, body: aFeature({ id: 'someone-else' }) });
    expect(put.status).toBe(400);
    expect(put.json.fields).toEqual([{ field: 'id', message: expect.stringContaining('must equal the id in the URL') }]);
  });

  it('answers PUT on an unknown id with 404', async () => {
    const put = await api.request('PUT', '/api/features/nope', { token: admin, body: aFeature() });
    expect(put.status).toBe(404);
    expect(put.json.code).toBe('FEATURE_NOT_FOUND');
  });
});

describe('RFC 7946', () => {
  /** Twice the signed area of a ring: positive when counter-clockwise. */
  const signedArea = (ring: number[][]) => ring.slice(1).reduce((sum, [x, y], i) => sum + (ring[i]![0]! * y! - x! * ring[i]![1]!), 0);

  it('serves polygon rings in RFC 7946 winding order: exterior counter-clockwise, holes clockwise', async () => {
    // Written outside the API the other way round: a clockwise exterior and a counter-clockwise hole.
    await db.pool.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('clockwise', 'CW', 'friedhof',
      ST_GeomFromText('POLYGON((0 0, 0 10, 10 10, 10 0, 0 0), (2 2, 4 2, 4 4, 2 4, 2 2))', 4326))`);
    const fetched = await api.request('GET', '/api/features/clockwise');
    const [exterior, hole] = fetched.json.geometry.coordinates as number[][][];
    expect(signedArea(exterior!)).toBeGreaterThan(0);
    expect(signedArea(hole!)).toBeLessThan(0);
    const listed = await api.request('GET', '/api/features?bbox=-1,-1,11,11');
    const inList = listed.json.features.find((f: FeatureJson) => f.id === 'clockwise');
    expect(signedArea((inList.geometry.coordinates as number[][][])[0]!)).toBeGreaterThan(0);
    const history = await api.request('GET', '/api/features/clockwise/history');
    expect(signedArea(history.json.versions[0].feature.geometry.coordinates[0])).toBeGreaterThan(0);
  });

  it('keeps the direction of a line string (winding applies to polygons only)', async () => {
    const line = { type: 'LineString', coordinates: [[13.3, 52.25], [13.2, 52.2], [13.1, 52.1]] };
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature({ geometry: line }) });
    expect(created.json.geometry).toEqual(line);
    expect((await api.request('GET', `/api/features/${created.json.id}`)).json.geometry).toEqual(line);
  });

  it('accepts a bbox member on a Feature and on its geometry when it encloses the geometry, and does not store it', async () => {
    const body = { ...aFeature({ geometry: { ...polygon, bbox: [13.0, 52.0, 13.1, 52.1] } }), bbox: [13.0, 52.0, 13.1, 52.1] };
    const created = await api.request('POST', '/api/features', { token: alice, body });
    expect(created.status, created.text).toBe(201);
    expect(created.json).not.toHaveProperty('bbox');
    expect(created.json.geometry).toEqual(polygon);
    // A bbox with west > east crosses the antimeridian (RFC 7946 §5.2), around a geometry cut at ±180° (§3.1.9).
    const cut = {
      type: 'MultiPolygon',
      coordinates: [
        [[[179.5, 0], [180, 0], [180, 1], [179.5, 1], [179.5, 0]]],
        [[[-180, 0], [-179.5, 0], [-179.5, 1], [-180, 1], [-180, 0]]],
      ],
    };
    const acrossAntimeridian = await api.request('POST', '/api/features', { token: alice, body: { ...aFeature({ geometry: cut }), bbox: [179, 0, -179, 1] } });
    expect(acrossAntimeridian.status, acrossAntimeridian.text).toBe(201);
  });

  it('refuses a geometry with an edge over 180° of longitude, which crosses the antimeridian uncut (RFC 7946 §3.1.9)', async () => {
    const band = { type: 'Polygon', coordinates: [[[179, 0], [-179, 0], [-179, 1], [179, 1], [179, 0]]] };
    const line = { type: 'LineString', coordinates: [[179.5, 0], [-179.5, 1]] };
    for (const geometry of [band, line]) {
      const refused = await api.request('POST', '/api/features', { token: alice, body: aFeature({ geometry }) });
      expect(refused.status, refused.text).toBe(400);
      expect(refused.json.fields[0]).toEqual({ field: 'geometry.coordinates' + (geometry === band ? '[0][1]' : '[1]'), message: expect.stringMatching(/crosses the antimeridian.*RFC 7946 §3\.1\.9/) });
    }
  });

  it('refuses a bbox member that does not enclose the geometry or is not [west, south, east, north], naming it', async () => {
    const cases: Array<[unknown, string]> = [
      [{ ...aFeature({ geometry: polygon }), bbox: [13.0, 52.0, 13.05, 52.1] }, 'bbox'],
      [aFeature({ geometry: { ...polygon, bbox: [0, 0, 1, 1] } }), 'geometry.bbox'],
      [{ ...aFeature(), bbox: [13, 52, 14] }, 'bbox'],
      [{ ...aFeature(), bbox: [13, 53, 14, 52] }, 'bbox'],
      [{ ...aFeature(), bbox: [13, 52, 0, 14, 53, 0] }, 'bbox'],
    ];
    for (const [body, field] of cases) {
      const response = await api.request('POST', '/api/features', { token: alice, body });
      expect(response.status, JSON.stringify(body)).toBe(400);
      expect(response.json.fields.map((f: { field: string }) => f.field), JSON.stringify(response.json.fields)).toContain(field);
    }
  });
});

describe('history', () => {
  it('lists every API change newest first with actor and full snapshot, and survives deletion', async () => {
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature({ geometry: polygon }) });
    const id = created.json.id as string;
    await api.request('PUT', `/api/features/${id}`, { token: admin, body: aFeature({ properties: { name: 'renamed by admin' } }) });
    const deleted = await api.request('DELETE', `/api/features/${id}`, { token: admin });
    expect(deleted.status).toBe(204);
    expect((await api.request('GET', `/api/features/${id}`)).status).toBe(404);

    const history = await api.request('GET', `/api/features/${id}/history`);
    expect(history.status).toBe(200);
    expect(history.json.featureId).toBe(id);
    const versions = history.json.versions as Array<{ operation: string; version: number; actor: string; recordedAt: string; feature: FeatureJson }>;
    expect(versions.map((v) => [v.operation, v.version, v.actor])).toEqual([
      ['delete', 2, 'root'],
      ['update', 2, 'root'],
      ['insert', 1, 'alice'],
    ]);
    expect(versions[2]!.feature).toMatchObject({ type: 'Feature', id, geometry: polygon, properties: { name: 'Alter Friedhof', version: 1, createdBy: 'alice' } });
    expect(versions[1]!.feature.properties).toMatchObject({ name: 'renamed by admin', updatedBy: 'root' });
    expect(versions[1]!.feature.geometry).toEqual({ type: 'Point', coordinates: [13.4, 52.5] });
    expect(Date.parse(versions[0]!.recordedAt)).toBeGreaterThan(0);
  });

  it('answers the history of a feature that never existed with 404', async () => {
    const response = await api.request('GET', '/api/features/never/history');
    expect(response.status).toBe(404);
  });
});

describe('deleting', () => {
  it('answers a second delete with 404', async () => {
    const created = await api.request('POST', '/api/features', { token: bob, body: aFeature() });
    expect((await api.request('DELETE', `/api/features/${created.json.id}`, { token: admin })).status).toBe(204);
    expect((await api.request('DELETE', `/api/features/${created.json.id}`, { token: admin })).status).toBe(404);
  });
});

describe('request bodies', () => {
  it('answers a body over 1 MiB with 413', async () => {
    const big = aFeature({ properties: { adresse: 'x'.repeat(1024 * 1024) } });
    const response = await api.request('POST', '/api/features', { token: alice, body: big });
    expect(response.status).toBe(413);
    expect(response.json.code).toBe('PAYLOAD_TOO_LARGE');
  });

  it('accepts application/geo+json and application/json with a charset', async () => {
    for (const type of ['application/geo+json', 'application/json; charset=utf-8']) {
      const response = await api.request('POST', '/api/features', { token: alice, body: aFeature(), headers: { 'content-type': type } });
      expect(response.status, type).toBe(201);
    }
  });

  it('answers other media types with 415 before reading the body', async () => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml', 'multipart/form-data; boundary=x']) {
      const response = await api.request('POST', '/api/features', { token: alice, rawBody: JSON.stringify(aFeature()), headers: { 'content-type': type } });
      expect(response.status, type).toBe(415);
      expect(response.json.code).toBe('UNSUPPORTED_MEDIA_TYPE');
    }
    const latin1 = await api.request('POST', '/api/features', { token: alice, rawBody: JSON.stringify(aFeature()), headers: { 'content-type': 'application/json; charset=latin1' } });
    expect(latin1.status).toBe(415);
  });

  it('answers malformed JSON with 400 MALFORMED_JSON', async () => {
    for (const raw of ['{"type": "Feature",', '{\'a\': 1}', 'null', '"Feature"', '12', '[1,2']) {
      const response = await api.request('POST', '/api/features', { token: alice, rawBody: raw, headers: { 'content-type': 'application/json' } });
      expect(response.status, raw).toBe(400);
      expect(['MALFORMED_JSON', 'VALIDATION_FAILED'], raw).toContain(response.json.code);
      expect(response.text).not.toMatch(/at .*\.(js|ts):\d+/);
    }
    const truncated = await api.request('POST', '/api/features', { token: alice, rawBody: '{"type":', headers: { 'content-type': 'application/json' } });
    expect(truncated.json.code).toBe('MALFORMED_JSON');
  });

  it('answers a missing body with 400', async () => {
    const response = await api.request('POST', '/api/features', { token: alice });
    expect(response.status).toBe(400);
  });
});

describe('the rest of the surface', () => {
  it('serves an OpenAPI 3.1 document generated from the validation schemas, and a docs page without a CDN', async () => {
    const doc = await api.request('GET', '/api/openapi.json');
    expect(doc.status).toBe(200);
    expect(doc.json.openapi).toBe('3.1.0');
    expect(Object.keys(doc.json.paths)).toEqual(expect.arrayContaining(['/api/features', '/api/features/{id}', '/api/features/{id}/history']));
    const properties = doc.json.components.schemas.FeatureProperties;
    expect(properties.properties.name).toMatchObject({ minLength: 1, maxLength: 255 });
    expect(properties.properties.kategorie.enum).toEqual(['friedhof', 'blumenbeet', 'denkmal']);
    expect(properties.additionalProperties).toBe(false);

    const redirect = await fetch(`${api.url}/api/docs`, { redirect: 'manual' });
    expect(redirect.status).toBe(301);
    const page = await api.request('GET', '/api/docs/');
    expect(page.status).toBe(200);
    expect(page.text).toContain('swagger-ui-bundle.js');
    expect(page.text).not.toMatch(/https?:\/\//i);
    const init = await api.request('GET', '/api/docs/swagger-initializer.js');
    expect(init.text).toContain('../openapi.json');
    expect((await api.request('GET', '/api/docs/swagger-ui-bundle.js')).status).toBe(200);
  });

  it('reports health and readiness', async () => {
    expect((await api.request('GET', '/healthz')).json).toEqual({ status: 'ok' });
    expect((await api.request('GET', '/readyz')).status).toBe(200);
  });

  it('answers unknown routes with 404 and unsupported methods with 405 and Allow', async () => {
    expect((await api.request('GET', '/api/nothing')).json.code).toBe('NOT_FOUND');
    const patch = await api.request('PATCH', '/api/features/x', { token: admin, body: {} });
    expect(patch.status).toBe(405);
    expect(patch.headers.get('allow')).toBe('GET, HEAD, PUT, DELETE');
  });

  it('answers a path with a broken escape with 400, not 500', async () => {
    const response = await api.request('GET', '/api/features/%E0%A4%A');
    expect(response.status).toBe(400);
  });
});
