import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '../../../test/helpers/api.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { binary, lacks, requirements } from '../../../test/helpers/requirements.js';
import { closeGracefully, listen } from '../../shared/http-server.js';

/**
 * /ogcapi as GDAL sees it: the OAPIF driver of the real ogrinfo and ogr2ogr (Debian gdal-bin) lists the
 * collections, pages through every feature following the next links, asks for EPSG:25833 and sends a
 * CQL2 filter. What it writes into a GeoPackage is compared with what PostGIS holds.
 */
const run = promisify(execFile);
const missing = lacks('the GDAL tests of /ogcapi', requirements.gdal(), binary('ogrinfo', 'apt-get install gdal-bin'));
const versionText = missing ? '' : (await run('ogrinfo', ['--version'])).stdout;
const gdalVersion = (/GDAL (\d+)\.(\d+)/.exec(versionText) ?? ['', '0', '0']).slice(1).map(Number);

let db: TestDatabase;
let api: TestApi;
let dir: string;
const SEEDED = 263; // not a multiple of any page size GDAL picks, so the last page is partial

describe.skipIf(missing)('OGC API – Features through GDAL', () => {
  beforeAll(async () => {
    db = await createTestDatabase();
    api = await startTestApi(db);
    dir = mkdtempSync(join(tmpdir(), 'ogcapi-gdal-'));
    // Four geometry types in and around Berlin (inside UTM zone 33), spread over the three kategorien.
    await db.pool.query(
      `INSERT INTO features.features (id, name, kategorie, geom)
       SELECT 'g' || lpad(i::text, 4, '0'), 'Objekt ' || i, (ARRAY['friedhof','blumenbeet','denkmal'])[1 + i % 3],
              ST_SetSRID(CASE i % 4
                WHEN 0 THEN ST_MakePoint(13.3 + i * 0.001, 52.5)
                WHEN 1 THEN ST_MakeLine(ST_MakePoint(13.3 + i * 0.001, 52.4), ST_MakePoint(13.31 + i * 0.001, 52.41))
                WHEN 2 THEN ST_MakeEnvelope(13.3 + i * 0.001, 52.6, 13.3005 + i * 0.001, 52.6005)
                ELSE ST_Multi(ST_MakeEnvelope(13.3 + i * 0.001, 52.7, 13.3005 + i * 0.001, 52.7005)) END, 4326)
       FROM generate_series(1, $1::int) i`,
      [SEEDED],
    );
  });
  afterAll(async () => {
    await api?.close();
    await db?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function postgisCounts(where = 'TRUE', values: unknown[] = []): Promise<Record<string, number>> {
    const { rows } = await db.pool.query<{ type: string; n: number }>(
      `SELECT replace(initcap(GeometryType(geom)), 'string', 'String') AS type, count(*)::int AS n FROM features.features WHERE ${where} GROUP BY 1`,
      values,
    );
    return Object.fromEntries(rows.map((r) => [r.type.replace('Multipolygon', 'MultiPolygon'), r.n]));
  }

  /** The features of a GeoPackage layer as GeoJSON, read back through GDAL. */
  async function readGpkg(file: string, layer: string): Promise<{ features: Array<{ geometry: { type: string; coordinates: unknown }; properties: Record<string, unknown> }> }> {
    const { stdout } = await run('ogr2ogr', ['-f', 'GeoJSON', '/vsistdout/', file, layer], { maxBuffer: 64 * 1024 * 1024 });
    return JSON.parse(stdout);
  }

  function typeCounts(features: Array<{ geometry: { type: string } }>): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const f of features) counts[f.geometry.type] = (counts[f.geometry.type] ?? 0) + 1;
    return counts;
  }

  it('ogrinfo lists the four collections of the landing page', async () => {
    const { stdout } = await run('ogrinfo', ['-ro', '-q', `OAPIF:${api.url}/ogcapi`]);
    const layers = stdout
      .split('\n')
      .map((line) => /^\d+: (\S+)/.exec(line)?.[1])
      .filter(Boolean);
    expect(layers).toEqual(['features', 'friedhof', 'blumenbeet', 'denkmal']);
  });

  it('ogr2ogr fetches every feature, following the paging, with the counts and geometry types PostGIS holds', async () => {
    const file = join(dir, 'all.gpkg');
    // 50 a page: six pages of features, the last one partial; all of them only by following next links.
    await run('ogr2ogr', ['-f', 'GPKG', file, `OAPIF:${api.url}/ogcapi`, 'features', 'denkmal', '-oo', 'PAGE_SIZE=50']);
    const all = await readGpkg(file, 'features');
    expect(all.features).toHaveLength(SEEDED);
    expect(typeCounts(all.features)).toEqual(await postgisCounts());
    const denkmal = await readGpkg(file, 'denkmal');
    expect(typeCounts(denkmal.features)).toEqual(await postgisCounts("kategorie = 'denkmal'"));
    expect(new Set(denkmal.features.map((f) => f.properties.kategorie))).toEqual(new Set(['denkmal']));
  });

  it('ogr2ogr with crs EPSG:25833 gets the same features with coordinates PostGIS transformed', async () => {
    const file = join(dir, 'utm.gpkg');
    const crs = 'http://www.opengis.net/def/crs/EPSG/0/25833';
    // GDAL 3.7+ speaks Part 2 itself (-oo CRS=…); older versions (Debian 12 ships 3.6) pass the URL's
    // query on to every page but label the layer CRS84, so the layer's CRS is assigned with -a_srs.
    const partTwo = gdalVersion[0]! > 3 || (gdalVersion[0] === 3 && gdalVersion[1]! >= 7);
    const args = partTwo
      ? ['-f', 'GPKG', file, `OAPIF:${api.url}/ogcapi/collections/features`, '-oo', 'CRS=EPSG:25833']
      : ['-f', 'GPKG', file, `OAPIF:${api.url}/ogcapi/collections/features?crs=${crs}`, '-a_srs', 'EPSG:25833'];
    await run('ogr2ogr', args);
    const { stdout: info } = await run('ogrinfo', ['-so', file, 'features']);
    expect(info).toMatch(/ID\["EPSG",25833\]\]\s*$/m);
    expect(info).toMatch(/UTM zone 33N/);
    const utm = await readGpkg(file, 'features');
    expect(utm.features).toHaveLength(SEEDED);
    expect(typeCounts(utm.features)).toEqual(await postgisCounts());
    const point = utm.features.find((f) => f.properties.id === 'g0004' || f.properties.name === 'Objekt 4')!;
    const { rows } = await db.pool.query<{ x: number; y: number }>(`SELECT ST_X(g) AS x, ST_Y(g) AS y FROM (SELECT ST_Transform(geom, 25833) g FROM features.features WHERE id = 'g0004') t`);
    const [x, y] = point.geometry.coordinates as [number, number];
    expect(Math.abs(x - rows[0]!.x)).toBeLessThan(0.001);
    expect(Math.abs(y - rows[0]!.y)).toBeLessThan(0.001);
    expect(x).toBeGreaterThan(300_000); // easting in metres, not degrees
  });

  /**
   * A proxy in front of the API that writes down every request GDAL makes and the status it got, so a
   * test can see which documents GDAL fetched (GDAL itself only says that it filters on the client).
   */
  async function recordingProxy(): Promise<{ url: string; log: string[]; close(): Promise<void> }> {
    const log: string[] = [];
    const proxy: Server = createServer((req, res) => {
      const upstream = httpRequest(`${api.url}${req.url}`, { method: req.method, headers: req.headers, agent: false }, (answer) => {
        log.push(`${answer.statusCode} ${req.method} ${req.url}`);
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      upstream.on('error', () => res.destroy());
      req.pipe(upstream);
    });
    const url = `http://127.0.0.1:${await listen(proxy, 0, '127.0.0.1')}`;
    return { url, log, close: () => closeGracefully(proxy, 1_000) };
  }

  it('ogrinfo with an attribute and a spatial filter on a URL with a query gets the landing page and the OpenAPI document, and no request is refused', async () => {
    const proxy = await recordingProxy();
    try {
      // The query of the connection URL is appended by GDAL to every request it makes.
      const source = `OAPIF:${proxy.url}/ogcapi/collections/features?kategorie=denkmal`;
      const { stdout } = await run('ogrinfo', ['-ro', '-al', '-q', source, '-where', "name = 'Objekt 5'", '-spat', '13', '52', '14', '53']);
      expect(stdout.match(/^OGRFeature/gm)).toHaveLength(1);
      expect(stdout).toMatch(/name \(String\) = Objekt 5\n/);
      expect(proxy.log.filter((line) => !line.startsWith('200 ')), proxy.log.join('\n')).toEqual([]);
      expect(proxy.log, proxy.log.join('\n')).toContain('200 GET /ogcapi/api?kategorie=denkmal');
    } finally {
      await proxy.close();
    }
  });

  it('ogr2ogr with a CQL2 filter gets exactly the features PostGIS selects with the same condition', async () => {
    const file = join(dir, 'filtered.gpkg');
    const filter = "kategorie = 'friedhof' AND name LIKE 'Objekt 1%' AND S_INTERSECTS(geometry, BBOX(13.3, 52.35, 13.45, 52.65))";
    await run('ogr2ogr', ['-f', 'GPKG', file, `OAPIF:${api.url}/ogcapi/collections/features?filter=${encodeURIComponent(filter)}`]);
    const filtered = await readGpkg(file, 'features');
    const expected = await postgisCounts("kategorie = 'friedhof' AND name LIKE 'Objekt 1%' AND ST_Intersects(geom, ST_MakeEnvelope(13.3, 52.35, 13.45, 52.65, 4326))");
    expect(Object.values(expected).reduce((a, b) => a + b, 0)).toBeGreaterThan(5);
    expect(typeCounts(filtered.features)).toEqual(expected);
    for (const f of filtered.features) expect(f.properties).toMatchObject({ kategorie: 'friedhof', name: expect.stringMatching(/^Objekt 1/) });
  });
});
