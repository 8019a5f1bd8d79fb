import { Ajv } from 'ajv';
import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { CONFORMANCE } from '../src/ogcapi/conformance.js';

/**
 * Every conformance class /ogcapi declares, walked requirement by requirement over real HTTP. Each
 * test names the OGC requirement identifiers it covers (Part 1 17-069r4, Part 2 18-058r1, Part 3
 * 19-079r2, CQL2 21-065r2, Part 4 20-002 draft). The last test checks that /conformance declares
 * exactly the classes walked here, so a class is never declared without its tests.
 */
const { db, api } = useTestApi();
let alice: string;
const walked = new Set<string>();
const walk = (cls: string) => {
  walked.add(cls);
  return cls;
};

const OGC = '/ogcapi';
const ITEMS = `${OGC}/collections/features/items`;

beforeAll(async () => {
  alice = await api.tokenFor('contributor', 'alice');
  // 40 features on a grid around Berlin; ids c00…c39; every fifth a polygon; kategorie by id % 3.
  await db.pool.query(
    `INSERT INTO features.features (id, name, kategorie, adresse, geom)
     SELECT 'c' || lpad(i::text, 2, '0'), 'Objekt ' || i, (ARRAY['friedhof','blumenbeet','denkmal'])[1 + i % 3],
            CASE WHEN i % 4 = 0 THEN NULL ELSE 'Weg ' || i END,
            ST_SetSRID(CASE WHEN i % 5 = 0 THEN ST_MakeEnvelope(13 + i * 0.01, 52.5, 13.005 + i * 0.01, 52.505) ELSE ST_MakePoint(13 + i * 0.01, 52.5) END, 4326)
     FROM generate_series(0, 39) i`,
  );
});

const get = (path: string, headers: Record<string, string> = {}) => api.request('GET', path, { headers });
const ids = (body: { features: Array<{ id: string }> }) => body.features.map((f) => f.id);
const href = (url: string) => new URL(url).pathname + new URL(url).search;

async function sqlIds(where: string, values: unknown[] = []): Promise<string[]> {
  const { rows } = await db.pool.query<{ id: string }>(`SELECT id FROM features.features f WHERE ${where} ORDER BY id`, values);
  return rows.map((r) => r.id);
}

/** Every page of a listing, following next links. */
async function all(path: string): Promise<string[]> {
  const found: string[] = [];
  let next: string | undefined = path;
  for (let pages = 0; next && pages < 100; pages++) {
    const page = await get(next);
    expect(page.status, page.text).toBe(200);
    found.push(...ids(page.json));
    const link = (page.json.links as Array<{ rel: string; href: string }>).find((l) => l.rel === 'next');
    next = link && href(link.href);
  }
  return found;
}

