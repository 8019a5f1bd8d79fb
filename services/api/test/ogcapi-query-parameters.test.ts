import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '../../../test/helpers/api.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';

/**
 * The query parameters of /ogcapi at their edges: boxes across the antimeridian in every form a
 * client can send them, filters nested as deep as a URL allows, limits of any length, the parameters
 * GDAL sends to every resource, and database errors kept out of the answers.
 */
let db: TestDatabase;
let api: TestApi;

const OGC = '/ogcapi';
const UTM_33 = 'http://www.opengis.net/def/crs/EPSG/0/25833';

beforeAll(async () => {
  db = await createTestDatabase();
  api = await startTestApi(db);
  // Two features on either side of the antimeridian, one in Berlin, one at Greenwich.
  await db.pool.query(
    `INSERT INTO features.features (id, name, kategorie, geom) VALUES
       ('east', 'Fidschi', 'denkmal', ST_SetSRID(ST_MakePoint(179.5, -17), 4326)),
       ('west', 'Samoa', 'denkmal', ST_SetSRID(ST_MakePoint(-179.5, -14), 4326)),
       ('berlin', 'Berlin', 'friedhof', ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326)),
       ('greenwich', 'Greenwich', 'blumenbeet', ST_SetSRID(ST_MakePoint(0, 51.48), 4326))`,
  );
});
afterAll(async () => {
  await api?.close();
  await db?.close();
});

const get = (path: string, headers: Record<string, string> = {}) => api.request('GET', path, { headers });

describe('the parameters GDAL appends to every request', () => {
  // GDAL's OAPIF driver appends the query of its connection URL (…/collections/features?crs=…) to
  // every request it makes, the landing page and the API definition included.
  const gdalQuery = `limit=10&bbox=12,51,14,53&crs=${encodeURIComponent(UTM_33)}&kategorie=denkmal&filter=${encodeURIComponent("name = 'x'")}`;

  it('the landing page, the API definition, the conformance and the collections answer with those parameters as without them', async () => {
    for (const path of [`${OGC}/`, `${OGC}`, `${OGC}/api`, `${OGC}/conformance`, `${OGC}/collections`, `${OGC}/collections/features/queryables`]) {
      const plain = await get(path);
      const withGdal = await get(`${path}?${gdalQuery}`);
      expect(withGdal.status, `${path}: ${withGdal.text.slice(0, 200)}`).toBe(200);
      expect(withGdal.headers.get('content-type'), path).toBe(plain.headers.get('content-type'));
    }
    const openapi = await get(`${OGC}/api?${gdalQuery}`);
    expect(openapi.headers.get('content-type')).toMatch(/^application\/vnd\.oai\.openapi\+json/);
    expect(openapi.json.openapi).toMatch(/^3\.0/);
  });

  it('still refuses an unknown parameter and a nonsense f there', async () => {
    for (const path of [`${OGC}/`, `${OGC}/api`]) {
      expect((await get(`${path}?f=xml`)).status, path).toBe(400);
      expect((await get(`${path}?${gdalQuery}&f=nonsense`)).status, path).toBe(400);
      expect((await get(`${path}?unbekannt=1`)).status, path).toBe(400);
    }
  });
});
