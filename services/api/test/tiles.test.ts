import { createHash } from 'node:crypto';
import { get as httpGet, request as httpRequest, type Server } from 'node:http';
import { gunzipSync } from 'node:zlib';
import { VectorTile } from '@mapbox/vector-tile';
import { PbfReader } from 'pbf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import type { TestDatabase } from '../../../test/helpers/db.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { createApp } from '../src/app.js';
import { createAuthenticator } from '../src/auth/index.js';
import { serveApp } from '../src/http/server.js';
import { closeGracefully, listen } from '../../shared/http-server.js';
import { createTileCache, ENTRY_OVERHEAD_BYTES, overheadOf } from '../src/tiles/cache.js';
import { createTileService } from '../src/tiles/service.js';
import { TILE_DETAIL_MIN_ZOOM } from '../../shared/tiles.js';
import { describeRequest, loadRecording, normalise, recordedAnswer } from '../../../test/fixtures/express-answers/recorded.js';
import { tileOf } from '../../../test/helpers/tiles.js';

/**
 * GET /api/tiles/:z/:x/:y.mvt over HTTP: the tile's content and properties, the ETag and conditional
 * GET, invalidation by every kind of write (API, SQL, QC status), out-of-range addresses, and the
 * same visibility as the feature list. On every database: the embedded PGlite has no ST_AsMVT
 * (PostGIS without protobuf-c), and there the API encodes the tiles itself (tiles-encoded.test.ts
 * compares both encodings).
 */
const { db, api } = useTestApi({ queue: true }); // queue: submissions queue the reviewer notice
let mvtSupported = false;
let contributor: string;
let admin: string;

beforeAll(async () => {
  contributor = await api.tokenFor('contributor', 'conny');
  admin = await api.tokenFor('admin', 'adam');
  mvtSupported = await db.pool
    .query(`SELECT ST_AsMVT(t, 'probe') FROM (SELECT ST_AsMVTGeom(ST_MakePoint(0, 0), ST_TileEnvelope(0, 0, 0)) AS geom) t`)
    .then(() => true, () => false);
  if (!mvtSupported) console.log('tiles: the test database has no ST_AsMVT (PGlite): the tiles are encoded in the API');
});

const path = (t: { z: number; x: number; y: number }) => `/api/tiles/${t.z}/${t.x}/${t.y}.mvt`;