describe(`Part 1 Core (${walk(CONFORMANCE.core)})`, () => {
  it('/req/core/root-op, /req/core/root-success: the landing page links the API definition, the conformance and the collections', async () => {
    const landing = await get(`${OGC}/`);
    expect(landing.status).toBe(200);
    const rels = (landing.json.links as Array<{ rel: string }>).map((l) => l.rel);
    expect(rels).toEqual(expect.arrayContaining(['self', 'alternate', 'service-desc', 'service-doc', 'conformance', 'data']));
  });

  it('/req/core/api-definition-op, /req/core/api-definition-success: the service-desc link returns the API definition', async () => {
    const landing = await get(`${OGC}/`);
    const desc = (landing.json.links as Array<{ rel: string; href: string }>).find((l) => l.rel === 'service-desc')!;
    const definition = await get(href(desc.href));
    expect(definition.status).toBe(200);
    expect(definition.json.openapi).toMatch(/^3\.0\./);
    expect(Object.keys(definition.json.paths)).toEqual(expect.arrayContaining(['/', '/conformance', '/collections', '/collections/{collectionId}', '/collections/{collectionId}/items', '/collections/{collectionId}/items/{featureId}']));
  });

  it('/req/core/conformance-op, /req/core/conformance-success: conformsTo lists the classes', async () => {
    const conformance = await get(`${OGC}/conformance`);
    expect(conformance.status).toBe(200);
    expect(conformance.json.conformsTo).toContain(CONFORMANCE.core);
  });

  it('/req/core/query-param-unknown, /req/core/query-param-invalid: an unknown or invalid parameter is a 400', async () => {
    for (const query of ['unknown=1', 'limit=0', 'limit=x', 'bbox=1,2,3', 'datetime=yesterday', 'datetime=2026-02-30', 'datetime=0000-01-01T00:00:00Z/..', 'kategorie=kirche', 'status=gone']) {
      const response = await get(`${ITEMS}?${query}`);
      expect(response.status, query).toBe(400);
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(response.json.code, query).toBe('INVALID_QUERY');
    }
  });

  it('/req/core/fc-md-op, /req/core/fc-md-success, /req/core/fc-md-links, /req/core/fc-md-items, /req/core/fc-md-extent: the collections with their links and extent', async () => {
    const collections = await get(`${OGC}/collections`);
    expect(collections.status).toBe(200);
    expect(collections.json.collections.map((c: { id: string }) => c.id)).toEqual(['features', 'friedhof', 'blumenbeet', 'denkmal']);
    for (const c of collections.json.collections) {
      const rels = c.links.map((l: { rel: string; type: string }) => `${l.rel} ${l.type}`);
      expect(rels).toEqual(expect.arrayContaining(['items application/geo+json', 'items text/html', 'self application/json']));
      expect(c.extent.spatial.bbox[0]).toHaveLength(4);
      expect(c.itemType).toBe('feature');
    }
  });

  it('/req/core/sfc-md-op, /req/core/sfc-md-success: one collection equals its entry in /collections; an unknown one is 404', async () => {
    const collections = await get(`${OGC}/collections`);
    const one = await get(`${OGC}/collections/denkmal`);
    expect(one.status).toBe(200);
    expect(one.json).toEqual(collections.json.collections.find((c: { id: string }) => c.id === 'denkmal'));
    expect((await get(`${OGC}/collections/kirchen`)).status).toBe(404);
  });

  it('/req/core/fc-op, /req/core/fc-response, /req/core/fc-numberReturned, /req/core/fc-numberMatched, /req/core/fc-timeStamp: a FeatureCollection with its counts', async () => {
    const whole = await get(`${ITEMS}?limit=100`);
    expect(whole.status).toBe(200);
    expect(whole.json.type).toBe('FeatureCollection');
    expect(whole.json.numberReturned).toBe(40);
    expect(whole.json.numberMatched).toBe(40);
    expect(Date.parse(whole.json.timeStamp)).not.toBeNaN();
    const page = await get(`${ITEMS}?limit=7`);
    expect(page.json.numberReturned).toBe(7);
    // Not cheap when more pages follow, so left out there (it is optional).
    expect(page.json.numberMatched).toBeUndefined();
  });

  it('/req/core/fc-limit-definition, /req/core/fc-limit-response: at most limit features; a limit above the maximum is capped', async () => {
    expect((await get(`${ITEMS}?limit=3`)).json.features).toHaveLength(3);
    const capped = await get(`${ITEMS}?limit=999999`);
    expect(capped.status).toBe(200);
    expect(capped.json.features).toHaveLength(40);
  });

  it('/req/core/fc-links, /req/core/fc-rel-type: self, alternate and next links; following next (and prev back) pages through every feature exactly once', async () => {
    const first = await get(`${ITEMS}?limit=9&kategorie=friedhof`);
    const rels = first.json.links.map((l: { rel: string }) => l.rel);
    expect(rels).toEqual(expect.arrayContaining(['self', 'alternate', 'next']));
    expect(rels).not.toContain('prev');
    expect(await all(`${ITEMS}?limit=4&kategorie=friedhof`)).toEqual(await sqlIds("kategorie = 'friedhof'"));
    const second = await get(href(first.json.links.find((l: { rel: string }) => l.rel === 'next').href));
    const back = await get(href(second.json.links.find((l: { rel: string }) => l.rel === 'prev').href));
    expect(ids(back.json)).toEqual(ids(first.json));
  });

  it('/req/core/fc-bbox-definition, /req/core/fc-bbox-response: only features intersecting the box, also with six numbers', async () => {
    const expected = await sqlIds('ST_Intersects(f.geom, ST_MakeEnvelope(13.095, 52.4, 13.205, 52.6, 4326))');
    expect(expected.length).toBeGreaterThan(5);
    expect(await all(`${ITEMS}?bbox=13.095,52.4,13.205,52.6&limit=4`)).toEqual(expected);
    expect(await all(`${ITEMS}?bbox=13.095,52.4,0,13.205,52.6,100`)).toEqual(expected);
  });

  it('/req/core/fc-time-definition, /req/core/fc-time-response: datetime selects on updatedAt, as an instant or a half-bounded interval', async () => {
    await db.pool.query("UPDATE features.features SET name = 'Später' WHERE id = 'c07'");
    const { rows } = await db.pool.query<{ t: string }>(`SELECT to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS t FROM features.features WHERE id = 'c07'`);
    const t = rows[0]!.t;
    expect(ids((await get(`${ITEMS}?datetime=${t}`)).json)).toEqual(['c07']);
    expect(ids((await get(`${ITEMS}?datetime=${t}/..`)).json)).toEqual(await sqlIds('updated_at >= $1::timestamptz', [t]));
    const before = new Date(Date.parse(t) - 1).toISOString();
    expect(ids((await get(`${ITEMS}?datetime=../${before}&limit=100`)).json)).toEqual(await sqlIds('updated_at <= $1::timestamptz', [before]));
    expect(ids((await get(`${ITEMS}?datetime=${t.slice(0, 10)}&limit=100`)).json)).toEqual(await sqlIds("(updated_at AT TIME ZONE 'UTC')::date = $1::date", [t.slice(0, 10)]));
  });

  it('/req/core/f-op, /req/core/f-success, /req/core/f-links: one feature with its self, alternate and collection links; unknown → 404', async () => {
    const item = await get(`${OGC}/collections/friedhof/items/c03`);
    expect(item.status).toBe(200);
    expect(item.json).toMatchObject({ type: 'Feature', id: 'c03', properties: { kategorie: 'friedhof' } });
    expect(item.json.links.map((l: { rel: string }) => l.rel)).toEqual(expect.arrayContaining(['self', 'alternate', 'collection']));
    expect((await get(`${OGC}/collections/denkmal/items/c03`)).status).toBe(404);
    expect((await get(`${OGC}/collections/friedhof/items/nope`)).status).toBe(404);
  });
});

