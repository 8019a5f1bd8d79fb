import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { aFeature, useTestApi, type FeatureJson, type TestResponse } from '../../../test/helpers/api.js';

const { db, api } = useTestApi();
let token: string;

beforeAll(async () => {
  token = await api.tokenFor('contributor', 'lena');
});
beforeEach(async () => {
  await db.pool.query('DELETE FROM features.features');
});

/** Insert points directly (fast), ids p00000…, returns their ids. */
async function seedPoints(count: number, options: { lon?: (i: number) => number; lat?: (i: number) => number; prefix?: string } = {}) {
  const prefix = options.prefix ?? 'p';
  const lons = Array.from({ length: count }, (_, i) => options.lon?.(i) ?? 10 + (i % 100) / 100);
  const lats = Array.from({ length: count }, (_, i) => options.lat?.(i) ?? 50 + Math.floor(i / 100) / 100);
  const { rows } = await db.pool.query<{ id: string }>(
    `INSERT INTO features.features (id, name, kategorie, geom)
     SELECT $1::text || lpad(i::text, 5, '0'), 'P' || i, (ARRAY['friedhof','blumenbeet','denkmal'])[1 + i % 3],
            ST_SetSRID(ST_MakePoint(($2::float8[])[i + 1], ($3::float8[])[i + 1]), 4326)
     FROM generate_series(0, $4::int - 1) AS i
     RETURNING id`,
    [prefix, lons, lats, count],
  );
  return rows.map((r) => r.id);
}

const list = (query: string) => api.request('GET', `/api/features${query}`);