async function getTile(p: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${api.url}${p}`, { headers });
  const bytes = Buffer.from(await response.arrayBuffer());
  return { status: response.status, headers: response.headers, bytes };
}

/** The features of the tile's `features` layer with their properties. */
function decode(bytes: Buffer): Record<string, string | number | boolean>[] {
  const layer = new VectorTile(new PbfReader(bytes)).layers.features;
  if (!layer) return [];
  return Array.from({ length: layer.length }, (_, i) => layer.feature(i).properties);
}

/** Tests of tile content: on every database (ST_AsMVT where PostGIS has it, the API's encoder elsewhere). */
const withMvt = (name: string, test: () => Promise<void>) => it(name, test);

async function create(lon: number, lat: number, properties: Record<string, unknown> = {}): Promise<string> {
  const created = await api.request('POST', '/api/features', { token: contributor, body: aFeature({ geometry: { type: 'Point', coordinates: [lon, lat] }, properties }) });
  expect(created.status).toBe(201);
  return created.json.id as string;
}

describe('vector tiles on PostGIS', () => {
  withMvt('serves a Mapbox Vector Tile whose features carry id, kategorie, status and name', async () => {
    const id = await create(13.4001, 52.5001, { name: 'Alter St.-Matthäus-Kirchhof', kategorie: 'friedhof' });
    const tile = await getTile(path(tileOf(13.4001, 52.5001, 14)));
    expect(tile.status).toBe(200);
    expect(tile.headers.get('content-type')).toBe('application/vnd.mapbox-vector-tile');
    const features = decode(tile.bytes);
    expect(features).toContainEqual({ id, kategorie: 'friedhof', status: 'draft', name: 'Alter St.-Matthäus-Kirchhof' });
  });

  withMvt('answers with a strong ETag and no-cache, and 304 without a body while the tile is unchanged', async () => {
    await create(13.41, 52.51);
    const p = path(tileOf(13.41, 52.51, 13));
    const first = await getTile(p);
    const etag = first.headers.get('etag')!;
    expect(etag).toMatch(/^"[^"]+"$/);
    expect(etag).toContain(createHash('md5').update(first.bytes).digest('hex'));
    expect(first.headers.get('cache-control')).toContain('no-cache');
    const again = await getTile(p, { 'If-None-Match': etag });
    expect(again.status).toBe(304);
    expect(again.bytes.length).toBe(0);
    expect(again.headers.get('etag')).toBe(etag);
    expect((await getTile(p, { 'If-None-Match': `"other", W/${etag}` })).status).toBe(304);
    expect((await getTile(p, { 'If-None-Match': '"stale"' })).status).toBe(200);
    expect((await getTile(p, { 'If-None-Match': '*' })).status).toBe(304);
  });

  withMvt('an edit through the API changes the ETag and content of the tiles it touches and of no other', async () => {
    const id = await create(13.42, 52.52, { name: 'Vorher' });
    await create(9.99, 53.55, { name: 'Hamburg' });
    const touched = path(tileOf(13.42, 52.52, 15));
    const elsewhere = path(tileOf(9.99, 53.55, 15));
    const before = await getTile(touched);
    const otherBefore = await getTile(elsewhere);

    const current = await api.request('GET', `/api/features/${id}`);
    const edited = await api.request('PUT', `/api/features/${id}`, {
      token: contributor,
      headers: { 'If-Match': current.headers.get('etag')! },
      body: { ...current.json, properties: { name: 'Nachher', kategorie: 'friedhof' } },
    });
    expect(edited.status).toBe(200);

    const after = await getTile(touched, { 'If-None-Match': before.headers.get('etag')! });
    expect(after.status).toBe(200);
    expect(after.headers.get('etag')).not.toBe(before.headers.get('etag'));
    expect(decode(after.bytes).find((f) => f.id === id)?.name).toBe('Nachher');
    expect((await getTile(elsewhere, { 'If-None-Match': otherBefore.headers.get('etag')! })).status).toBe(304);
  });

  withMvt('a write that bypasses the API (SQL, as GeoServer WFS-T does) and a QC status change both invalidate the tile', async () => {
    const id = await create(13.43, 52.53);
    const p = path(tileOf(13.43, 52.53, 16));
    const before = await getTile(p);
    await db.pool.query(`UPDATE features.features SET geom = ST_SetSRID(ST_MakePoint(13.4301, 52.5301), 4326) WHERE id = $1`, [id]);
    const moved = await getTile(p, { 'If-None-Match': before.headers.get('etag')! });
    expect(moved.status).toBe(200);

    const submitted = await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: id } });
    expect(submitted.status).toBe(200);
    const afterSubmit = await getTile(p, { 'If-None-Match': moved.headers.get('etag')! });
    expect(afterSubmit.status).toBe(200);
    expect(decode(afterSubmit.bytes).find((f) => f.id === id)?.status).toBe('in_qc');
  });

  withMvt('a deleted feature leaves the tile', async () => {
    const id = await create(13.44, 52.54);
    const p = path(tileOf(13.44, 52.54, 16));
    expect(decode((await getTile(p)).bytes).map((f) => f.id)).toContain(id);
    expect((await api.request('DELETE', `/api/features/${id}`, { token: admin })).status).toBe(204);
    expect(decode((await getTile(p)).bytes).map((f) => f.id)).not.toContain(id);
  });

  withMvt('a feature deleted and created again under the same id (version 1 again) still changes the ETag', async () => {
    const body = aFeature({ id: 'wieder-da', geometry: { type: 'Point', coordinates: [13.445, 52.545] }, properties: { name: 'Erstes Leben' } });
    expect((await api.request('POST', '/api/features', { token: admin, body })).status).toBe(201);
    const p = path(tileOf(13.445, 52.545, 16));
    const before = await getTile(p);
    expect((await api.request('DELETE', '/api/features/wieder-da', { token: admin })).status).toBe(204);
    const again = { ...body, properties: { ...body.properties, name: 'Zweites Leben' } };
    expect((await api.request('POST', '/api/features', { token: admin, body: again })).status).toBe(201);
    const after = await getTile(p, { 'If-None-Match': before.headers.get('etag')! });
    expect(after.status).toBe(200);
    expect(decode(after.bytes).find((f) => f.id === 'wieder-da')?.name).toBe('Zweites Leben');
  });

  withMvt('shows an anonymous visitor exactly the features the list shows for the same area', async () => {
    const ids = [await create(13.451, 52.551), await create(13.452, 52.552, { kategorie: 'denkmal' })];
    const submitted = await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: ids[1] } });
    expect(submitted.status).toBe(200);
    const t = tileOf(13.4515, 52.5515, 14);
    // The tile's bounds in lon/lat, to ask the list for the same area.
    const n = 2 ** t.z;
    const lon = (x: number) => (x / n) * 360 - 180;
    const lat = (y: number) => (Math.atan(Math.sinh(Math.PI * (1 - (2 * y) / n))) * 180) / Math.PI;
    const listed = await api.request('GET', `/api/features?bbox=${lon(t.x)},${lat(t.y + 1)},${lon(t.x + 1)},${lat(t.y)}&limit=10000`);
    expect(listed.status).toBe(200);
    const listedIds = (listed.json.features as { id: string }[]).map((f) => f.id).sort();
    expect(listedIds).toEqual(expect.arrayContaining(ids));
    expect(decode((await getTile(path(t))).bytes).map((f) => f.id as string).sort()).toEqual(listedIds);
  });

  withMvt('serves an empty tile as an empty body, and the whole world at zoom 0 even with geometry beyond Web Mercator\'s latitudes', async () => {
    const empty = await getTile(path(tileOf(-150, -60, 10)));
    expect(empty.status).toBe(200);
    expect(decode(empty.bytes)).toEqual([]);

    const polar = await api.request('POST', '/api/features', {
      token: contributor,
      body: aFeature({ geometry: { type: 'Polygon', coordinates: [[[10, 80], [20, 80], [20, 89.9], [10, 89.9], [10, 80]]] }, properties: { name: 'Nordpolnah' } }),
    });
    expect(polar.status).toBe(201);
    // Zoom 0 is an overview (no names): the polar feature is the one the search by its name finds.
    const world = await getTile('/api/tiles/0/0/0.mvt?name=nordpolnah');
    expect(world.status).toBe(200);
    expect(decode(world.bytes)).toEqual([{ kategorie: 'friedhof', status: 'draft' }]);
  });
});

/** The features of a tile's `features` layer with their MVT feature ids (undefined when unset). */
function decodeWithIds(bytes: Buffer): { number: number | undefined; properties: Record<string, string | number | boolean> }[] {
  const layer = new VectorTile(new PbfReader(bytes)).layers.features;
  if (!layer) return [];
  return Array.from({ length: layer.length }, (_, i) => ({ number: layer.feature(i).id, properties: layer.feature(i).properties }));
}

describe('what tiles carry by zoom, and the search by name', () => {
  withMvt(`below zoom ${TILE_DETAIL_MIN_ZOOM} a feature carries kategorie and status with an integer feature id, the same in neighbouring tiles; from it on its id and name`, async () => {
    // A square across the edge between two zoom-11 tiles (x 1101 | 1102 at 13.5352°E).
    const edge = (1102 / 2 ** 11) * 360 - 180;
    const square = [[[edge - 0.01, 52.6], [edge + 0.01, 52.6], [edge + 0.01, 52.61], [edge - 0.01, 52.61], [edge - 0.01, 52.6]]];
    const created = await api.request('POST', '/api/features', { token: contributor, body: aFeature({ geometry: { type: 'Polygon', coordinates: square }, properties: { name: 'Grenzbeet', kategorie: 'blumenbeet' } }) });
    expect(created.status).toBe(201);
    const west = tileOf(edge - 0.005, 52.605, 11);
    const east = tileOf(edge + 0.005, 52.605, 11);
    expect(east.x).toBe(west.x + 1);
    const inWest = decodeWithIds((await getTile(`${path(west)}?name=grenzbeet`)).bytes);
    const inEast = decodeWithIds((await getTile(`${path(east)}?name=grenzbeet`)).bytes);
    expect(inWest).toHaveLength(1);
    expect(inWest[0]!.properties).toEqual({ kategorie: 'blumenbeet', status: 'draft' });
    expect(inWest[0]!.number).toEqual(expect.any(Number));
    expect(inEast.map((f) => f.number)).toEqual([inWest[0]!.number]);

    const detail = decodeWithIds((await getTile(`${path(tileOf(edge - 0.005, 52.605, TILE_DETAIL_MIN_ZOOM))}?name=grenzbeet`)).bytes);
    expect(detail).toEqual([{ number: undefined, properties: { id: created.json.id, kategorie: 'blumenbeet', status: 'draft', name: 'Grenzbeet' } }]);
  });

  withMvt('?name= keeps the features whose name holds it, ignoring case, at every zoom; cached apart, and current after an edit', async () => {
    const friedhof = await create(13.3101, 52.4101, { name: 'Alter Dorfkirchhof Süd', kategorie: 'friedhof' });
    const beet = await create(13.3102, 52.4102, { name: 'Rosenbeet', kategorie: 'blumenbeet' });
    for (const z of [8, TILE_DETAIL_MIN_ZOOM + 3]) {
      const p = path(tileOf(13.3101, 52.4101, z));
      const all = decodeWithIds((await getTile(p)).bytes);
      expect(all.length).toBeGreaterThanOrEqual(2);
      const found = await getTile(`${p}?name=${encodeURIComponent('KIRCHHOF SÜD')}`);
      expect(found.status).toBe(200);
      expect(decodeWithIds(found.bytes)).toHaveLength(1);
      if (z >= TILE_DETAIL_MIN_ZOOM) expect(decode(found.bytes)[0]!.id).toBe(friedhof);
      expect(found.headers.get('etag')).not.toBe((await getTile(p)).headers.get('etag'));
      // Served from the cache the second time, under its own key.
      const again = await getTile(`${p}?name=${encodeURIComponent('KIRCHHOF SÜD')}`);
      expect(again.headers.get('server-timing')).toContain('cache;desc=hit');
      expect(again.bytes.equals(found.bytes)).toBe(true);
      expect(decodeWithIds((await getTile(`${p}?name=nirgends`)).bytes)).toEqual([]);
    }
    // A rename into the search is in the next filtered answer (its fingerprint reads the same rows).
    const p = path(tileOf(13.3101, 52.4101, 8));
    const before = await getTile(`${p}?name=kirchhof`);
    expect(decodeWithIds(before.bytes)).toHaveLength(1);
    await db.pool.query(`UPDATE features.features SET name = 'Kirchhofsbeet' WHERE id = $1`, [beet]);
    const after = await getTile(`${p}?name=kirchhof`, { 'If-None-Match': before.headers.get('etag')! });
    expect(after.status).toBe(200);
    expect(decodeWithIds(after.bytes)).toHaveLength(2);
  });
});

describe('the server-side tile cache', () => {
  const cacheOf = (headers: Headers) => /cache;desc=(\w+)/.exec(headers.get('server-timing') ?? '')?.[1];
  const names = (bytes: Buffer) => Object.fromEntries(decode(bytes).map((f) => [f.id, f.name]));

  /** Fetches the tile until the cache holds it: the second answer must be a hit with the same bytes. */
  async function cached(p: string) {
    const first = await getTile(p);
    const second = await getTile(p);
    expect(cacheOf(second.headers)).toBe('hit');
    expect(second.bytes.equals(first.bytes)).toBe(true);
    expect(second.headers.get('etag')).toBe(first.headers.get('etag'));
    return second;
  }

  /** The next answer for the tile must be rebuilt (a miss) and hold what the database now holds. */
  async function rebuilt(p: string) {
    const tile = await getTile(p);
    expect(tile.status).toBe(200);
    expect(cacheOf(tile.headers)).toBe('miss');
    return tile;
  }

  withMvt('serves an unchanged tile from the cache: same bytes, same ETag, and 304 on revalidation', async () => {
    await create(12.001, 51.001);
    const p = path(tileOf(12.001, 51.001, 15));
    const hit = await cached(p);
    const revalidated = await getTile(p, { 'If-None-Match': hit.headers.get('etag')! });
    expect(revalidated.status).toBe(304);
    expect(cacheOf(revalidated.headers)).toBe('hit');
  });

  withMvt('SQL inserts, updates and deletes that bypass the API each make the cached tile stale', async () => {
    const p = path(tileOf(12.011, 51.011, 15));
    await create(12.011, 51.011, { name: 'Schon da' });
    await cached(p);
    await db.pool.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('cache-sql', 'Eingefügt', 'denkmal', ST_SetSRID(ST_MakePoint(12.0111, 51.0111), 4326))`);
    expect(names((await rebuilt(p)).bytes)['cache-sql']).toBe('Eingefügt');
    await cached(p);
    await db.pool.query(`UPDATE features.features SET name = 'Geändert' WHERE id = 'cache-sql'`);
    expect(names((await rebuilt(p)).bytes)['cache-sql']).toBe('Geändert');
    await cached(p);
    await db.pool.query(`DELETE FROM features.features WHERE id = 'cache-sql'`);
    expect(names((await rebuilt(p)).bytes)).not.toHaveProperty('cache-sql');
  });

  withMvt('a delete and an insert in one transaction make the cached tile stale even when the count stays the same', async () => {
    const p = path(tileOf(12.021, 51.021, 15));
    await db.pool.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('cache-alt', 'Alt', 'denkmal', ST_SetSRID(ST_MakePoint(12.0211, 51.0211), 4326))`);
    const before = await cached(p);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`DELETE FROM features.features WHERE id = 'cache-alt'`);
      await client.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('cache-neu', 'Neu', 'denkmal', ST_SetSRID(ST_MakePoint(12.0211, 51.0211), 4326))`);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const after = await rebuilt(p);
    expect(decode(after.bytes)).toHaveLength(decode(before.bytes).length);
    expect(names(after.bytes)).toEqual({ 'cache-neu': 'Neu' });

    // The same row deleted and inserted again unchanged: a new row version, so rebuilt (and byte-equal).
    await cached(p);
    await db.pool.query(`WITH gone AS (DELETE FROM features.features WHERE id = 'cache-neu' RETURNING *) SELECT 1`);
    await db.pool.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('cache-neu', 'Neu', 'denkmal', ST_SetSRID(ST_MakePoint(12.0211, 51.0211), 4326))`);
    const same = await rebuilt(p);
    expect(same.bytes.equals(after.bytes)).toBe(true);
    expect(same.headers.get('etag')).toBe(after.headers.get('etag'));
  });

  withMvt('a feature moved across tiles leaves the cached tile it left and enters the one it reached', async () => {
    const from = path(tileOf(12.031, 51.031, 15));
    const to = path(tileOf(12.091, 51.031, 15));
    expect(from).not.toBe(to);
    const id = await create(12.031, 51.031, { name: 'Wandernd' });
    await create(12.091, 51.031, { name: 'Ortsfest' });
    await cached(from);
    await cached(to);
    await db.pool.query(`UPDATE features.features SET geom = ST_SetSRID(ST_MakePoint(12.091, 51.031), 4326) WHERE id = $1`, [id]);
    expect(names((await rebuilt(from)).bytes)).not.toHaveProperty(id);
    expect(names((await rebuilt(to)).bytes)[id]).toBe('Wandernd');
  });

  it('transactions that commit out of stamp order: a tile cached between the commits is stale after the later one', async (context) => {
    if (db.kind !== 'postgres') {
      console.log('tiles: two transactions open at once need PostgreSQL (PGlite serves one connection at a time); set TEST_DATABASE_URL');
      context.skip();
    }
    const p = path(tileOf(12.041, 51.041, 15));
    const early = await create(12.041, 51.041, { name: 'Früh' });
    const late = await create(12.0411, 51.0411, { name: 'Spät' });
    await cached(p);
    const first = await db.pool.connect();
    const second = await db.pool.connect();
    try {
      // The first transaction writes first, so its row takes the older stamp, but commits last.
      await first.query('BEGIN');
      await first.query(`UPDATE features.features SET name = 'Früh geändert' WHERE id = $1`, [early]);
      await first.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('cache-spaet-sichtbar', 'Spät sichtbar', 'denkmal', ST_SetSRID(ST_MakePoint(12.04102, 51.04102), 4326))`);
      await second.query('BEGIN');
      await second.query(`UPDATE features.features SET name = 'Spät geändert' WHERE id = $1`, [late]);
      await second.query('COMMIT');
      const between = await rebuilt(p);
      expect(names(between.bytes)).toMatchObject({ [early]: 'Früh', [late]: 'Spät geändert' });
      expect(names(between.bytes)).not.toHaveProperty('cache-spaet-sichtbar');
      await cached(p);
      await first.query('COMMIT');
    } finally {
      first.release();
      second.release();
    }
    expect(names((await rebuilt(p)).bytes)).toMatchObject({ [early]: 'Früh geändert', [late]: 'Spät geändert', 'cache-spaet-sichtbar': 'Spät sichtbar' });
  });

  withMvt('concurrent first requests for one tile build it once and all get the same bytes', async () => {
    await create(12.071, 51.071, { name: 'Gleichzeitig' });
    const p = path(tileOf(12.071, 51.071, 15));
    const answers = await Promise.all(Array.from({ length: 6 }, () => getTile(p)));
    expect(answers.map((a) => cacheOf(a.headers)).filter((c) => c === 'miss')).toHaveLength(1);
    for (const answer of answers) expect(answer.bytes.equals(answers[0]!.bytes)).toBe(true);
    expect(Object.values(names(answers[0]!.bytes))).toContain('Gleichzeitig');
  });

  withMvt('a rolled-back write leaves the cached tile current', async () => {
    const p = path(tileOf(12.051, 51.051, 15));
    const id = await create(12.051, 51.051);
    const before = await cached(p);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`UPDATE features.features SET name = 'Nie gesehen' WHERE id = $1`, [id]);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    const after = await getTile(p);
    expect(cacheOf(after.headers)).toBe('hit');
    expect(after.bytes.equals(before.bytes)).toBe(true);
  });

  withMvt('sends a large tile gzip to a client that accepts it, with its own ETag, an exact Content-Length and Vary', async () => {
    await db.pool.query(`
      INSERT INTO features.features (id, name, kategorie, geom)
      SELECT 'cache-gz-' || i, 'Quadrat Nummer ' || i, 'denkmal', ST_SetSRID(ST_MakePoint(12.06 + (i % 20) * 0.0002, 51.06 + (i / 20) * 0.0002), 4326)
      FROM generate_series(0, 399) i`);
    const t = tileOf(12.061, 51.061, 14);
    const raw = (headers: Record<string, string>) =>
      new Promise<{ status: number; headers: import('node:http').IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
        httpGet(`${api.url}${path(t)}`, { headers }, (response) => {
          const chunks: Buffer[] = [];
          response.on('data', (chunk: Buffer) => chunks.push(chunk));
          response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, body: Buffer.concat(chunks) }));
        }).on('error', reject);
      });
    const identity = await raw({ 'accept-encoding': 'identity' });
    expect(identity.headers['content-encoding']).toBeUndefined();
    expect(Number(identity.headers['content-length'])).toBe(identity.body.length);
    expect(decode(identity.body).length).toBeGreaterThan(100);
    expect(identity.body.length).toBeGreaterThan(4096);
    for (const accept of ['gzip', 'br;q=1, gzip;q=0.5', '*']) {
      const zipped = await raw({ 'accept-encoding': accept });
      expect(zipped.headers['content-encoding']).toBe('gzip');
      expect(zipped.headers.vary).toContain('Accept-Encoding');
      expect(Number(zipped.headers['content-length'])).toBe(zipped.body.length);
      expect(zipped.body.length).toBeLessThan(identity.body.length / 2);
      expect(gunzipSync(zipped.body).equals(identity.body)).toBe(true);
      expect(zipped.headers.etag).not.toBe(identity.headers.etag);
      const revalidated = await raw({ 'accept-encoding': accept, 'if-none-match': zipped.headers.etag! });
      expect(revalidated.status).toBe(304);
    }
    expect((await raw({ 'accept-encoding': 'gzip;q=0' })).headers['content-encoding']).toBeUndefined();
  });
});

