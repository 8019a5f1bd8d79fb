import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { createCollectionExtents } from '../src/ogcapi/extent.js';

/**
 * /req/core/fc-md-extent: each collection's extent is the bounding box of its features as PostGIS
 * computes it (not the whole world), and it follows writes: through the API at once, through SQL
 * (GeoServer WFS-T, psql) once the cache has aged.
 */
const { db, api } = useTestApi();
let alice: string;

beforeAll(async () => {
  alice = await api.tokenFor('admin', 'alice');
});

type Box = [number, number, number, number];

async function extentsServed(): Promise<Record<string, Box | undefined>> {
  const res = await api.request('GET', '/ogcapi/collections');
  expect(res.status).toBe(200);
  return Object.fromEntries(res.json.collections.map((c: { id: string; extent?: { spatial: { bbox: Box[]; crs: string } } }) => [c.id, c.extent?.spatial.bbox[0]]));
}

async function extentInPostgis(where = 'true'): Promise<Box | undefined> {
  const { rows } = await db.pool.query<{ box: Box | null }>(
    `SELECT CASE WHEN e IS NULL THEN NULL ELSE ARRAY[ST_XMin(e), ST_YMin(e), ST_XMax(e), ST_YMax(e)] END AS box
     FROM (SELECT ST_Extent(geom) AS e FROM features.features WHERE ${where}) x`,
  );
  return rows[0]?.box ?? undefined;
}

async function create(kategorie: string, geometry: unknown): Promise<string> {
  const res = await api.request('POST', '/api/features', { token: alice, body: aFeature({ geometry, properties: { kategorie } }) });
  expect(res.status, res.text).toBe(201);
  return res.json.id as string;
}

describe('the extent of the /ogcapi collections', () => {
  it('leaves the extent out for a collection without features', async () => {
    const served = await extentsServed();
    expect(served).toEqual({ features: undefined, friedhof: undefined, blumenbeet: undefined, denkmal: undefined });
  });

  it('is the bounding box of each collection’s features, as ST_Extent computes it', async () => {
    await create('friedhof', { type: 'Point', coordinates: [13.4, 52.5] });
    await create('friedhof', { type: 'Polygon', coordinates: [[[13.1, 52.3], [13.2, 52.3], [13.2, 52.4], [13.1, 52.4], [13.1, 52.3]]] });
    await create('denkmal', { type: 'LineString', coordinates: [[11.5, 48.1], [11.6, 48.2]] });
    const served = await extentsServed();
    expect(served.friedhof).toEqual([13.1, 52.3, 13.4, 52.5]);
    expect(served.denkmal).toEqual([11.5, 48.1, 11.6, 48.2]);
    expect(served.blumenbeet).toBeUndefined();
    expect(served.features).toEqual(await extentInPostgis());
    expect(served.features).toEqual([11.5, 48.1, 13.4, 52.5]);
    // The single-collection document says the same.
    const one = await api.request('GET', '/ogcapi/collections/denkmal');
    expect(one.json.extent).toEqual({ spatial: { bbox: [[11.5, 48.1, 11.6, 48.2]], crs: 'http://www.opengis.net/def/crs/OGC/1.3/CRS84' } });
  });

  it('grows at once when a feature is created through the API, and shrinks when it is deleted', async () => {
    await extentsServed(); // cached now
    const far = await create('blumenbeet', { type: 'Point', coordinates: [9.9, 53.55] });
    expect((await extentsServed()).blumenbeet).toEqual([9.9, 53.55, 9.9, 53.55]);
    expect((await extentsServed()).features).toEqual([9.9, 48.1, 13.4, 53.55]);
    const deleted = await api.request('DELETE', `/api/features/${far}`, { token: alice });
    expect(deleted.status).toBe(204);
    expect((await extentsServed()).blumenbeet).toBeUndefined();
    expect((await extentsServed()).features).toEqual([11.5, 48.1, 13.4, 52.5]);
  });

  it('follows a change through /ogcapi (Part 4) at once', async () => {
    await extentsServed();
    const created = await api.request('POST', '/ogcapi/collections/features/items', {
      token: alice,
      body: aFeature({ geometry: { type: 'Point', coordinates: [14.5, 51.0] }, properties: { kategorie: 'denkmal' } }),
    });
    expect(created.status, created.text).toBe(201);
    expect((await extentsServed()).denkmal).toEqual([11.5, 48.1, 14.5, 51.0]);
  });

  it('sees a write outside the API (SQL, WFS-T) once the cached extent is older than its maximum age', async () => {
    let clock = 0;
    const extents = createCollectionExtents(db.pool, { maxAgeMs: 60_000, now: () => clock });
    const before = (await extents.get()).get('friedhof');
    await db.pool.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('sql-far', 'Per SQL', 'friedhof', ST_SetSRID(ST_MakePoint(6.9, 50.9), 4326))`);
    clock = 59_000;
    expect((await extents.get()).get('friedhof')).toEqual(before);
    clock = 60_000;
    expect((await extents.get()).get('friedhof')).toEqual([6.9, 50.9, 13.4, 52.5]);
    expect((await extents.get()).get('features')).toEqual(await extentInPostgis());
  });
});