describe(`Part 1 GeoJSON (${walk(CONFORMANCE.geojson)})`, () => {
  it('/req/geojson/definition, /req/geojson/content: items and items/{id} are application/geo+json by default', async () => {
    for (const path of [ITEMS, `${ITEMS}/c01`]) {
      const response = await get(path, { accept: 'application/geo+json' });
      expect(response.headers.get('content-type')).toMatch(/^application\/geo\+json/);
    }
  });
});

describe(`Part 1 HTML (${walk(CONFORMANCE.html)})`, () => {
  it('/req/html/definition, /req/html/content: every resource as an HTML page, by f=html or by the Accept header of a browser', async () => {
    for (const path of [`${OGC}/`, `${OGC}/conformance`, `${OGC}/collections`, `${OGC}/collections/friedhof`, `${ITEMS}`, `${ITEMS}/c01`]) {
      const byAccept = await get(path, { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' });
      expect(byAccept.headers.get('content-type'), path).toMatch(/^text\/html/);
      expect(byAccept.text).toMatch(/^<!doctype html>/);
      const byF = await get(`${path}${path.includes('?') ? '&' : '?'}f=html`);
      expect(byF.headers.get('content-type')).toMatch(/^text\/html/);
    }
    const item = await get(`${ITEMS}/c01?f=html`);
    expect(item.text).toContain('Objekt 1');
  });

  it('escapes feature data in HTML', async () => {
    await db.pool.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('x-html', '<script>alert(1)</script>', 'denkmal', ST_SetSRID(ST_MakePoint(1, 1), 4326))`);
    const page = await get(`${OGC}/collections/denkmal/items/x-html?f=html`);
    expect(page.text).not.toContain('<script>alert');
    expect(page.text).toContain('&lt;script&gt;');
    await db.pool.query(`DELETE FROM features.features WHERE id = 'x-html'`);
  });
});

describe(`Part 1 OpenAPI 3.0 (${walk(CONFORMANCE.oas30)})`, () => {
  it('/req/oas30/oas-definition-1, /req/oas30/oas-definition-2: the definition as OpenAPI 3.0 JSON and as HTML', async () => {
    const landing = await get(`${OGC}/`);
    const links = landing.json.links as Array<{ rel: string; type: string }>;
    expect(links.find((l) => l.rel === 'service-desc')!.type).toBe('application/vnd.oai.openapi+json;version=3.0');
    expect(links.find((l) => l.rel === 'service-doc')!.type).toBe('text/html');
    expect((await get(`${OGC}/api`)).headers.get('content-type')).toMatch(/^application\/vnd\.oai\.openapi\+json/);
  });

  it('/req/oas30/oas-impl: the responses validate against the schemas of the definition', async () => {
    const definition = (await get(`${OGC}/api`)).json;
    const ajv = new Ajv({ strict: false, allErrors: true });
    ajv.addSchema({ ...definition, $id: 'oas' });
    const collection = ajv.getSchema('oas#/components/schemas/OgcFeatureCollection')!;
    const feature = ajv.getSchema('oas#/components/schemas/OgcFeature')!;
    const page = await get(`${ITEMS}?limit=50`);
    expect(collection(page.json), JSON.stringify(collection.errors)).toBe(true);
    const item = await get(`${ITEMS}/c05`);
    expect(feature(item.json), JSON.stringify(feature.errors)).toBe(true);
  });
});

describe(`Part 2 CRS (${walk(CONFORMANCE.crs)})`, () => {
  const UTM = 'http://www.opengis.net/def/crs/EPSG/0/25833';
  const LATLON = 'http://www.opengis.net/def/crs/EPSG/0/4326';

  it('/req/crs/fc-md-crs-list, /req/crs/fc-md-storageCrs: each collection lists its CRS and the storage CRS', async () => {
    const c = (await get(`${OGC}/collections/features`)).json;
    expect(c.crs).toEqual(expect.arrayContaining(['http://www.opengis.net/def/crs/OGC/1.3/CRS84', LATLON, 'http://www.opengis.net/def/crs/EPSG/0/25832', UTM, 'http://www.opengis.net/def/crs/EPSG/0/3857']));
    expect(c.storageCrs).toBe('http://www.opengis.net/def/crs/OGC/1.3/CRS84');
  });

  it('/req/crs/fc-crs-definition, /req/crs/crs-action, /req/crs/ogc-crs-header, /req/crs/ogc-crs-header-value: coordinates in the requested CRS, named by Content-Crs', async () => {
    const utm = await get(`${ITEMS}/c01?crs=${encodeURIComponent(UTM)}`);
    expect(utm.headers.get('content-crs')).toBe(`<${UTM}>`);
    const { rows } = await db.pool.query<{ x: number; y: number }>("SELECT ST_X(ST_Transform(geom, 25833)) AS x, ST_Y(ST_Transform(geom, 25833)) AS y FROM features.features WHERE id = 'c01'");
    expect(utm.json.geometry.coordinates[0]).toBeCloseTo(rows[0]!.x, 3);
    expect(utm.json.geometry.coordinates[1]).toBeCloseTo(rows[0]!.y, 3);
    const latlon = await get(`${ITEMS}/c01?crs=${encodeURIComponent(LATLON)}`);
    expect(latlon.json.geometry.coordinates).toEqual([52.5, 13.01]);
    const page = await get(`${ITEMS}?crs=${encodeURIComponent(UTM)}&limit=2`);
    expect(page.headers.get('content-crs')).toBe(`<${UTM}>`);
    expect(page.json.features[0].geometry.coordinates[0][0][0]).toBeGreaterThan(300_000);
    expect((await get(ITEMS)).headers.get('content-crs')).toBe('<http://www.opengis.net/def/crs/OGC/1.3/CRS84>');
  });

  it('/req/crs/fc-crs-valid-value, /req/crs/fc-bbox-crs-valid-value: an unsupported CRS is a 400', async () => {
    expect((await get(`${ITEMS}?crs=EPSG:31467`)).status).toBe(400);
    expect((await get(`${ITEMS}?bbox=1,2,3,4&bbox-crs=EPSG:31467`)).status).toBe(400);
  });

  it('/req/crs/fc-bbox-crs-definition, /req/crs/fc-bbox-crs-action: a bbox in UTM or lat/lon selects what the same box in CRS84 selects', async () => {
    const { rows } = await db.pool.query<{ box: string }>(
      `SELECT concat_ws(',', ST_XMin(b), ST_YMin(b), ST_XMax(b), ST_YMax(b)) AS box FROM (SELECT ST_Transform(ST_MakeEnvelope(13.095, 52.4, 13.205, 52.6, 4326), 25833)::box2d AS b) t`,
    );
    const expected = await sqlIds('ST_Intersects(f.geom, ST_MakeEnvelope(13.095, 52.4, 13.205, 52.6, 4326))');
    expect(ids((await get(`${ITEMS}?bbox=${rows[0]!.box}&bbox-crs=${encodeURIComponent(UTM)}&limit=100`)).json)).toEqual(expected);
    expect(ids((await get(`${ITEMS}?bbox=52.4,13.095,52.6,13.205&bbox-crs=${encodeURIComponent(LATLON)}&limit=100`)).json)).toEqual(expected);
  });
});

describe(`Part 3 Queryables (${walk(CONFORMANCE.queryables)}) and their query parameters (${walk(CONFORMANCE.queryablesQueryParameters)})`, () => {
  it('/req/queryables/get-queryables-op, /req/queryables/get-queryables-response: a JSON Schema of the queryables, linked from the collection', async () => {
    const c = (await get(`${OGC}/collections/friedhof`)).json;
    const link = c.links.find((l: { rel: string }) => l.rel === 'http://www.opengis.net/def/rel/ogc/1.0/queryables');
    const queryables = await get(href(link.href));
    expect(queryables.status).toBe(200);
    expect(queryables.headers.get('content-type')).toMatch(/^application\/schema\+json/);
    expect(queryables.json).toMatchObject({ type: 'object', $schema: 'https://json-schema.org/draft/2020-12/schema' });
    expect(Object.keys(queryables.json.properties)).toEqual(expect.arrayContaining(['name', 'kategorie', 'status', 'updatedAt', 'geometry']));
  });

  it('/req/queryables-query-parameters/parameters: kategorie and status as query parameters select like the equal filter', async () => {
    await db.pool.query("UPDATE features.features SET status = 'approved' WHERE id IN ('c02', 'c05')");
    expect(await all(`${ITEMS}?kategorie=denkmal&limit=5`)).toEqual(await sqlIds("kategorie = 'denkmal'"));
    expect(ids((await get(`${ITEMS}?status=approved`)).json)).toEqual(['c02', 'c05']);
    expect(ids((await get(`${OGC}/collections/blumenbeet/items?status=approved`)).json)).toEqual(await sqlIds("status = 'approved' AND kategorie = 'blumenbeet'"));
    expect((await get(`${OGC}/collections/friedhof/items?kategorie=denkmal`)).json.features).toEqual([]);
  });
});

describe(`Part 3 Filter (${walk(CONFORMANCE.filter)}, ${walk(CONFORMANCE.featuresFilter)}) with CQL2 text (${walk(CONFORMANCE.cql2Text)}) and JSON (${walk(CONFORMANCE.cql2Json)})`, () => {
  const filtered = (filter: string, extra = '') => all(`${ITEMS}?filter=${encodeURIComponent(filter)}&limit=7${extra}`);

  it('/req/filter/filter-param, /req/filter/response, /req/features-filter/filter-param: only the features the filter selects, across pages', async () => {
    expect(await filtered("kategorie = 'denkmal' OR name = 'Objekt 3'")).toEqual(await sqlIds("kategorie = 'denkmal' OR name = 'Objekt 3'"));
  });

  it('/req/filter/filter-lang-param, /req/cql2-json/basic-cql2: the same filter in CQL2 JSON selects the same features', async () => {
    const json = JSON.stringify({ op: 'or', args: [{ op: '=', args: [{ property: 'kategorie' }, 'denkmal'] }, { op: '=', args: [{ property: 'name' }, 'Objekt 3'] }] });
    expect(await filtered(json, '&filter-lang=cql2-json')).toEqual(await sqlIds("kategorie = 'denkmal' OR name = 'Objekt 3'"));
    expect((await get(`${ITEMS}?filter=x&filter-lang=ecql`)).status).toBe(400);
  });

  it('/req/filter/mixing-expression: filter, bbox and kategorie combine with AND', async () => {
    const got = await filtered("kategorie <> 'friedhof'", '&bbox=13.095,52.4,13.205,52.6');
    expect(got).toEqual(await sqlIds("kategorie <> 'friedhof' AND ST_Intersects(f.geom, ST_MakeEnvelope(13.095, 52.4, 13.205, 52.6, 4326))"));
  });

  it('a bad filter is a 400 naming the position of the error (text) or its JSON path (JSON)', async () => {
    const text = await get(`${ITEMS}?filter=${encodeURIComponent("name = = 'x'")}`);
    expect(text.status).toBe(400);
    expect(text.json.code).toBe('INVALID_FILTER');
    expect(text.json.detail).toMatch(/at position 7/);
    const trailing = await get(`${ITEMS}?filter=${encodeURIComponent("name = 'O''Brien' )")}`);
    expect(trailing.json.detail).toMatch(/at position 18/);
    const json = await get(`${ITEMS}?filter-lang=cql2-json&filter=${encodeURIComponent('{"op":"and","args":[{"op":"=","args":[{"property":"name"},"x"]},{"op":"near","args":[]}]}')}`);
    expect(json.status).toBe(400);
    expect(json.json.detail).toMatch(/at \/args\/1\/op/);
    const unknown = await get(`${ITEMS}?filter=${encodeURIComponent("farbe = 'rot'")}`);
    expect(unknown.status).toBe(400);
    expect(unknown.json.detail).toMatch(/unknown property "farbe"/);
    const mistyped = await get(`${ITEMS}?filter=${encodeURIComponent("version = 'eins'")}`);
    expect(mistyped.status).toBe(400);
  });

  it('a filter cannot reach SQL: quotes and SQL text in literals are values, not code', async () => {
    const sneaky = await get(`${ITEMS}?filter=${encodeURIComponent("name = 'x'' OR ''1''=''1' OR name = 'Objekt 4'")}`);
    expect(sneaky.status).toBe(200);
    expect(ids(sneaky.json)).toEqual(['c04']);
  });
});

describe(`CQL2 Basic (${walk(CONFORMANCE.basicCql2)}) and advanced comparison operators (${walk(CONFORMANCE.advancedComparison)})`, () => {
  const cases: Array<[string, string]> = [
    ["NOT (kategorie = 'friedhof') AND version >= 1", "NOT (kategorie = 'friedhof') AND version >= 1"],
    ['adresse IS NULL', 'adresse IS NULL'],
    ['adresse IS NOT NULL AND version < 2', 'adresse IS NOT NULL AND version < 2'],
    ["updatedAt > TIMESTAMP('2000-01-01T00:00:00Z')", "updated_at > '2000-01-01T00:00:00Z'"],
    ["createdAt >= DATE('2000-01-01')", 'TRUE'],
    ["name LIKE 'Objekt 1%'", "name LIKE 'Objekt 1%'"],
    ["name NOT LIKE 'Objekt 1_'", "name NOT LIKE 'Objekt 1_'"],
    ["kategorie IN ('denkmal', 'blumenbeet')", "kategorie IN ('denkmal', 'blumenbeet')"],
    ['version BETWEEN 1 AND 1', 'version BETWEEN 1 AND 1'],
    ["\"name\" = 'Objekt 9'", "name = 'Objekt 9'"],
  ];
  for (const [filter, where] of cases) {
    it(`/req/basic-cql2/*, /req/advanced-comparison-operators/*: ${filter}`, async () => {
      expect(await all(`${ITEMS}?limit=100&filter=${encodeURIComponent(filter)}`)).toEqual(await sqlIds(where));
    });
  }
});

describe(`CQL2 case-insensitive comparison (${walk(CONFORMANCE.caseInsensitive)})`, () => {
  const cases: Array<[string, string]> = [
    ["CASEI(name) LIKE CASEI('oBJEKT 1%')", "lower(name) LIKE 'objekt 1%'"],
    ["CASEI(name) = CASEI('OBJEKT 9')", "lower(name) = 'objekt 9'"],
    ["CASEI(kategorie) IN (CASEI('DENKMAL'), CASEI('Blumenbeet'))", "kategorie IN ('denkmal', 'blumenbeet')"],
    ["CASEI(\"name\") <> CASEI('objekt 9') AND name LIKE 'Objekt 1_'", "lower(name) <> 'objekt 9' AND name LIKE 'Objekt 1_'"],
  ];
  for (const [filter, where] of cases) {
    it(`/req/case-insensitive-comparison/*: ${filter}`, async () => {
      expect(await all(`${ITEMS}?limit=100&filter=${encodeURIComponent(filter)}`)).toEqual(await sqlIds(where));
    });
  }
  it('/req/case-insensitive-comparison/*: the same in CQL2 JSON', async () => {
    const filter = { op: 'like', args: [{ op: 'casei', args: [{ property: 'name' }] }, { op: 'casei', args: ['oBJEKT 1%'] }] };
    expect(await all(`${ITEMS}?limit=100&filter-lang=cql2-json&filter=${encodeURIComponent(JSON.stringify(filter))}`)).toEqual(await sqlIds("lower(name) LIKE 'objekt 1%'"));
  });
});

describe(`CQL2 basic spatial functions (${walk(CONFORMANCE.basicSpatial)}) plus other geometry literals (${walk(CONFORMANCE.basicSpatialPlus)})`, () => {
  const cases: Array<[string, string]> = [
    ['S_INTERSECTS(geometry, BBOX(13.095, 52.4, 13.205, 52.6))', 'ST_Intersects(f.geom, ST_MakeEnvelope(13.095, 52.4, 13.205, 52.6, 4326))'],
    ['S_INTERSECTS(geometry, POINT(13.2 52.5))', "ST_Intersects(f.geom, 'SRID=4326;POINT(13.2 52.5)'::geometry)"],
    ['S_INTERSECTS(geometry, POLYGON((13.0 52.0, 13.15 52.0, 13.15 53.0, 13.0 53.0, 13.0 52.0)))', "ST_Intersects(f.geom, 'SRID=4326;POLYGON((13.0 52.0, 13.15 52.0, 13.15 53.0, 13.0 53.0, 13.0 52.0))'::geometry)"],
    ['S_INTERSECTS(geometry, LINESTRING(13.001 52.502, 13.004 52.502))', "ST_Intersects(f.geom, 'SRID=4326;LINESTRING(13.001 52.502, 13.004 52.502)'::geometry)"],
    ['S_INTERSECTS(geometry, MULTIPOINT((13.3 52.5), (13.4 52.5)))', "ST_Intersects(f.geom, 'SRID=4326;MULTIPOINT((13.3 52.5), (13.4 52.5))'::geometry)"],
  ];
  for (const [filter, where] of cases) {
    it(`/req/basic-spatial-functions/spatial-predicates, /req/basic-spatial-functions-plus/*: ${filter}`, async () => {
      const expected = await sqlIds(where);
      expect(expected.length).toBeGreaterThan(0);
      expect(await all(`${ITEMS}?limit=100&filter=${encodeURIComponent(filter)}`)).toEqual(expected);
    });
  }

  it('/req/filter/filter-crs-wgs84 and filter-crs: a literal in EPSG:25833 selects what the same shape in CRS84 selects', async () => {
    const { rows } = await db.pool.query<{ x: number; y: number }>("SELECT ST_X(g) AS x, ST_Y(g) AS y FROM (SELECT ST_Transform('SRID=4326;POINT(13.2 52.5)'::geometry, 25833) g) t");
    const [x, y] = [rows[0]!.x, rows[0]!.y];
    // A 2 m square around the point (a transformed point is not bit-identical to the stored one).
    const filter = `S_INTERSECTS(geometry, POLYGON((${x - 1} ${y - 1}, ${x + 1} ${y - 1}, ${x + 1} ${y + 1}, ${x - 1} ${y + 1}, ${x - 1} ${y - 1})))`;
    const got = await get(`${ITEMS}?filter=${encodeURIComponent(filter)}&filter-crs=${encodeURIComponent('http://www.opengis.net/def/crs/EPSG/0/25833')}`);
    expect(ids(got.json)).toEqual(['c20']);
  });

  it('a geometry literal PostGIS cannot use (an open ring) is a 400, not a 500', async () => {
    const response = await get(`${ITEMS}?filter=${encodeURIComponent('S_INTERSECTS(geometry, POLYGON((13 52, 14 52, 14 53, 13 52.5)))')}`);
    expect(response.status).toBe(400);
    expect(response.json.code).toBe('INVALID_FILTER');
  });
});

describe(`Part 4 (${walk(CONFORMANCE.createReplaceDelete)}, ${walk(CONFORMANCE.update)}, ${walk(CONFORMANCE.features4)}, ${walk(CONFORMANCE.optimisticLocking)})`, () => {
  // The full walk with roles, QC and history rows is ogcapi-writes.test.ts; this is the requirements' path.
  it('/req/create-replace-delete/post-op, /req/create-replace-delete/post-response, /req/create-replace-delete/put-op, /req/update/patch-op, /req/create-replace-delete/delete-op, /req/optimistic-locking-etags/*', async () => {
    const created = await api.request('POST', `${OGC}/collections/denkmal/items`, { token: alice, body: aFeature({ properties: { kategorie: 'denkmal' } }) });
    expect(created.status).toBe(201);
    const location = href(created.headers.get('location')!);
    expect((await get(location)).status).toBe(200);
    const put = await api.request('PUT', location, { token: alice, body: aFeature({ properties: { kategorie: 'denkmal', name: 'Zwei' } }), headers: { 'if-match': created.headers.get('etag')! } });
    expect(put.status).toBe(200);
    const patch = await api.request('PATCH', location, { token: alice, rawBody: '{"properties":{"name":"Drei"}}', headers: { 'content-type': 'application/merge-patch+json', 'if-match': put.headers.get('etag')! } });
    expect(patch.status).toBe(200);
    expect(patch.json.properties.name).toBe('Drei');
    const stale = await api.request('PATCH', location, { token: alice, rawBody: '{"properties":{"name":"Vier"}}', headers: { 'content-type': 'application/merge-patch+json', 'if-match': put.headers.get('etag')! } });
    expect(stale.status).toBe(412);
    const admin = await api.tokenFor('admin', 'root');
    expect((await api.request('DELETE', location, { token: admin })).status).toBe(204);
    expect((await get(location)).status).toBe(404);
  });
});

describe('the conformance declaration', () => {
  it('declares exactly the classes walked in this file', async () => {
    const conformance = await get(`${OGC}/conformance`);
    expect(new Set(conformance.json.conformsTo)).toEqual(walked);
  });
});