describe('the tile cache in memory', () => {
  const tile = (fingerprint: string, size: number) => ({ fingerprint, digest: 'd', bytes: Buffer.alloc(size) });

  it('serves an entry only under the fingerprint it was built with', () => {
    const cache = createTileCache(1000);
    cache.set('a', tile('1:2:3', 10));
    expect(cache.get('a', '1:2:3')?.bytes.length).toBe(10);
    expect(cache.get('a', '1:2:4')).toBeUndefined();
    cache.set('a', tile('1:2:4', 20));
    expect(cache.get('a', '1:2:3')).toBeUndefined();
    expect(cache.stats()).toEqual({ entries: 1, bytes: 20 + overheadOf('a') });
  });

  it('keeps at most its byte budget, dropping the least recently used tiles first, gzip bytes and each entry\'s own cost included', async () => {
    const budget = 3 * (1000 + overheadOf('a'));
    const cache = createTileCache(budget);
    cache.set('a', tile('f', 1000));
    cache.set('b', tile('f', 1000));
    cache.set('c', tile('f', 1000));
    cache.get('a', 'f');
    cache.set('d', tile('f', 1000));
    expect(cache.get('b', 'f')).toBeUndefined();
    expect(['a', 'c', 'd'].map((k) => cache.get(k, 'f') !== undefined)).toEqual([true, true, true]);
    const big = { fingerprint: 'f', digest: 'd', bytes: Buffer.from(Array.from({ length: 1500 }, (_, i) => i % 251)) };
    cache.set('e', big);
    await cache.gzipped('e', big);
    expect(cache.stats().bytes).toBeLessThanOrEqual(budget);
    cache.set('huge', tile('f', budget - overheadOf('huge') + 1));
    expect(cache.get('huge', 'f')).toBeUndefined();
  });

  it('drops on a change exactly the tiles whose box it meets (edges included), every tile without a box, and nothing else', () => {
    const cache = createTileCache(1024 * 1024);
    const at = (key: string, bounds?: [number, number, number, number]) => cache.set(key, { fingerprint: 'f', digest: 'd', bytes: Buffer.alloc(10), ...(bounds ? { bounds } : {}) });
    at('west', [0, 0, 10, 10]);
    at('east', [20, 0, 30, 10]);
    at('touching', [10, 10, 15, 15]);
    at('far', [1000, 1000, 1010, 1010]);
    at('anywhere');
    const left = () => ['west', 'east', 'touching', 'far', 'anywhere'].filter((key) => cache.peek(key) !== undefined);
    expect(cache.invalidate([[5, 5, 10, 10]])).toBe(3);
    expect(left()).toEqual(['east', 'far']);
    // Stored again after the drop, the tiles are found again: one boxes list of several, one meeting nothing.
    at('west', [0, 0, 10, 10]);
    expect(cache.invalidate([[-50, -50, -40, -40], [25, 5, 26, 6], [9, 9, 9, 9]])).toBe(2);
    expect(left()).toEqual(['far']);
    expect(cache.invalidate([[-Infinity, -Infinity, Infinity, Infinity]])).toBe(1);
    expect(cache.stats()).toEqual({ entries: 0, bytes: 0 });
  });

  it('counts what an empty tile costs: a client walking 100 000 empty tiles leaves the cache within its budget', () => {
    const budget = 1024 * 1024;
    const cache = createTileCache(budget);
    for (let i = 0; i < 100_000; i++) cache.set(`22/${1_000_000 + i}/2000000`, { fingerprint: `${i}:${i}:`, digest: 'd', bytes: Buffer.alloc(0), bounds: [i, 0, i + 1, 1] });
    const { entries, bytes } = cache.stats();
    expect(bytes).toBeLessThanOrEqual(budget);
    expect(entries).toBeLessThanOrEqual(Math.floor(budget / ENTRY_OVERHEAD_BYTES));
    expect(entries).toBeGreaterThan(0);
    // The most recent walk is what stays.
    expect(cache.peek('22/1099999/2000000')).toBeDefined();
    expect(cache.peek('22/1000000/2000000')).toBeUndefined();
  });
});

