import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';

const { db, api } = useTestApi();
let token: string;

beforeAll(async () => {
  token = await api.tokenFor('contributor', 'vera');
});

const post = (body: unknown) => api.request('POST', '/api/features', { token, body });

async function expectRejected(body: unknown, field: string, message?: RegExp) {
  const response = await post(body);
  expect(response.status, JSON.stringify(body).slice(0, 200)).toBe(400);
  expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(response.json.code).toBe('VALIDATION_FAILED');
  const fields = response.json.fields as Array<{ field: string; message: string }>;
  expect(fields.map((f) => f.field), JSON.stringify(fields)).toContain(field);
  if (message) expect(fields.find((f) => f.field === field)!.message).toMatch(message);
  // The summary names the field too.
  expect(response.json.detail).toContain(field);
  return response;
}

async function expectAccepted(body: unknown) {
  const response = await post(body);
  expect(response.status, response.text).toBe(201);
  return response;
}

describe('type', () => {
  it('must equal "Feature"', async () => {
    await expectRejected({ ...aFeature(), type: 'FeatureCollection' }, 'type', /"Feature"/);
    await expectRejected({ ...aFeature(), type: 'feature' }, 'type');
    const { type: _omit, ...withoutType } = aFeature();
    await expectRejected(withoutType, 'type');
  });
});

describe('properties.name', () => {
  it('accepts 1 and 255 characters, rejects 0 and 256', async () => {
    await expectAccepted(aFeature({ properties: { name: 'a' } }));
    await expectAccepted(aFeature({ properties: { name: 'n'.repeat(255) } }));
    await expectRejected(aFeature({ properties: { name: '' } }), 'properties.name', /empty/);
    await expectRejected(aFeature({ properties: { name: 'n'.repeat(256) } }), 'properties.name', /255/);
  });

  it('rejects a name of only spaces (also tabs and no-break spaces), accepts one with spaces around a letter', async () => {
    for (const name of [' ', '   ', '\t \u00a0']) {
      const response = await expectRejected(aFeature({ properties: { name } }), 'properties.name', /only spaces/);
      expect(response.json.fields).toHaveLength(1);
    }
    await expectAccepted(aFeature({ properties: { name: ' a ' } }));
  });

  it('counts characters, not UTF-16 units (255 emoji are fine, 256 are not)', async () => {
    const created = await expectAccepted(aFeature({ properties: { name: '🌹'.repeat(255) } }));
    expect(created.json.properties.name).toBe('🌹'.repeat(255));
    await expectRejected(aFeature({ properties: { name: '🌹'.repeat(256) } }), 'properties.name');
  });

  it('must be a string, present, without NUL characters', async () => {
    await expectRejected(aFeature({ properties: { name: 42 } }), 'properties.name');
    await expectRejected(aFeature({ properties: { name: null } }), 'properties.name');
    await expectRejected({ ...aFeature(), properties: { kategorie: 'denkmal' } }, 'properties.name');
    await expectRejected(aFeature({ properties: { name: 'a\u0000b' } }), 'properties.name', /NUL/);
  });
});

describe('properties.kategorie', () => {
  it('accepts exactly friedhof, blumenbeet and denkmal', async () => {
    for (const kategorie of ['friedhof', 'blumenbeet', 'denkmal']) await expectAccepted(aFeature({ properties: { kategorie } }));
    for (const kategorie of ['Friedhof', 'park', '', ' denkmal', null, 1]) {
      await expectRejected(aFeature({ properties: { kategorie } }), 'properties.kategorie', /friedhof, blumenbeet, denkmal/);
    }
  });
});

describe('properties.adresse', () => {
  it('is optional (absent or null), a string otherwise', async () => {
    await expectAccepted(aFeature());
    await expectAccepted(aFeature({ properties: { adresse: null } }));
    await expectAccepted(aFeature({ properties: { adresse: '' } }));
    await expectAccepted(aFeature({ properties: { adresse: 'ä'.repeat(1000) } }));
    await expectRejected(aFeature({ properties: { adresse: 'ä'.repeat(1001) } }), 'properties.adresse', /1000/);
    await expectRejected(aFeature({ properties: { adresse: 12 } }), 'properties.adresse');
    await expectRejected(aFeature({ properties: { adresse: ['Weg 1'] } }), 'properties.adresse');
  });
});

