import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, startTestApi, type FeatureJson, type TestApi } from '../../../test/helpers/api.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';

let db: TestDatabase;
let api: TestApi;
let alice: string;
let bob: string;
let admin: string;

beforeAll(async () => {
  db = await createTestDatabase();
  api = await startTestApi(db);
  alice = await api.tokenFor('contributor', 'alice');
  bob = await api.tokenFor('contributor', 'bob');
  admin = await api.tokenFor('admin', 'root');
});
afterAll(async () => {
  await api?.close();
  await db?.close();
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
  it('accepts a feature fetched by GET and sent back unchanged, and bumps the version', async () => {
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature({ geometry: polygon, properties: { adresse: 'Hauptstraße 1' } }) });
    const fetched = await api.request('GET', `/api/features/${created.json.id}`);
    const put = await api.request('PUT', `/api/features/${created.json.id}`, { token: alice, body: fetched.json, headers: { 'if-match': fetched.headers.get('etag')! } });
    expect(put.status).toBe(200);
    expect(put.headers.get('etag')).toBe('"2"');
    expect(put.json.properties.version).toBe(2);
    expect(put.json.properties.adresse).toBe('Hauptstraße 1');
    expect(put.json.geometry).toEqual(polygon);
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