describe('what tiles are built from (features.tile_features, migration 017)', () => {
  /** Rows where the tile table disagrees with features.features; none, whoever wrote. */
  const disagreements = async (client: { query: TestDatabase['pool']['query'] } = db.pool) =>
    (
      await client.query(`
        SELECT coalesce(f.id, t.id) AS id FROM features.features f FULL JOIN features.tile_features t ON t.id = f.id
        WHERE f.id IS NULL OR t.id IS NULL OR t.geom IS DISTINCT FROM features.web_mercator(f.geom)
           OR (t.kategorie, t.status, t.name) IS DISTINCT FROM (f.kategorie, f.status, f.name)`)
    ).rows;

  it('follows every writer: SQL inserts, updates of each column a tile shows, and deletes', async () => {
    const id = await create(13.46, 52.56, { name: 'Über die API' });
    await db.pool.query(
      `INSERT INTO features.features (id, name, kategorie, geom) VALUES ('per-sql', 'Per SQL', 'denkmal', ST_SetSRID(ST_MakePoint(13.47, 52.57), 4326)),
                                                                       ('nordpol', 'Nordpol', 'denkmal', ST_SetSRID(ST_MakePoint(0, 89.5), 4326))`,
    );
    expect(await disagreements()).toEqual([]);
    await db.pool.query(`UPDATE features.features SET name = 'Umbenannt', kategorie = 'friedhof' WHERE id = 'per-sql'`);
    await db.pool.query(`UPDATE features.features SET geom = ST_SetSRID(ST_MakePoint(13.471, 52.571), 4326) WHERE id = 'per-sql'`);
    await db.pool.query(`UPDATE features.features SET status = 'in_qc' WHERE id = $1`, [id]);
    expect(await disagreements()).toEqual([]);
    const moved = await db.pool.query(`SELECT ST_X(geom) AS x, name FROM features.tile_features WHERE id = 'per-sql'`);
    expect(moved.rows[0]).toMatchObject({ name: 'Umbenannt' });
    expect(moved.rows[0].x).toBeCloseTo((13.471 * Math.PI * 6378137) / 180, 3);
    await db.pool.query(`DELETE FROM features.features WHERE id IN ('per-sql', 'nordpol')`);
    expect(await disagreements()).toEqual([]);
    expect((await db.pool.query(`SELECT 1 FROM features.tile_features WHERE id IN ('per-sql', 'nordpol')`)).rowCount).toBe(0);
  });

  it('is emptied with features.features by a TRUNCATE', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('TRUNCATE features.features CASCADE');
      expect((await client.query('SELECT count(*)::int AS n FROM features.tile_features')).rows[0].n).toBe(0);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
    expect(await disagreements()).toEqual([]);
  });
});

