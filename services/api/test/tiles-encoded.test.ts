import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { VectorTile } from '@mapbox/vector-tile';
import { PbfReader } from 'pbf';
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApi } from '../../../test/helpers/api.js';
import { createTileService } from '../src/tiles/service.js';
import { tileOf } from '../../../test/helpers/tiles.js';

/**
 * Vector tiles on every database: where PostGIS has ST_AsMVT it builds them, where it lacks protobuf-c
 * (the embedded PGlite) the API encodes the same rows (tiles/encode.ts). Both must give the same
 * features: the same layer, extent, properties, ids, types and geometry in tile coordinates.
 */
const { db, api } = useTestApi();
let native = false;

/** A feature of each geometry type near Berlin's Alexanderplatz, one crossing tile edges, one tiny. */
const FIXTURE = [
  { id: 'enc-point', name: 'Brunnen', kategorie: 'denkmal', wkt: 'POINT(13.4105 52.5215)' },
  { id: 'enc-line', name: 'Weg', kategorie: 'blumenbeet', wkt: 'LINESTRING(13.401 52.519, 13.405 52.521, 13.409 52.5205, 13.43 52.53)' },
  { id: 'enc-hole', name: 'Friedhof mit Kapelle', kategorie: 'friedhof', wkt: 'POLYGON((13.40 52.51, 13.42 52.51, 13.42 52.525, 13.40 52.525, 13.40 52.51),(13.405 52.515, 13.405 52.52, 13.41 52.52, 13.41 52.515, 13.405 52.515))' },
  { id: 'enc-multi', name: 'Beete', kategorie: 'blumenbeet', wkt: 'MULTIPOLYGON(((13.412 52.522, 13.413 52.522, 13.413 52.5225, 13.412 52.522)),((13.414 52.522, 13.415 52.522, 13.415 52.523, 13.414 52.523, 13.414 52.522)))' },
  { id: 'enc-big', name: 'Stadtgebiet', kategorie: 'friedhof', wkt: 'POLYGON((13.2 52.4, 13.6 52.4, 13.6 52.6, 13.2 52.6, 13.2 52.4))' },
  { id: 'enc-tiny', name: 'Winzig', kategorie: 'denkmal', wkt: 'POLYGON((13.4111 52.5211, 13.41110001 52.5211, 13.41110001 52.52110001, 13.4111 52.5211))' },
];


interface Decoded {
  layers: string[];
  extent?: number;
  version?: number;
  features: { id: number | undefined; type: number; properties: Record<string, unknown>; geometry: number[][][] }[];
}

function decode(bytes: Buffer): Decoded {
  if (bytes.length === 0) return { layers: [], features: [] };
  const tile = new VectorTile(new PbfReader(bytes));
  const layer = tile.layers.features;
  if (!layer) return { layers: Object.keys(tile.layers), features: [] };
  const features = Array.from({ length: layer.length }, (_, i) => {
    const f = layer.feature(i);
    return { id: f.id, type: f.type, properties: f.properties, geometry: f.loadGeometry().map((ring) => ring.map((p) => [p.x, p.y])) };
  });
  return { layers: Object.keys(tile.layers), extent: layer.extent, version: layer.version, features };
}

/**
 * Polygon rings from their smallest vertex: where a ring starts carries no meaning in MVT, and PostGIS
 * clips polygons with wagyu, which may start it elsewhere than GEOS. Orientation and vertices stay.
 */
function normalised(tile: Decoded): Decoded {
  const rotate = (ring: number[][]) => {
    const open = ring.length > 1 && ring[0]![0] === ring.at(-1)![0] && ring[0]![1] === ring.at(-1)![1] ? ring.slice(0, -1) : ring;
    let start = 0;
    open.forEach((p, i) => {
      const s = open[start]!;
      if (p[0]! < s[0]! || (p[0] === s[0] && p[1]! < s[1]!)) start = i;
    });
    return [...open.slice(start), ...open.slice(0, start)];
  };
  return { ...tile, features: tile.features.map((f) => (f.type === 3 ? { ...f, geometry: f.geometry.map(rotate) } : f)) };
}