describe('GET /api/features', () => {
  it('returns a GeoJSON FeatureCollection with application/geo+json', async () => {
    await seedPoints(3);
    const response = await list('');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^application\/geo\+json/);
    expect(response.json).toMatchObject({ type: 'FeatureCollection', numberReturned: 3, links: [] });
    expect(response.json.features[0]).toMatchObject({ type: 'Feature', id: 'p00000', geometry: { type: 'Point' }, properties: { name: 'P0', version: 1 } });
  });

  it('answers the stored texts byte for byte, with multi-byte characters and a Content-Length that counts bytes', async () => {
    await db.pool.query(`
      INSERT INTO features.features (id, name, kategorie, adresse, geom) VALUES
        ('u1', 'Grünanlage 🌳', 'blumenbeet', 'Schloßstraße 1', ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326)),
        ('u2', '“Œuvre” — ½', 'denkmal', NULL, ST_SetSRID(ST_MakePoint(13.5, 52.5), 4326)),
        ('u3', 'plain', 'friedhof', NULL, ST_SetSRID(ST_MakePoint(13.6, 52.5), 4326))`);
    const { rows } = await db.pool.query<{ geojson: string }>(`SELECT geojson FROM features.features ORDER BY id`);
    const expected = `{"type":"FeatureCollection","numberReturned":3,"links":[],"features":[${rows.map((r) => r.geojson).join(',')}]}`;
    for (const query of ['', '?bbox=13,52,14,53']) {
      const response = await list(query);
      expect(response.text).toBe(expected);
      expect(Number(response.headers.get('content-length'))).toBe(Buffer.byteLength(expected));
    }
  });

  it('returns an empty collection for an empty table', async () => {
    const response = await list('?bbox=-180,-90,180,90');
    expect(response.json).toEqual({ type: 'FeatureCollection', numberReturned: 0, links: [], features: [] });
  });

  it('pages by 100 by default and caps limit at 10 000', async () => {
    await seedPoints(10_005);
    const first = await list('');
    expect(first.json.numberReturned).toBe(100);
    expect(first.json.links[0].rel).toBe('next');
    const capped = await list('?limit=20000');
    expect(capped.json.numberReturned).toBe(10_000);
    const rest = await api.request('GET', capped.json.links[0].href);
    expect(rest.json.numberReturned).toBe(5);
    expect(rest.json.links).toEqual([]);
    const exact = await list('?limit=10005');
    expect(exact.json.numberReturned).toBe(10_000);
  });

  it('filters by kategorie', async () => {
    await seedPoints(9);
    const response = await list('?kategorie=denkmal');
    expect(response.json.features.map((f: FeatureJson) => f.properties.kategorie)).toEqual(['denkmal', 'denkmal', 'denkmal']);
  });

  it('returns the features intersecting the bbox, boundary included, combinable with kategorie', async () => {
    await seedPoints(1, { prefix: 'in', lon: () => 13.4, lat: () => 52.5 });
    await seedPoints(1, { prefix: 'edge', lon: () => 13.5, lat: () => 52.5 });
    await seedPoints(1, { prefix: 'out', lon: () => 13.6, lat: () => 52.5 });
    await api.request('POST', '/api/features', {
      token,
      body: aFeature({ id: 'crossing-line', geometry: { type: 'LineString', coordinates: [[13.0, 52.0], [13.0, 53.0]] } }),
    });
    const response = await list('?bbox=12.9,52.4,13.5,52.6');
    expect(response.json.features.map((f: FeatureJson) => f.id).sort()).toEqual(['crossing-line', 'edge00000', 'in00000']);
    const filtered = await list('?bbox=12.9,52.4,13.5,52.6&kategorie=blumenbeet');
    expect(filtered.json.features).toEqual([]);
  });

  it('splits a bbox crossing the antimeridian (minLon > maxLon) into both sides', async () => {
    await seedPoints(1, { prefix: 'east', lon: () => 179.5, lat: () => 0 });
    await seedPoints(1, { prefix: 'west', lon: () => -179.5, lat: () => 0 });
    await seedPoints(1, { prefix: 'greenwich', lon: () => 0, lat: () => 0 });
    await seedPoints(1, { prefix: 'north', lon: () => 179.5, lat: () => 20 });
    const across = await list('?bbox=179,-10,-179,10');
    expect(across.json.features.map((f: FeatureJson) => f.id).sort()).toEqual(['east00000', 'west00000']);
    const normal = await list('?bbox=-179,-10,179,10');
    expect(normal.json.features.map((f: FeatureJson) => f.id)).toEqual(['greenwich00000']);
  });

  it('treats a bbox of zero width or height as the line or point it is, so features crossing it are found', async () => {
    // Lines and a polygon crossing the meridian -59 between latitudes -56 and -54, one point on it, one beside it.
    await db.pool.query(`
      INSERT INTO features.features (id, name, kategorie, geom) VALUES
        ('across-line', 'L', 'friedhof', ST_GeomFromText('LINESTRING(-60 -55, -58 -55)', 4326)),
        ('across-polygon', 'P', 'friedhof', ST_GeomFromText('POLYGON((-60 -55.5, -58 -55.5, -58 -54.5, -60 -54.5, -60 -55.5))', 4326)),
        ('on-point', 'O', 'friedhof', ST_GeomFromText('POINT(-59 -55)', 4326)),
        ('beside-point', 'B', 'friedhof', ST_GeomFromText('POINT(-58.9 -55)', 4326))`);
    const vertical = await list('?bbox=-59,-56,-59,-54');
    expect(vertical.json.features.map((f: FeatureJson) => f.id).sort()).toEqual(['across-line', 'across-polygon', 'on-point']);
    const horizontal = await list('?bbox=-60,-55,-58,-55');
    expect(horizontal.json.features.map((f: FeatureJson) => f.id).sort()).toEqual(['across-line', 'across-polygon', 'beside-point', 'on-point']);
    const point = await list('?bbox=-59,-55,-59,-55');
    expect(point.json.features.map((f: FeatureJson) => f.id).sort()).toEqual(['across-line', 'across-polygon', 'on-point']);
  });

  it('returns the same features for a degenerate bbox whatever the page size', async () => {
    // Many lines and polygons crossing, touching or missing the meridian -174: enough rows that PostGIS
    // caches a prepared form of the query box, which is where a degenerate envelope used to misbehave.
    await db.pool.query(`
      INSERT INTO features.features (id, name, kategorie, geom)
      SELECT 'g' || lpad(i::text, 4, '0'), 'G' || i, 'friedhof',
             CASE i % 4
               WHEN 0 THEN ST_SetSRID(ST_MakeLine(ST_MakePoint(-175 + (i % 7) * 0.1, -89 + i * 0.05), ST_MakePoint(-173, -89 + i * 0.05)), 4326)
               WHEN 1 THEN ST_SetSRID(ST_MakeEnvelope(-174.5 + (i % 9) * 0.1, -80 + i * 0.04, -173.5 + (i % 5) * 0.1, -79.9 + i * 0.04), 4326)
               WHEN 2 THEN ST_SetSRID(ST_MakePoint(-174 + (i % 3 - 1) * 0.001, i * 0.02), 4326)
               ELSE ST_SetSRID(ST_MakeLine(ST_MakePoint(-174, -60 + i * 0.01), ST_MakePoint(-174 + (i % 2) * 0.5, -59 + i * 0.01)), 4326)
             END
      FROM generate_series(0, 1199) AS i`);
    const expected = await db.pool.query<{ id: string }>(`
      SELECT id FROM features.features
      WHERE ST_Intersects(geom, ST_GeomFromText('LINESTRING(-174 -90, -174 90)', 4326)) ORDER BY id`);
    const whole = await list('?bbox=-174,-90,-174,90&limit=10000');
    const paged: string[] = [];
    let href: string | undefined = '/api/features?bbox=-174,-90,-174,90&limit=137';
    while (href) {
      const page = await api.request('GET', href);
      paged.push(...page.json.features.map((f: FeatureJson) => f.id));
      href = page.json.links.find((l: { rel: string }) => l.rel === 'next')?.href;
    }
    expect(expected.rows.length).toBeGreaterThan(300);
    expect(whole.json.features.map((f: FeatureJson) => f.id)).toEqual(expected.rows.map((r) => r.id));
    expect(paged).toEqual(expected.rows.map((r) => r.id));
  });

  describe('a page chosen by bbox when many bounding boxes meet the bbox but their geometries do not', () => {
    // 60 diagonal lines x + y = 1 (ids 'a-miss…', sorting first): each one's bounding box is the unit
    // square, which meets the box [0.6, 1] × [0.6, 1], but on the line x + y ≥ 1.2 never holds there.
    // Five points inside the box sort after them. A page reads a few candidates more than it needs
    // (features/queries.ts boxPage); these lines use up the spare ones many times over.
    const BOX = 'bbox=0.6,0.6,1,1';
    const INSIDE = ['z-in-0', 'z-in-1', 'z-in-2', 'z-in-3', 'z-in-4'];
    beforeEach(async () => {
      await db.pool.query(`
        INSERT INTO features.features (id, name, kategorie, geom)
        SELECT 'a-miss-' || lpad(i::text, 2, '0'), 'Miss ' || i, 'friedhof', ST_GeomFromText('LINESTRING(0 1, 1 0)', 4326) FROM generate_series(0, 59) AS i
        UNION ALL
        SELECT 'z-in-' || i, 'In ' || i, 'denkmal', ST_SetSRID(ST_MakePoint(0.7 + i * 0.05, 0.8), 4326) FROM generate_series(0, 4) AS i`);
    });

    it('still fills the page with the features inside and links the rest', async () => {
      const first = await list(`?${BOX}&limit=2`);
      expect(first.json.features.map((f: FeatureJson) => f.id)).toEqual(INSIDE.slice(0, 2));
      const second = await api.request('GET', first.json.links[0].href);
      expect(second.json.features.map((f: FeatureJson) => f.id)).toEqual(INSIDE.slice(2, 4));
      const third = await api.request('GET', second.json.links[0].href);
      expect(third.json.features.map((f: FeatureJson) => f.id)).toEqual(INSIDE.slice(4));
      expect(third.json.links).toEqual([]);
      const whole = await list(`?${BOX}`);
      expect(whole.json.features.map((f: FeatureJson) => f.id)).toEqual(INSIDE);
    });

    it('pages the same way through /ogcapi, forwards and back', async () => {
      const items = (query: string) => api.request('GET', `/ogcapi/collections/features/items?${query}`);
      // Links are absolute; the test API is asked by path.
      const follow = (href: string) => {
        const url = new URL(href);
        return api.request('GET', url.pathname + url.search);
      };
      const ids = (body: { features: FeatureJson[] }) => body.features.map((f) => f.id);
      const first = await items(`${BOX}&limit=2`);
      expect(first.status, first.text).toBe(200);
      expect(ids(first.json)).toEqual(INSIDE.slice(0, 2));
      const next = (body: { links: Array<{ rel: string; href: string }> }, rel: string) => body.links.find((l) => l.rel === rel)?.href;
      const second = await follow(next(first.json, 'next')!);
      expect(ids(second.json)).toEqual(INSIDE.slice(2, 4));
      const third = await follow(next(second.json, 'next')!);
      expect(ids(third.json)).toEqual(INSIDE.slice(4));
      expect(next(third.json, 'next')).toBeUndefined();
      // Backwards from the last page: the candidates before it are the lines again.
      const back = await follow(next(third.json, 'prev')!);
      expect(ids(back.json)).toEqual(INSIDE.slice(2, 4));
      const start = await follow(next(back.json, 'prev')!);
      expect(ids(start.json)).toEqual(INSIDE.slice(0, 2));
      expect(next(start.json, 'prev')).toBeUndefined();
    });
  });

  it('follows next links with no duplicates and no gaps while features are being added', async () => {
    const original = await seedPoints(300);
    const seen: string[] = [];
    let href: string | undefined = '/api/features?limit=37&bbox=-180,-90,180,90';
    let pages = 0;
    let added = 0;
    while (href) {
      // Writers keep adding features (ids sorting before and after the cursor) while we page.
      const [page]: [TestResponse, TestResponse, TestResponse] = await Promise.all([
        api.request('GET', href),
        api.request('POST', '/api/features', { token, body: aFeature({ id: `a-new-${added}` }) }),
        api.request('POST', '/api/features', { token, body: aFeature({ id: `z-new-${added++}` }) }),
      ]);
      expect(page.status).toBe(200);
      seen.push(...page.json.features.map((f: FeatureJson) => f.id as string));
      href = page.json.links.find((l: { rel: string; href: string }) => l.rel === 'next')?.href;
      if (href) expect(page.headers.get('link')).toBe(`<${href}>; rel="next"`);
      pages++;
      expect(pages).toBeLessThan(50);
    }
    expect(new Set(seen).size).toBe(seen.length);
    const missing = original.filter((id) => !seen.includes(id));
    expect(missing).toEqual([]);
    expect(pages).toBeGreaterThanOrEqual(Math.ceil(300 / 37));
  });

  it('keeps the other query parameters in the next link', async () => {
    await seedPoints(12);
    const first = await list('?kategorie=friedhof&limit=2');
    const next = new URL(first.json.links[0].href, 'http://x');
    expect(next.pathname).toBe('/api/features');
    expect(next.searchParams.get('kategorie')).toBe('friedhof');
    expect(next.searchParams.get('limit')).toBe('2');
    expect(next.searchParams.get('cursor')).toMatch(/^c1\./);
  });

  it.each([
    ['bbox=1,2,3', 'bbox'],
    ['bbox=a,b,c,d', 'bbox'],
    ['bbox=1,2,3,4,5', 'bbox'],
    ['bbox=', 'bbox'],
    ['bbox=0,-91,1,0', 'bbox'],
    ['bbox=-181,0,1,1', 'bbox'],
    ['bbox=0,10,1,5', 'bbox'],
    ['bbox=1e400,0,1,1', 'bbox'],
    ['bbox=0x10,0,1,1', 'bbox'],
    ['limit=0', 'limit'],
    ['limit=-5', 'limit'],
    ['limit=1.5', 'limit'],
    ['limit=abc', 'limit'],
    ['limit=', 'limit'],
    ['kategorie=park', 'kategorie'],
    ['cursor=garbage', 'cursor'],
    ['cursor=c1.', 'cursor'],
    ['cursor=c1.%2F%2F', 'cursor'],
    ['limit=1&limit=2', 'limit'],
    ['sort=name', 'sort'],
    ['bbox[]=1', 'bbox[]'],
  ])('answers ?%s with 400 naming %s', async (query, field) => {
    const response = await list(`?${query}`);
    expect(response.status).toBe(400);
    expect(response.json.code).toBe('INVALID_QUERY');
    expect(response.json.fields.map((f: { field: string }) => f.field)).toContain(field);
  });
});