describe('the density of a view (GET /api/tiles/count)', () => {
  withMvt('counts what the list holds for a bbox, up to one more than atMost, and says tiles can be served', async () => {
    const ids = [await create(8.001, 47.001), await create(8.002, 47.002), await create(8.003, 47.003)];
    const bbox = '8.0005,47.0005,8.0035,47.0035';
    const listed = await api.request('GET', `/api/features?bbox=${bbox}&limit=10000`);
    expect((listed.json.features as { id: string }[]).map((f) => f.id).sort()).toEqual([...ids].sort());
    expect((await api.request('GET', `/api/tiles/count?bbox=${bbox}&atMost=5000`)).json).toEqual({ count: 3, exceeds: false, tiles: true });
    expect((await api.request('GET', `/api/tiles/count?bbox=${bbox}&atMost=3`)).json).toEqual({ count: 3, exceeds: false, tiles: true });
    expect((await api.request('GET', `/api/tiles/count?bbox=${bbox}&atMost=2`)).json).toEqual({ count: 3, exceeds: true, tiles: true });
    expect((await api.request('GET', `/api/tiles/count?bbox=${bbox}&atMost=1`)).json).toEqual({ count: 2, exceeds: true, tiles: true });
    expect((await api.request('GET', '/api/tiles/count?bbox=8.1,47.1,8.2,47.2&atMost=1')).json).toEqual({ count: 0, exceeds: false, tiles: true });
  });

  it.each([
    ['/api/tiles/count?atMost=10', 'bbox'],
    ['/api/tiles/count?bbox=1,2,3&atMost=10', 'bbox'],
    ['/api/tiles/count?bbox=0,0,1,1', 'atMost'],
    ['/api/tiles/count?bbox=0,0,1,1&atMost=0', 'atMost'],
    ['/api/tiles/count?bbox=0,0,1,1&atMost=10001', 'atMost'],
    ['/api/tiles/count?bbox=0,0,1,1&atMost=1&atMost=2', 'atMost'],
    ['/api/tiles/count?bbox=0,0,1,1&atMost=1&limit=2', 'limit'],
  ])('answers 400 naming the part for %s', async (p, field) => {
    const response = await api.request('GET', p);
    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toContain('application/problem+json');
    expect(response.json.fields.map((f: { field: string }) => f.field)).toContain(field);
  });
});