beforeAll(async () => {
  native = await db.pool
    .query(`SELECT ST_AsMVT(t, 'probe') FROM (SELECT ST_AsMVTGeom(ST_MakePoint(0, 0), ST_TileEnvelope(0, 0, 0)) AS geom) t`)
    .then(() => true, () => false);
  for (const f of FIXTURE) {
    await db.pool.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ($1, $2, $3, ST_GeomFromText($4, 4326))`, [f.id, f.name, f.kategorie, f.wkt]);
  }
});

/** Detail and overview tiles over the fixture, and one beyond it. */
const TILES = [tileOf(13.4105, 52.5215, 16), tileOf(13.4105, 52.5215, 14), tileOf(13.4105, 52.5215, 12), tileOf(13.4105, 52.5215, 11), tileOf(13.4105, 52.5215, 8), tileOf(13.415, 52.52, 15)];

describe('vector tiles on the database the tests run on (PGlite without TEST_DATABASE_URL)', () => {
  it('answers 200 with an MVT whose layer `features` holds each feature with its properties', async () => {
    const { z, x, y } = tileOf(13.4105, 52.5215, 14);
    const response = await fetch(`${api.url}/api/tiles/${z}/${x}/${y}.mvt`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('application/vnd.mapbox-vector-tile');
    const tile = decode(Buffer.from(await response.arrayBuffer()));
    expect(tile).toMatchObject({ layers: ['features'], extent: 4096, version: 2 });
    const byId = Object.fromEntries(tile.features.map((f) => [f.properties.id, f]));
    expect(Object.keys(byId).sort()).toEqual(['enc-big', 'enc-hole', 'enc-line', 'enc-multi', 'enc-point']);
    expect(byId['enc-point']).toMatchObject({ type: 1, properties: { id: 'enc-point', name: 'Brunnen', kategorie: 'denkmal', status: 'draft' } });
    expect(byId['enc-line']!.type).toBe(2);
    expect(byId['enc-hole']).toMatchObject({ type: 3 });
    expect(byId['enc-hole']!.geometry).toHaveLength(2);
    expect(byId['enc-multi']!.geometry).toHaveLength(2);
    // The point where Web Mercator puts it, in the tile's 4096 units.
    const n = 2 ** z;
    const rad = (52.5215 * Math.PI) / 180;
    const px = (((13.4105 + 180) / 360) * n - x) * 4096;
    const py = (((1 - Math.log(Math.tan(rad) + 1 / Math.cos(rad)) / Math.PI) / 2) * n - y) * 4096;
    const [[[gx, gy]]] = byId['enc-point']!.geometry as [[[number, number]]];
    expect(Math.abs(gx - px)).toBeLessThanOrEqual(1);
    expect(Math.abs(gy - py)).toBeLessThanOrEqual(1);
  });

  it('below zoom 12 carries kategorie and status with the integer feature id, as the map\'s overview expects', async () => {
    const { z, x, y } = tileOf(13.4105, 52.5215, 11);
    const response = await fetch(`${api.url}/api/tiles/${z}/${x}/${y}.mvt`);
    expect(response.status).toBe(200);
    const tile = decode(Buffer.from(await response.arrayBuffer()));
    expect(tile.features.length).toBeGreaterThanOrEqual(4);
    for (const f of tile.features) {
      expect(Object.keys(f.properties).sort()).toEqual(['kategorie', 'status']);
      expect(typeof f.id).toBe('number');
    }
  });

  it('the density answer says tiles are available', async () => {
    const response = await api.request('GET', '/api/tiles/count?bbox=13.3,52.4,13.5,52.6&atMost=10');
    expect(response.status).toBe(200);
    expect(response.json).toMatchObject({ count: 6, tiles: true });
  });

  it('an empty tile is 200 with no bytes, as ST_AsMVT gives', async () => {
    const response = await fetch(`${api.url}/api/tiles/10/0/0.mvt`);
    expect(response.status).toBe(200);
    expect((await response.arrayBuffer()).byteLength).toBe(0);
  });
});

/**
 * The features ST_AsMVT gives for TILES on PostGIS, decoded and normalised: the engine without ST_AsMVT
 * is compared with them. Recorded from PostGIS with UPDATE_TILE_GOLDEN=1 and TEST_DATABASE_URL set;
 * the PostGIS run checks them on every run, so they cannot drift from what PostGIS builds.
 */
const GOLDEN = new URL('../../../test/fixtures/tiles/postgis-tiles.json', import.meta.url);

describe('the API\'s encoding against ST_AsMVT', () => {
  it('gives the same features, properties, ids and geometry at every zoom on PostGIS', async (context) => {
    if (!native) {
      console.log('tiles-encoded: this database has no ST_AsMVT (PGlite); set TEST_DATABASE_URL to a PostGIS server to compare both encodings live');
      context.skip();
    }
    const postgis = createTileService(db.pool, { cacheBytes: 0 });
    const api = createTileService(db.pool, { cacheBytes: 0, encodeInApi: true });
    const recorded: Decoded[] = [];
    for (const address of TILES) {
      const [expected, actual] = [normalised(decode((await postgis.render(address)).bytes!)), normalised(decode((await api.render(address)).bytes!))];
      expect(expected.features.length, JSON.stringify(address)).toBeGreaterThan(0);
      expect(actual, JSON.stringify(address)).toEqual(expected);
      recorded.push(expected);
    }
    if (process.env.UPDATE_TILE_GOLDEN === '1') {
      mkdirSync(new URL('.', GOLDEN), { recursive: true });
      writeFileSync(GOLDEN, `${JSON.stringify(recorded, null, 1)}\n`);
    }
    expect(recorded).toEqual(JSON.parse(readFileSync(GOLDEN, 'utf8')));
  });

  it('the tiles this database serves hold the features PostGIS\' ST_AsMVT gives (recorded)', async () => {
    const golden = JSON.parse(readFileSync(GOLDEN, 'utf8')) as Decoded[];
    const served = createTileService(db.pool, { cacheBytes: 0 });
    for (const [i, address] of TILES.entries()) {
      expect(normalised(decode((await served.render(address)).bytes!)), JSON.stringify(address)).toEqual(golden[i]);
    }
  });
});