describe('properties.telefon', () => {
  it.each([
    ['digits only', '0301234567'],
    ['leading +', '+49301234567'],
    ['spaces', '+49 30 123 45'],
    ['hyphens', '030-123-45'],
    ['a single digit', '1'],
    ['hyphens next to spaces', '030 - 123'],
  ])('accepts %s', async (_shape, telefon) => {
    const response = await expectAccepted(aFeature({ properties: { telefon } }));
    expect(response.json.properties.telefon).toBe(telefon);
  });

  it.each([
    ['empty', ''],
    ['a lone +', '+'],
    ['+ not at the start', '030+123'],
    ['two leading +', '++49'],
    ['parentheses', '(030) 123'],
    ['a slash', '030/123'],
    ['letters', '030-CALL-ME'],
    ['a dot', '030.123'],
    ['an extension marker', '030 123 x5'],
    ['non-ASCII digits', '٠٣٠'],
    ['a space only', ' '],
    ['a hyphen only', '-'],
    ['+ and a hyphen', '+-'],
    ['only hyphens and spaces after +', '+- -'],
    ['a tab', '030\t123'],
    ['a line break', '030\n123'],
    ['a no-break space', '030\u00a0123'],
    ['two spaces in a row', '030  123'],
    ['a leading space', ' 030'],
    ['a trailing space', '030 '],
  ])('rejects %s', async (_shape, telefon) => {
    await expectRejected(aFeature({ properties: { telefon } }), 'properties.telefon', /digits/);
  });

  it('states the rule in the OpenAPI document, as the pattern the API applies', async () => {
    const document = (await api.request('GET', '/api/openapi.json')).json;
    const telefon = document.components.schemas.FeatureProperties.properties.telefon;
    const schema = (telefon.anyOf ?? [telefon]).find((s: { type?: string }) => s.type === 'string');
    expect(schema.pattern).toBe('^\\+?-*[0-9][0-9-]*(?: [0-9-]+)*$');
    expect(schema.description).toMatch(/at least one digit/);
    expect(schema.description).toMatch(/single spaces/);
  });

  it('accepts null (no number) and rejects a number type', async () => {
    await expectAccepted(aFeature({ properties: { telefon: null } }));
    await expectRejected(aFeature({ properties: { telefon: 301234 } }), 'properties.telefon');
  });
});

describe('lone surrogates', () => {
  /** JSON text with a \ud800 escape: JSON.stringify would escape it, so the test writes the escape itself. */
  const withEscape = (body: unknown, marker: string) => JSON.stringify(body).replace(marker, '\\ud800');

  it.each([
    ['properties.name', aFeature({ properties: { name: 'Friedhof MARK' } })],
    ['properties.adresse', aFeature({ properties: { adresse: 'Weg MARK' } })],
    ['properties.telefon', aFeature({ properties: { telefon: 'MARK' } })],
    ['id', aFeature({ id: 'MARK' })],
    ['properties.createdBy', aFeature({ properties: { createdBy: 'MARK' } })],
  ])('refuses one in %s with 400 naming the field, and stores nothing', async (field, body) => {
    const before = await db.pool.query('SELECT count(*)::int AS n FROM features.features');
    const response = await api.request('POST', '/api/features', { token, rawBody: withEscape(body, 'MARK'), headers: { 'content-type': 'application/json' } });
    expect(response.status).toBe(400);
    expect(response.json.code).toBe('VALIDATION_FAILED');
    expect(response.json.fields).toEqual([{ field, message: expect.stringMatching(/lone surrogate/) }]);
    expect(response.json.detail).toContain(field);
    const after = await db.pool.query('SELECT count(*)::int AS n FROM features.features');
    expect(after.rows[0].n).toBe(before.rows[0].n);
  });

  it('refuses one in a member name, and in the bodies of other routes', async () => {
    const key = await api.request('POST', '/api/features', { token, rawBody: '{"type":"Feature","\\udc00":1}', headers: { 'content-type': 'application/json' } });
    expect(key.status).toBe(400);
    expect(key.json.fields[0].field).toBe('\udc00');
    const submit = await api.request('POST', '/api/qc/submit', { token, rawBody: '{"featureId":"x","comment":"a\\ud800"}', headers: { 'content-type': 'application/json' } });
    expect(submit.status).toBe(400);
    expect(submit.json.fields).toEqual([{ field: 'comment', message: expect.stringMatching(/lone surrogate/) }]);
  });

  it('accepts a proper surrogate pair (an emoji written as an escape)', async () => {
    const response = await api.request('POST', '/api/features', { token, rawBody: withEscape(aFeature({ properties: { name: 'Rose MARK' } }), 'MARK').replace('\\ud800', '\\ud83c\\udf39'), headers: { 'content-type': 'application/json' } });
    expect(response.status, response.text).toBe(201);
    expect(response.json.properties.name).toBe('Rose 🌹');
  });
});

