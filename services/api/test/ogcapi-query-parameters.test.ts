import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApi } from '../../../test/helpers/api.js';

/**
 * The query parameters of /ogcapi at their edges: boxes across the antimeridian in every form a
 * client can send them, filters nested as deep as a URL allows, limits of any length, the parameters
 * GDAL sends to every resource, and database errors kept out of the answers.
 */
const { db, api } = useTestApi();

const OGC = '/ogcapi';
const ITEMS = `${OGC}/collections/features/items`;
const EPSG_4326 = 'http://www.opengis.net/def/crs/EPSG/0/4326';
const UTM_33 = 'http://www.opengis.net/def/crs/EPSG/0/25833';

beforeAll(async () => {
  // Two features on either side of the antimeridian, one in Berlin, one at Greenwich.
  await db.pool.query(
    `INSERT INTO features.features (id, name, kategorie, geom) VALUES
       ('east', 'Fidschi', 'denkmal', ST_SetSRID(ST_MakePoint(179.5, -17), 4326)),
       ('west', 'Samoa', 'denkmal', ST_SetSRID(ST_MakePoint(-179.5, -14), 4326)),
       ('berlin', 'Berlin', 'friedhof', ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326)),
       ('greenwich', 'Greenwich', 'blumenbeet', ST_SetSRID(ST_MakePoint(0, 51.48), 4326))`,
  );
});

const get = (path: string, headers: Record<string, string> = {}) => api.request('GET', path, { headers });
const ids = (body: { features: Array<{ id: string }> }) => body.features.map((f) => f.id).sort();
const filtered = (filter: string, extra = '') => get(`${ITEMS}?filter=${encodeURIComponent(filter)}${extra}`);

describe('a box whose west edge lies east of its east edge crosses the antimeridian', () => {
  it('bbox=179,-90,-179,90 selects the features on both sides of the antimeridian and nothing else', async () => {
    const response = await get(`${ITEMS}?bbox=179,-90,-179,90`);
    expect(response.status).toBe(200);
    expect(ids(response.json)).toEqual(['east', 'west']);
  });

  it('CQL2 text S_INTERSECTS(geometry, BBOX(179,-90,-179,90)) selects what bbox= selects', async () => {
    const response = await filtered('S_INTERSECTS(geometry,BBOX(179,-90,-179,90))');
    expect(response.status).toBe(200);
    expect(ids(response.json)).toEqual(['east', 'west']);
  });

  it('CQL2 JSON {"bbox":[179,-90,-179,90]} selects what bbox= selects, also with six numbers', async () => {
    const four = await filtered(JSON.stringify({ op: 's_intersects', args: [{ property: 'geometry' }, { bbox: [179, -90, -179, 90] }] }), '&filter-lang=cql2-json');
    expect(four.status).toBe(200);
    expect(ids(four.json)).toEqual(['east', 'west']);
    const six = await filtered(JSON.stringify({ op: 's_intersects', args: [{ property: 'geometry' }, { bbox: [179, -90, 0, -179, 90, 10] }] }), '&filter-lang=cql2-json');
    expect(ids(six.json)).toEqual(['east', 'west']);
  });

  it('in EPSG:4326 (latitude first) a box crosses the antimeridian when its west longitude exceeds its east one, as a filter and as bbox-crs', async () => {
    const filter = await filtered('S_INTERSECTS(geometry, BBOX(-90, 179, 90, -179))', `&filter-crs=${encodeURIComponent(EPSG_4326)}`);
    expect(filter.status).toBe(200);
    expect(ids(filter.json)).toEqual(['east', 'west']);
    const bbox = await get(`${ITEMS}?bbox=-90,179,90,-179&bbox-crs=${encodeURIComponent(EPSG_4326)}`);
    expect(bbox.status).toBe(200);
    expect(ids(bbox.json)).toEqual(['east', 'west']);
  });

  it('a box that does not cross still selects only what lies inside it, in any order of its operands', async () => {
    expect(ids((await filtered('S_INTERSECTS(BBOX(-1, 50, 14, 53), geometry)')).json)).toEqual(['berlin', 'greenwich']);
  });

  it('refuses a box crossing the antimeridian with a longitude beyond ±180, naming the filter', async () => {
    const response = await filtered('S_INTERSECTS(geometry, BBOX(190, -90, -179, 90))');
    expect(response.status).toBe(400);
    expect(response.json.code).toBe('INVALID_FILTER');
    expect(response.json.detail).toMatch(/antimeridian/);
  });
});

