import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApi } from '../../../test/helpers/api.js';
import { missingGdal } from '../src/imports/convert.js';
import { demoCity } from '../src/imports/demo.js';
import { createImportService } from '../src/imports/service.js';

/**
 * POST /api/imports/check and POST /api/imports over HTTP on a real database: each format the import
 * page offers (GeoJSON, GeoPackage, CSV with coordinates and with WKT, zipped Shapefile) with one bad
 * row, which is reported and not written while the good rows are, in one transaction with one change
 * note; the role check; the limits. Needs GDAL (ogr2ogr), as the API does for imports.
 */
const missing = await missingGdal();
if (missing) console.log(`skipping the import tests: ${missing}`);

const { db, api } = useTestApi({ config: { rateLimit: { writesPerMinute: 2 } } });
let contributor: string;
let guest: string;
let dir: string;

beforeAll(async () => {
  contributor = await api.tokenFor('contributor', 'importer');
  guest = await api.tokenFor('guest', 'gast');
  dir = mkdtempSync(join(tmpdir(), 'import-test-'));
});
afterAll(async () => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Two good features and one whose kategorie is unknown, with attributes to be mapped. */
const GEOJSON = {
  type: 'FeatureCollection',
  features: [
    { type: 'Feature', geometry: { type: 'Point', coordinates: [13.401, 52.501] }, properties: { Bezeichnung: 'Alter Friedhof', Typ: 'Friedhof', Strasse: 'Bergstraße 1', Tel: '030 1234' } },
    { type: 'Feature', geometry: { type: 'Polygon', coordinates: [[[13.41, 52.5], [13.411, 52.5], [13.411, 52.501], [13.41, 52.5]]] }, properties: { Bezeichnung: 'Rosenbeet', Typ: 'blumenbeet', Strasse: null, Tel: null } },
    { type: 'Feature', geometry: { type: 'Point', coordinates: [13.42, 52.52] }, properties: { Bezeichnung: 'Spielplatz', Typ: 'spielplatz', Strasse: '', Tel: null } },
  ],
};
const MAPPING = 'name=Bezeichnung&kategorie=Typ&adresse=Strasse&telefon=Tel';

function gdalFile(name: string, args: string[]): Buffer {
  const source = join(dir, `source-${name}.geojson`);
  writeFileSync(source, JSON.stringify(GEOJSON));
  const target = join(dir, name);
  execFileSync('ogr2ogr', [...args, target, source], { stdio: 'pipe' });
  return readFileSync(target);
}

function zippedShapefile(): Buffer {
  // A Shapefile holds one geometry type: points only, the bad row among them.
  const points = { ...GEOJSON, features: GEOJSON.features.filter((f) => f.geometry.type === 'Point') };
  const source = join(dir, 'points.geojson');
  writeFileSync(source, JSON.stringify(points));
  // GDAL writes a zipped Shapefile itself when the name ends in .shp.zip (.shp, .shx, .dbf, .prj).
  execFileSync('ogr2ogr', ['-f', 'ESRI Shapefile', join(dir, 'orte.shp.zip'), source], { stdio: 'pipe' });
  return readFileSync(join(dir, 'orte.shp.zip'));
}

const FILES: Record<string, () => { filename: string; bytes: Buffer; query: string; good: number }> = {
  GeoJSON: () => ({ filename: 'orte.geojson', bytes: Buffer.from(JSON.stringify(GEOJSON)), query: MAPPING, good: 2 }),
  GeoPackage: () => ({ filename: 'orte.gpkg', bytes: gdalFile('orte.gpkg', ['-f', 'GPKG']), query: MAPPING, good: 2 }),
  'CSV with coordinates': () => ({
    filename: 'orte.csv',
    bytes: Buffer.from('name,kategorie,adresse,telefon,lon,lat\n"Alter Friedhof",friedhof,"Bergstraße 1",030 1234,13.401,52.501\nDenkmal,denkmal,,,13.402,52.502\nOhne Ort,denkmal,,,abc,52.5\n'),
    query: '',
    good: 2,
  }),
  'CSV with WKT': () => ({
    filename: 'wege.csv',
    bytes: Buffer.from('Bezeichnung;Typ;WKT\n"Weg am Beet";blumenbeet;"LINESTRING (13.4 52.5, 13.401 52.501)"\n"Denkmal";denkmal;"POINT (13.403 52.503)"\n"Schleife";friedhof;"POLYGON ((13.4 52.5, 13.41 52.51, 13.41 52.5, 13.4 52.51, 13.4 52.5))"\n'),
    query: 'name=Bezeichnung&kategorie=Typ',
    good: 2,
  }),
  'zipped Shapefile': () => ({ filename: 'orte.zip', bytes: zippedShapefile(), query: '', good: 1 }),
};

const importing = (kind: 'check' | 'commit', filename: string, query: string, bytes: Buffer, token = contributor) =>
  api.request('POST', `/api/imports${kind === 'check' ? '/check' : ''}?filename=${encodeURIComponent(filename)}${query ? `&${query}` : ''}`, { token, rawBody: bytes, headers: { 'content-type': 'application/octet-stream' } });

describe.skipIf(missing !== undefined)('importing a file with one bad row', () => {
  for (const [format, make] of Object.entries(FILES)) {
    it(`${format}: the check lists every row with its problems and writes nothing; the import writes the good rows under one note and reports the bad one`, async () => {
      const { filename, bytes, query, good } = make();
      const before = (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM features.features')).rows[0]!.n;
      const check = await importing('check', filename, query, bytes);
      expect(check.status, check.text).toBe(200);
      expect(check.json).toMatchObject({ total: good + 1, valid: good, invalid: 1 });
      const bad = check.json.rows.filter((r: { errors: unknown[] }) => r.errors.length > 0);
      expect(bad).toHaveLength(1);
      expect(bad[0].errors[0].field).toMatch(/kategorie|geometry/);
      expect((await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM features.features')).rows[0]!.n).toBe(before);

      const committed = await importing('commit', filename, query, bytes);
      expect(committed.status, committed.text).toBe(201);
      expect(committed.json).toMatchObject({ imported: good, invalid: 1, rejected: [{ row: bad[0].row }] });
      const { rows } = await db.pool.query<{ n: number; notes: string[]; actors: string[] }>(
        `SELECT count(*)::int AS n, array_agg(DISTINCT h.note) AS notes, array_agg(DISTINCT f.created_by) AS actors
         FROM features.features f JOIN history.feature_versions h ON h.feature_id = f.id WHERE h.note = $1`,
        [committed.json.note],
      );
      expect(rows[0]).toMatchObject({ n: good, notes: [committed.json.note], actors: ['importer'] });
      expect(committed.json.note).toContain(filename);
    });
  }

  it('maps attributes it can guess without a mapping, and says which it used', async () => {
    const check = await importing('check', 'orte.csv', '', Buffer.from('Name,Kategorie,Address,Phone,x,y\nA,Denkmal,Platz 1,+49 30 1,13.4,52.5\n'));
    expect(check.status).toBe(200);
    expect(check.json.mapping).toEqual({ name: 'Name', kategorie: 'Kategorie', adresse: 'Address', telefon: 'Phone' });
    expect(check.json.rows[0].feature.properties).toEqual({ name: 'A', kategorie: 'denkmal', adresse: 'Platz 1', telefon: '+49 30 1' });
  });

  it('a file without a valid row is a 400 that names the problem and writes nothing', async () => {
    const response = await importing('commit', 'leer.csv', '', Buffer.from('name,kategorie,lon,lat\nA,kiosk,13.4,52.5\n'));
    expect(response.status).toBe(400);
    expect(response.json.detail).toMatch(/row 1: properties\.kategorie/);
  });

  it('refuses a file it cannot read, an unknown format, an unknown attribute in the mapping, and an empty body with 4xx', async () => {
    expect((await importing('check', 'kaputt.geojson', '', Buffer.from('{"type": "FeatureCollection", "features": ['))).status).toBe(400);
    expect((await importing('check', 'bild.png', '', Buffer.from('PNG'))).status).toBe(415);
    expect((await importing('check', 'kaputt.gpkg', '', Buffer.from('not sqlite'))).status).toBe(400);
    const mapped = await importing('check', 'orte.geojson', 'name=Nirgends', Buffer.from(JSON.stringify(GEOJSON)));
    expect(mapped.status).toBe(400);
    expect(mapped.json.fields).toEqual([{ field: 'name', message: 'the file has no attribute Nirgends' }]);
    expect((await importing('check', 'orte.geojson', '', Buffer.alloc(0))).status).toBe(400);
    expect((await api.request('POST', '/api/imports/check', { token: contributor, rawBody: Buffer.from('{}') })).status).toBe(400);
  });

  it('refuses a file over the size limit with 413', async () => {
    const response = await importing('check', 'gross.geojson', '', Buffer.alloc(33 * 1024 * 1024, 32));
    expect(response.status).toBe(413);
    expect(response.json.detail).toMatch(/32 MiB/);
  });

  it('a guest cannot import or check (403), nor can an anonymous caller (401)', async () => {
    const bytes = Buffer.from(JSON.stringify(GEOJSON));
    expect((await importing('check', 'orte.geojson', '', bytes, guest)).status).toBe(403);
    expect((await importing('commit', 'orte.geojson', '', bytes, guest)).status).toBe(403);
    const anonymous = await api.request('POST', '/api/imports?filename=orte.geojson', { rawBody: bytes });
    expect(anonymous.status).toBe(401);
  });

  it('a 10 000-feature import leaves other requests served: /healthz answers within 250 ms throughout', async () => {
    const city = demoCity(10_000);
    const file = Buffer.from(JSON.stringify({ type: 'FeatureCollection', features: city.rows.map((r) => ({ type: 'Feature', geometry: r.geometry, properties: r.attributes })) }));
    let done = false;
    const latencies: number[] = [];
    const probe = (async () => {
      while (!done) {
        const started = performance.now();
        await fetch(`${api.url}/healthz`).then((r) => r.arrayBuffer());
        latencies.push(performance.now() - started);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const started = performance.now();
    const response = await importing('commit', 'stadt.geojson', '', file);
    const ms = performance.now() - started;
    done = true;
    await probe;
    expect(response.status, response.text.slice(0, 300)).toBe(201);
    expect(response.json.imported).toBe(10_000);
    console.log(`10 000 features imported in ${Math.round(ms)} ms; /healthz meanwhile: ${latencies.length} answers, slowest ${Math.round(Math.max(...latencies))} ms`);
    expect(latencies.length).toBeGreaterThan(10);
    expect(Math.max(...latencies)).toBeLessThan(250);
  }, 120_000);

  it('is not counted against the per-request write limit (2 a minute here)', async () => {
    const bytes = Buffer.from(JSON.stringify(GEOJSON));
    for (let i = 0; i < 4; i++) expect((await importing('check', 'orte.geojson', MAPPING, bytes)).status).toBe(200);
  });
});

describe('the demo city (npm run seed, "Load demo data")', () => {
  it('is 1 000 valid features of the three kategorien in every geometry type, written by the import under one note', async () => {
    const file = demoCity();
    expect(file.rows).toHaveLength(1000);
    await db.pool.query('TRUNCATE features.features CASCADE');
    const result = await createImportService(db.pool).commitRows({ id: 'demo', role: 'admin', via: 'jwt' }, file, undefined, 'demo city');
    expect(result).toMatchObject({ imported: 1000, invalid: 0, note: 'demo city (1000 features)' });
    const { rows } = await db.pool.query<{ kategorie: string; type: string; n: number }>(
      `SELECT kategorie, GeometryType(geom) AS type, count(*)::int AS n FROM features.features GROUP BY 1, 2 ORDER BY 1, 2`,
    );
    expect(rows.map((r) => `${r.kategorie} ${r.type}`)).toEqual(['blumenbeet LINESTRING', 'blumenbeet POINT', 'blumenbeet POLYGON', 'denkmal POINT', 'friedhof MULTIPOLYGON', 'friedhof POLYGON']);
    const named = await db.pool.query<{ addresses: number; phones: number; names: number }>(`SELECT count(DISTINCT adresse)::int AS addresses, count(telefon)::int AS phones, count(DISTINCT name)::int AS names FROM features.features`);
    expect(named.rows[0]!.addresses).toBeGreaterThan(900);
    expect(named.rows[0]!.phones).toBeGreaterThan(300);
    expect(named.rows[0]!.names).toBeGreaterThan(300);
  });

  it('POST /api/imports/demo loads it for a contributor in development, and not for a guest', async () => {
    expect((await api.request('POST', '/api/imports/demo', { token: guest })).status).toBe(403);
    const response = await api.request('POST', '/api/imports/demo', { token: contributor });
    expect(response.status).toBe(201);
    expect(response.json).toMatchObject({ imported: 1000, invalid: 0 });
  });
});