describe('unknown members', () => {
  it('rejects unknown properties by name instead of dropping them', async () => {
    await expectRejected(aFeature({ properties: { farbe: 'rot' } }), 'properties.farbe', /not a known property/);
    await expectRejected({ ...aFeature(), extra: true }, 'extra', /not a known property/);
    await expectRejected(aFeature({ geometry: { type: 'Point', coordinates: [1, 2], crs: 'EPSG:4326' } }), 'geometry.crs');
  });

  it('accepts the read-only properties of a fetched feature without applying them', async () => {
    const response = await expectAccepted(
      aFeature({ properties: { version: 77, status: 'approved', createdBy: 'mallory', createdAt: '2000-01-01T00:00:00Z', updatedBy: 'mallory', updatedAt: '2000-01-01T00:00:00Z' } }),
    );
    expect(response.json.properties).toMatchObject({ version: 1, status: 'draft', createdBy: 'vera', updatedBy: 'vera' });
    expect(response.json.properties.createdAt).not.toBe('2000-01-01T00:00:00Z');
  });
});

describe('id', () => {
  it('accepts URL-safe ids of 1 to 128 characters and rejects others', async () => {
    await expectAccepted(aFeature({ id: 'a' }));
    await expectAccepted(aFeature({ id: `x${'y'.repeat(127)}` }));
    await expectRejected(aFeature({ id: `x${'y'.repeat(128)}` }), 'id');
    for (const id of ['', 'mit leerzeichen', '../etc', 'ä', '-leading-hyphen']) await expectRejected(aFeature({ id }), 'id');
    await expectRejected({ ...aFeature(), id: 7 }, 'id');
  });
});