describe('tile addresses', () => {
  it.each([
    ['/api/tiles/23/0/0.mvt', 'z'],
    ['/api/tiles/-1/0/0.mvt', 'z'],
    ['/api/tiles/a/0/0.mvt', 'z'],
    ['/api/tiles/2/4/0.mvt', 'x'],
    ['/api/tiles/2/0/4.mvt', 'y'],
    ['/api/tiles/0/0/0.png', 'y'],
    ['/api/tiles/0/0/0', 'y'],
    ['/api/tiles/3/1.5/0.mvt', 'x'],
    ['/api/tiles/0/0/0.mvt?name=', 'name'],
    [`/api/tiles/0/0/0.mvt?name=${'x'.repeat(256)}`, 'name'],
    ['/api/tiles/0/0/0.mvt?name=%00', 'name'],
    ['/api/tiles/0/0/0.mvt?name=a&name=b', 'name'],
    ['/api/tiles/0/0/0.mvt?names=a', 'names'],
  ])('answers 400 naming the part for %s', async (p, field) => {
    const response = await api.request('GET', p);
    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toContain('application/problem+json');
    expect(response.json.fields.map((f: { field: string }) => f.field)).toContain(field);
  });

  it('allows only GET and HEAD', async () => {
    const response = await api.request('POST', '/api/tiles/0/0/0.mvt', { token: admin, body: {} });
    expect(response.status).toBe(405);
    expect(response.headers.get('allow')).toBe('GET, HEAD');
  });

  it('is in the OpenAPI document', async () => {
    const doc = (await api.request('GET', '/api/openapi.json')).json;
    expect(doc.paths['/api/tiles/{z}/{x}/{y}.mvt'].get.responses).toHaveProperty('304');
  });
});