describe('filters nested as deep as the 16 KiB URL allows', () => {
  // Parentheses and + (a space) go into a query unescaped, so each level costs two or four characters.
  const cases: Array<[string, string, string]> = [
    ['7 000 nested parentheses', `${'('.repeat(7000)}name='x'${')'.repeat(7000)}`, ''],
    ['3 500 NOTs', `${'NOT+'.repeat(3500)}name='x'`, ''],
    ['CQL2 JSON with 300 nested nots', `${'{"op":"not","args":['.repeat(300)}{"op":"=","args":[{"property":"name"},"x"]}${']}'.repeat(300)}`, '&filter-lang=cql2-json'],
    ['CQL2 JSON of 7 000 nested arrays', `${'['.repeat(7000)}${']'.repeat(7000)}`, '&filter-lang=cql2-json'],
  ];
  for (const [what, filter, extra] of cases) {
    it(`refuses ${what} with a 400 naming the limit, within a second`, async () => {
      const started = performance.now();
      const response = await get(`${ITEMS}?filter=${filter}${extra}`);
      const elapsed = performance.now() - started;
      expect(response.status, response.text.slice(0, 300)).toBe(400);
      expect(response.json.code).toBe('INVALID_FILTER');
      if (!what.includes('arrays')) expect(response.json.detail).toMatch(/nested deeper than 64 levels/);
      expect(elapsed).toBeLessThan(1000);
    });
  }

  it('takes a filter nested exactly to the limit', async () => {
    const response = await get(`${ITEMS}?filter=${'('.repeat(63)}name='Berlin'${')'.repeat(63)}`);
    expect(response.status, response.text.slice(0, 300)).toBe(200);
    expect(ids(response.json)).toEqual(['berlin']);
  });
});

describe('limit', () => {
  it('caps any all-digit limit above the maximum, however long, instead of refusing it', async () => {
    for (const limit of ['10001', '99999999999', `1${'0'.repeat(400)}`, '000002']) {
      const response = await get(`${ITEMS}?limit=${limit}`);
      expect(response.status, `limit=${limit.slice(0, 20)}`).toBe(200);
      expect(response.json.features.length).toBe(limit === '000002' ? 2 : 4);
    }
  });

  it('still refuses a limit that is zero, negative, fractional or not a number', async () => {
    for (const limit of ['0', '000', '-1', '-99999999999', '1.5', '1e3', 'x', '', '+5', ' 5']) {
      const response = await get(`${ITEMS}?limit=${encodeURIComponent(limit)}`);
      expect(response.status, `limit=${limit}`).toBe(400);
      expect(response.json.fields).toEqual([{ field: 'limit', message: expect.any(String) }]);
    }
  });
});

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

describe('no database wording reaches a client', () => {
  it('a coordinate outside the domain of filter-crs is a 400 naming the filter, in our words', async () => {
    const response = await filtered('S_INTERSECTS(geometry,POINT(1e300 1e300))', `&filter-crs=${encodeURIComponent(UTM_33)}`);
    expect(response.status).toBe(400);
    expect(response.json.code).toBe('INVALID_FILTER');
    expect(response.json.fields).toEqual([{ field: 'filter', message: expect.any(String) }]);
    expect(response.text).not.toMatch(/postgis|transform|projection|lwgeom|\(\d{3,}\)/i);
  });

  it('a LIKE pattern PostgreSQL cannot read is a 400 naming the filter, in our words', async () => {
    const response = await filtered("name LIKE 'B\\'");
    expect(response.status).toBe(400);
    expect(response.json.code).toBe('INVALID_FILTER');
    expect(response.text).not.toMatch(/escape character|postgres|SQL/i);
  });
});

describe('case-insensitive comparison (CQL2 CASEI)', () => {
  it('CASEI(name) LIKE CASEI(…) finds a name in any spelling of its letters; plain LIKE keeps the case', async () => {
    await db.pool.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('muehle', 'Alter Friedhof an der MÜHLE', 'friedhof', ST_SetSRID(ST_MakePoint(13.41, 52.51), 4326))`);
    // Letters beyond ASCII fold as the database's LC_CTYPE says (C.UTF-8, en_US.UTF-8: ü = Ü); ASCII always.
    const casei = await filtered("CASEI(name) LIKE CASEI('%aLTer friedhof AN DER m%')");
    expect(casei.status, casei.text).toBe(200);
    expect(ids(casei.json)).toEqual(['muehle']);
    expect(ids((await filtered("name LIKE '%aLTer%'")).json)).toEqual([]);
    const json = await get(`${ITEMS}?filter-lang=cql2-json&filter=${encodeURIComponent(JSON.stringify({ op: '=', args: [{ op: 'casei', args: [{ property: 'kategorie' }] }, { op: 'casei', args: ['FRIEDHOF'] }] }))}`);
    expect(json.status, json.text).toBe(200);
    expect(ids(json.json)).toEqual(['berlin', 'muehle']);
  });

  it('CASEI of a number, of a function or of nothing is a 400 naming the filter', async () => {
    for (const filter of ["CASEI(version) = CASEI('1')", "CASEI(CASEI(name)) = 'x'", 'CASEI() = name']) {
      const response = await filtered(filter);
      expect(response.status, filter).toBe(400);
      expect(response.json.code, filter).toBe('INVALID_FILTER');
    }
  });
});
