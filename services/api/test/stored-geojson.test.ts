import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { isDeepStrictEqual } from 'node:util';

/**
 * Each feature row keeps its GeoJSON ready (features.features.geojson, migration 006) and lists only
 * concatenate it. These tests check that the stored text never disagrees with the row, whoever wrote
 * it: against a rendering built here from the row's columns, independent of the trigger's function.
 */
const { db, api } = useTestApi({ queue: true }); // queue: QC decisions queue their side effects
let alice: string;
let rita: string;

beforeAll(async () => {
  alice = await api.tokenFor('contributor', 'alice');
  rita = await api.tokenFor('reviewer', 'rita');
});

/** Rows whose stored text differs from what their columns say now. */
async function disagreeingRows(): Promise<Array<{ id: string; stored: unknown; expected: unknown }>> {
  const { rows } = await db.pool.query<{ id: string; stored: string; expected: unknown }>(`
    SELECT f.id, f.geojson AS stored, json_build_object(
      'type', 'Feature', 'id', f.id,
      'geometry', ST_AsGeoJSON(CASE WHEN GeometryType(f.geom) IN ('POLYGON', 'MULTIPOLYGON') THEN ST_ForcePolygonCCW(f.geom) ELSE f.geom END, 9)::json,
      'properties', json_strip_nulls(json_build_object(
        'name', f.name, 'kategorie', f.kategorie, 'adresse', f.adresse, 'telefon', f.telefon,
        'status', f.status, 'version', f.version, 'createdBy', f.created_by, 'updatedBy', f.updated_by,
        'createdAt', to_char(f.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'updatedAt', to_char(f.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')))) AS expected
    FROM features.features f ORDER BY f.id`);
  expect(rows.length).toBeGreaterThan(0);
  return rows
    .map((r) => ({ id: r.id, stored: JSON.parse(r.stored) as unknown, expected: r.expected }))
    .filter((r) => !isDeepStrictEqual(r.stored, r.expected));
}

describe('the stored GeoJSON of a feature', () => {
  it('matches the row after API writes: create, replace, QC transitions, no-op PUT', async () => {
    const created = await api.request('POST', '/api/features', { token: alice, body: aFeature({ id: 'via-api', properties: { telefon: '030 1' } }) });
    expect(created.status).toBe(201);
    await api.request('PUT', '/api/features/via-api', { token: alice, body: aFeature({ properties: { name: 'renamed', adresse: 'Weg 1' } }) });
    const submitted = await api.request('POST', '/api/qc/submit', { token: alice, body: { featureId: 'via-api' } });
    expect(submitted.status, submitted.text).toBe(200);
    const approved = await api.request('POST', '/api/qc/approve/via-api', { token: rita });
    expect(approved.status, approved.text).toBe(200);
    const fetched = await api.request('GET', '/api/features/via-api');
    expect(fetched.json.properties).toMatchObject({ status: 'approved', version: 2 });
    await api.request('PUT', '/api/features/via-api', { token: alice, body: fetched.json });
    expect(await disagreeingRows()).toEqual([]);
  });

  it('matches the row after direct SQL writes, in another session time zone too', async () => {
    const client = await db.pool.connect();
    try {
      await client.query(`SET TIME ZONE 'Pacific/Chatham'`);
      await client.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('via-sql', 'SQL', 'denkmal', ST_GeomFromText('POINT(13.123456789012 52.5)', 4326))`);
      await client.query(`UPDATE features.features SET name = 'SQL renamed', telefon = '+49 1' WHERE id = 'via-sql'`);
      await client.query(`UPDATE features.features SET status = 'approved' WHERE id = 'via-sql'`);
      // A writer trying to set the rendering itself is overruled by the trigger.
      await client.query(`UPDATE features.features SET geojson = '{"forged":true}' WHERE id = 'via-sql'`);
    } finally {
      await client.query('RESET TIME ZONE');
      client.release();
    }
    expect(await disagreeingRows()).toEqual([]);
    const served = await api.request('GET', '/api/features/via-sql');
    expect(served.json.properties).toMatchObject({ name: 'SQL renamed', telefon: '+49 1', version: 3 });
  });

  it('matches the row after WFS-T-style writes (GeoServer: insert with a clockwise polygon, update of the geometry, delete)', async () => {
    // What GeoServer's PostGIS datastore sends for a WFS-T transaction: plain parameterised INSERT,
    // UPDATE and DELETE on the table, geometry as WKB, in one transaction, without app.actor.
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(
        `INSERT INTO features.features (id, name, kategorie, geom) VALUES ($1, $2, $3, ST_GeomFromWKB(ST_AsBinary(ST_GeomFromText($4)), 4326))`,
        ['wfs-1', 'WFS', 'friedhof', 'POLYGON((0 0, 0 1, 1 1, 1 0, 0 0))'],
      );
      await client.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('wfs-2', 'WFS 2', 'blumenbeet', ST_GeomFromText('POINT(1 1)', 4326))`);
      await client.query(`UPDATE features.features SET geom = ST_GeomFromText('MULTIPOLYGON(((0 0, 0 2, 2 2, 2 0, 0 0)))', 4326) WHERE id = $1`, ['wfs-1']);
      await client.query(`DELETE FROM features.features WHERE id = 'wfs-2'`);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect(await disagreeingRows()).toEqual([]);
    const listed = await api.request('GET', '/api/features?bbox=-1,-1,3,3');
    expect(listed.json.features.map((f: { id: string }) => f.id)).toEqual(['wfs-1']);
    expect(listed.json.features[0].geometry).toEqual({ type: 'MultiPolygon', coordinates: [[[[0, 0], [2, 0], [2, 2], [0, 2], [0, 0]]]] });
  });
});