describe('vector tiles without ST_AsMVT', () => {
  it('are encoded in the API: 200 and an MVT to every one of many first requests at once (each preparing the same named statement)', async () => {
    // A fresh service, so none of these finds the probe's answer already there; encodeInApi makes
    // PostGIS take the PGlite path too.
    const tiles = createTileService(db.pool, { encodeInApi: true });
    await create(13.3501, 52.4501, { name: 'Ohne ST_AsMVT' });
    const address = tileOf(13.3501, 52.4501, 15);
    const answers = await Promise.all(Array.from({ length: 8 }, () => tiles.render(address)));
    for (const answer of answers) expect(decode(answer.bytes!)).toContainEqual(expect.objectContaining({ name: 'Ohne ST_AsMVT' }));
  });

  it('the density answer says tiles can be drawn', async () => {
    const response = await api.request('GET', '/api/tiles/count?bbox=0,0,1,1&atMost=10');
    expect(response.status).toBe(200);
    expect(response.json).toMatchObject({ tiles: true });
  });
});

describe('tile requests answered as the Express app did', () => {
  /**
   * GET /api/tiles/{z}/{x}/{y}.mvt, the route a map asks most, answers every kind of request exactly
   * as the Express app did before the move to Fastify: status, headers and the tile's bytes, after the
   * normalisation of test/fixtures/express-answers/README.md (the bytes differ by database: ST_AsMVT on
   * PostgreSQL, the API's encoder on PGlite; each was recorded). A hand-written fast path used to
   * answer the plain reads in front of Express and was held to Express' answers; now one
   * implementation is held to the recorded ones.
   */
  const APP_ORIGIN = 'https://app.example.org';
  const recording = loadRecording('tiles');
  let dataDir: string;
  let server: Server;
  let base: string;
  const tile = path(tileOf(11.061, 50.061, 14));
  /** This run's ETags of the tile, which the recording shows by placeholder. */
  const etags = { plain: '', gzip: '' };

  /** node:http, so paths and headers go out exactly as written; of Server-Timing (milliseconds) only whether the tile came from the cache. */
  function send(method: string, p: string, headers: Record<string, string> = {}) {
    return new Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }>((resolve, reject) => {
      const req = httpRequest(`${base}${p}`, { method, headers, agent: false }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const { date: _date, 'x-request-id': _requestId, connection: _connection, 'keep-alive': _keepAlive, 'server-timing': timing, ...rest } = res.headers;
          resolve({ status: res.statusCode ?? 0, headers: { ...rest, cache: /cache;desc=(\w+)/.exec(String(timing))?.[1] }, body: Buffer.concat(chunks) });
        });
      });
      req.on('error', reject);
      req.end();
    });
  }

  const CASES: Array<{ name: string; method?: string; path: string; headers?: () => Record<string, string> }> = [
    { name: 'an anonymous read', path: tile },
    { name: 'a read from an allowed origin', path: tile, headers: () => ({ origin: APP_ORIGIN }) },
    { name: 'a read from a foreign origin', path: tile, headers: () => ({ origin: 'https://evil.example.net' }) },
    { name: 'a read accepting gzip', path: tile, headers: () => ({ 'accept-encoding': 'gzip' }) },
    { name: 'a revalidation of the current tile', path: tile, headers: () => ({ 'if-none-match': etags.plain }) },
    { name: 'a revalidation of the current gzip tile', path: tile, headers: () => ({ 'if-none-match': etags.gzip, 'accept-encoding': 'gzip' }) },
    { name: 'a revalidation of a stale tile', path: tile, headers: () => ({ 'if-none-match': '"v3-00000000000000000000000000000000"' }) },
    { name: 'an empty tile', path: path(tileOf(-150, -60, 10)) },
    { name: 'a query string', path: `${tile}?v=1` },
    { name: 'a HEAD request', method: 'HEAD', path: tile },
    { name: 'an address out of range', path: '/api/tiles/2/4/0.mvt' },
    { name: 'a forged token', path: tile, headers: () => ({ authorization: 'Bearer e30.e30.AAAA' }) },
    { name: 'a POST', method: 'POST', path: tile },
  ];

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'tile-answers-'));
    const authenticator = await createAuthenticator({ production: false, dataDir });
    server = await serveApp(createApp({ db: db.pool, config: { rateLimit: { writesPerMinute: 0 }, cors: { origins: [APP_ORIGIN] } }, authenticator, logger: pino({ level: 'silent' }, pino.destination({ sync: true })) }));
    base = `http://127.0.0.1:${await listen(server, 0, '127.0.0.1')}`;
    // No other test of this file writes near here: the tile holds these 200 points and nothing else.
    await db.pool.query(`
      INSERT INTO features.features (id, name, kategorie, geom)
      SELECT 'fast-tile-' || i, 'Schnell ' || i, 'friedhof', ST_SetSRID(ST_MakePoint(11.06 + (i % 20) * 0.0002, 50.06 + (i / 20) * 0.0002), 4326)
      FROM generate_series(0, 199) i`);
    etags.plain = String((await send('GET', tile)).headers.etag);
    etags.gzip = String((await send('GET', tile, { 'accept-encoding': 'gzip' })).headers.etag);
    // A server's first answer for a tile is a miss: every case is served once before the comparison, as it was when recording.
    for (const c of CASES) await send(c.method ?? 'GET', c.path, c.headers?.());
  });
  afterAll(async () => {
    if (server) await closeGracefully(server, 1_000);
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('has a recorded Express answer for each case, and no recorded case goes unchecked', () => {
    expect(CASES.map((c) => c.name)).toEqual(Object.keys(recording.cases));
  });

  for (const c of CASES) {
    withMvt(`answers ${c.name} as Express did`, async () => {
      const sent = { method: c.method ?? 'GET', path: c.path, headers: c.headers?.() ?? {} };
      const placeholders = { [etags.plain]: '<ETag of the tile>', [etags.gzip]: '<ETag of the gzip tile>' };
      expect(describeRequest(sent, placeholders), 'the request the answer was recorded for').toEqual(recording.cases[c.name]?.request);
      expect(normalise(await send(sent.method, sent.path, sent.headers))).toEqual(recordedAnswer(recording, c.name, db.kind));
    });
  }

  withMvt('sends the CORS, security and encoding headers with a tile from the cache', async () => {
    const answer = await send('GET', tile, { origin: APP_ORIGIN, 'accept-encoding': 'gzip' });
    expect(answer.status).toBe(200);
    expect(answer.headers).toMatchObject({ vary: 'Origin, Accept-Encoding', 'access-control-allow-origin': APP_ORIGIN, 'x-content-type-options': 'nosniff', 'content-encoding': 'gzip', cache: 'hit' });
  });
});