describe('geometry', () => {
  const g = (geometry: unknown) => aFeature({ geometry });

  it('accepts Point, LineString, Polygon and MultiPolygon, and nothing else', async () => {
    await expectAccepted(g({ type: 'Point', coordinates: [0, 0] }));
    await expectAccepted(g({ type: 'LineString', coordinates: [[0, 0], [1, 1]] }));
    await expectAccepted(g({ type: 'Polygon', coordinates: [[[0, 0], [1, 0], [1, 1], [0, 0]]] }));
    await expectAccepted(g({ type: 'MultiPolygon', coordinates: [[[[0, 0], [1, 0], [1, 1], [0, 0]]], [[[5, 5], [6, 5], [6, 6], [5, 5]]]] }));
    for (const type of ['MultiPoint', 'MultiLineString', 'GeometryCollection', 'point', 'Circle']) {
      await expectRejected(g({ type, coordinates: [0, 0] }), 'geometry.type', /Point, LineString, Polygon, MultiPolygon/);
    }
    await expectRejected({ ...aFeature(), geometry: null }, 'geometry');
  });

  it('requires coordinates to be an array', async () => {
    await expectRejected(g({ type: 'Point', coordinates: '0,0' }), 'geometry.coordinates');
    await expectRejected(g({ type: 'Polygon', coordinates: {} }), 'geometry.coordinates');
    await expectRejected(g({ type: 'LineString' }), 'geometry.coordinates');
  });

  it('bounds longitude to [-180, 180] and latitude to [-90, 90], inclusive', async () => {
    for (const coordinates of [[-180, -90], [180, 90], [0, 90], [-180, 0]]) await expectAccepted(g({ type: 'Point', coordinates }));
    await expectRejected(g({ type: 'Point', coordinates: [180.000001, 0] }), 'geometry.coordinates[0]', /longitude/);
    await expectRejected(g({ type: 'Point', coordinates: [-180.5, 0] }), 'geometry.coordinates[0]', /longitude/);
    await expectRejected(g({ type: 'Point', coordinates: [0, 90.0001] }), 'geometry.coordinates[1]', /latitude/);
    await expectRejected(g({ type: 'Point', coordinates: [0, -91] }), 'geometry.coordinates[1]', /latitude/);
    await expectRejected(g({ type: 'LineString', coordinates: [[0, 0], [0, 100]] }), 'geometry.coordinates[1][1]', /latitude/);
  });

  it('requires positions of exactly two numbers', async () => {
    await expectRejected(g({ type: 'Point', coordinates: [1] }), 'geometry.coordinates');
    await expectRejected(g({ type: 'Point', coordinates: [1, 2, 3] }), 'geometry.coordinates');
    await expectRejected(g({ type: 'Point', coordinates: ['1', 2] }), 'geometry.coordinates[0]');
    await expectRejected(g({ type: 'Point', coordinates: [] }), 'geometry.coordinates');
  });

  it('requires at least 2 positions in a LineString', async () => {
    await expectRejected(g({ type: 'LineString', coordinates: [[0, 0]] }), 'geometry.coordinates', /at least 2/);
  });

  it('requires rings of at least 4 positions, closed, and at least one ring', async () => {
    await expectRejected(g({ type: 'Polygon', coordinates: [[[0, 0], [1, 0], [0, 0]]] }), 'geometry.coordinates[0]', /at least 4/);
    await expectRejected(g({ type: 'Polygon', coordinates: [[[0, 0], [1, 0], [1, 1], [0, 1]]] }), 'geometry.coordinates[0]', /closed/);
    await expectRejected(g({ type: 'Polygon', coordinates: [] }), 'geometry.coordinates', /at least one ring/);
    await expectRejected(g({ type: 'MultiPolygon', coordinates: [] }), 'geometry.coordinates', /at least one polygon/);
    await expectRejected(g({ type: 'MultiPolygon', coordinates: [[[[0, 0], [1, 0], [1, 1], [0, 1]]]] }), 'geometry.coordinates[0][0]', /closed/);
  });

  it('rejects topologically invalid geometry with the reason PostGIS gives', async () => {
    const bowtie = { type: 'Polygon', coordinates: [[[0, 0], [1, 1], [1, 0], [0, 1], [0, 0]]] };
    const response = await expectRejected(g(bowtie), 'geometry', /Self-intersection/i);
    expect(response.json.detail).toMatch(/Self-intersection/i);
    // A ring of collinear points has no area; the hole-outside-shell case is invalid too.
    await expectRejected(g({ type: 'Polygon', coordinates: [[[0, 0], [1, 0], [2, 0], [0, 0]]] }), 'geometry');
    await expectRejected(
      g({ type: 'Polygon', coordinates: [[[0, 0], [1, 0], [1, 1], [0, 1], [0, 0]], [[5, 5], [6, 5], [6, 6], [5, 5]]] }),
      'geometry',
      /Hole lies outside shell/i,
    );
    await expectRejected(g({ type: 'LineString', coordinates: [[1, 1], [1, 1]] }), 'geometry');
  });

  it('stores nothing for a rejected body', async () => {
    const before = await db.pool.query('SELECT count(*)::int AS n FROM features.features');
    await post(g({ type: 'Polygon', coordinates: [[[0, 0], [1, 1], [1, 0], [0, 1], [0, 0]]] }));
    const after = await db.pool.query('SELECT count(*)::int AS n FROM features.features');
    expect(after.rows[0].n).toBe(before.rows[0].n);
  });
});

describe('PUT uses the same rules', () => {
  it('rejects an invalid replacement and leaves the feature unchanged', async () => {
    const created = await expectAccepted(aFeature());
    const put = await api.request('PUT', `/api/features/${created.json.id}`, { token, body: aFeature({ properties: { name: 'n'.repeat(256) } }) });
    expect(put.status).toBe(400);
    expect(put.json.fields[0].field).toBe('properties.name');
    const unchanged = await api.request('GET', `/api/features/${created.json.id}`);
    expect(unchanged.json.properties).toMatchObject({ name: 'Alter Friedhof', version: 1 });
  });
});
