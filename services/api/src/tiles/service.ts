import { createHash } from 'node:crypto';
import { AppError } from '../../../shared/errors.js';
import type { Bbox } from '../../../shared/features/schema.js';
import { fromDatabaseError } from '../db/errors.js';
import type { Db } from '../db/pool.js';
import { createTileCache, type CachedTile } from './cache.js';
import { encodeTile, type TileRow } from './encode.js';
import { countQuery, tileQuery, tileRowsQuery, VISIBILITY_CLASS } from './queries.js';

/**
 * Vector tiles from live data, with built tiles cached in memory. Each request first asks the
 * database for the tile's fingerprint (a few milliseconds: the stamps of the rows the tile meets,
 * tiles/queries.ts); a cached build with the same fingerprint is served as it is, anything else is
 * built again (ST_AsMVT, or the API's own encoder where PostGIS lacks it: tiles/encode.ts; hundreds
 * of milliseconds for a dense tile) in one statement that also
 * returns the fingerprint of the rows it read. So every write — through the API, GeoServer WFS-T or
 * SQL — is in the next tile served, with no invalidation message to lose. The ETag is the MD5 of
 * the tile's bytes, computed once per build: equal ETags mean byte-equal tiles whoever wrote the
 * rows, and an edit changes the ETag of exactly the tiles whose bytes it changes.
 */
export const MAX_ZOOM = 22;
/** The most features a density answer counts (GET /api/tiles/count): more than the list's largest page. */
export const MAX_COUNT = 10_000;

export interface TileAddress {
  z: number;
  x: number;
  y: number;
}

export interface Tile {
  etag: string;
  /** null: the caller's ETag is current (304). */
  bytes: Buffer | null;
  /** The body's Content-Encoding when `bytes` are gzip. */
  encoding?: 'gzip';
  dbMs: number;
  /** Served from the cache (only the fingerprint was read from the database). */
  cached: boolean;
}

export interface TileServiceOptions {
  /** Memory for built tiles, raw and gzip bytes together (default 64 MiB); 0 turns the cache off. */
  cacheBytes?: number;
  /** Encode tiles in the API even where the database has ST_AsMVT (tests and benchmarks compare both). */
  encodeInApi?: boolean;
}

export interface Density {
  /** Features in the bbox, counted up to `atMost + 1`. */
  count: number;
  /** More than `atMost`: the list needs more than one page of that size. */
  exceeds: boolean;
  /**
   * Whether /api/tiles/{z}/{x}/{y}.mvt can serve this database: always true since the API encodes tiles
   * itself where PostGIS cannot (kept for clients that still ask).
   */
  tiles: boolean;
}

/** Version of the tile encoding; part of the ETag so a change of layer or properties invalidates caches. */
const ENCODING_VERSION = 'v4';
/** A strong ETag per representation (RFC 9110 §8.8.3): the gzip body has its own. */
const ETAG = new RegExp(`^(?:W/)?"${ENCODING_VERSION}-([0-9a-f]{32})(?:-gzip)?"$`);
const DEFAULT_CACHE_BYTES = 64 * 1024 * 1024;

export function createTileService(db: Db, options: TileServiceOptions = {}) {
  const cache = createTileCache(options.cacheBytes ?? DEFAULT_CACHE_BYTES);
  /** Reads under way, by tile: a request for a tile being read waits for that read first. */
  const building = new Map<string, Promise<unknown>>();

  /**
   * One statement: the tile's current fingerprint, and the tile built only if it differs from
   * `cachedFingerprint`. A build is stored under the fingerprint read in its own snapshot.
   */
  async function lookup({ z, x, y }: TileAddress, name: string | undefined, key: string, cachedFingerprint: string): Promise<{ entry: CachedTile | undefined; cached: boolean }> {
    let fingerprint: string;
    let bytes: Buffer | null;
    if (await probe()) {
      ({ fingerprint, tile: bytes } = await run<{ fingerprint: string; tile: Buffer | null }>(tileQuery(z, x, y, cachedFingerprint, name)));
    } else {
      const row = await run<{ fingerprint: string; rows: TileRow[] | null }>(tileRowsQuery(z, x, y, cachedFingerprint, name));
      fingerprint = row.fingerprint;
      bytes = row.rows === null ? null : encodeTile(row.rows);
    }
    if (bytes === null) return { entry: cache.get(key, fingerprint), cached: true };
    const entry: CachedTile = { fingerprint, digest: createHash('md5').update(bytes).digest('hex'), bytes };
    cache.set(key, entry);
    return { entry, cached: false };
  }
  /**
   * Whether this database encodes MVT (ST_AsMVT, PostGIS with protobuf-c): asked once with a one-point
   * tile, then remembered. Where it does not (the embedded PGlite), the API encodes the same rows itself
   * (tileRowsQuery + encodeTile): one behaviour on every database.
   */
  let supported: Promise<boolean> | undefined;
  const probe = () =>
    (supported ??= db
      .query(`SELECT ST_AsMVT(t, 'probe') FROM (SELECT ST_AsMVTGeom(ST_MakePoint(0, 0), ST_TileEnvelope(0, 0, 0)) AS geom) t`)
      .then(
        () => !options.encodeInApi,
        (error: unknown) => {
          // Missing protobuf-c or ST_AsMVT: a fact about this database. Anything else may pass: ask again next time.
          if (/protobuf|does not exist/i.test(String((error as Error).message))) return false;
          supported = undefined;
          throw fromDatabaseError(error) ?? error;
        },
      ));
  /**
   * One statement's single row, as a named prepared statement: PostgreSQL parses and plans each of
   * the few tile statements (overview or detail, with or without a search) once per connection
   * instead of on every request, 0.5–0.8 ms of the 2 ms a cache hit spends in the database.
   */
  async function run<Row>(query: { text: string; values: unknown[] }): Promise<Row> {
    try {
      // One statement, one round trip: the planner's estimate for a tile stays far below the JIT
      // threshold, so no session setting is needed.
      const { rows } = await db.query<Row & object>({ name: statementName(query.text), text: query.text, values: query.values });
      return rows[0]!;
    } catch (error) {
      // PostGIS built without protobuf-c, found by the statement itself (the probe said otherwise,
      // e.g. the database was swapped under a running API): encode in the API from the next request on.
      if (/protobuf/i.test(String((error as Error).message))) supported = Promise.resolve(false);
      throw fromDatabaseError(error) ?? error;
    }
  }
  return {
    /**
     * The tile, or only its ETag when `ifNoneMatch` holds the current one (or is `*`); gzip bytes when
     * `gzip` is accepted and the tile is large enough to gain from it. With `name`, only the features
     * whose name holds it (case-insensitive), cached apart from the whole tile.
     */
    async render(address: TileAddress, ifNoneMatch?: string, acceptsGzip = false, name?: string): Promise<Tile> {
      const started = performance.now();
      const { z, x, y } = address;
      const key = `${VISIBILITY_CLASS}/${z}/${x}/${y}${name === undefined ? '' : `?name=${name}`}`;
      // A request arriving while this tile is being read waits for that read, then asks for itself:
      // concurrent first visitors cause one build, and the others a fingerprint check each (their
      // own snapshot, so nothing committed before they arrived can be missed).
      const pending = building.get(key);
      if (pending) await pending.catch(() => undefined);
      let read = lookup(address, name, key, cache.peek(key)?.fingerprint ?? '');
      if (!building.has(key)) {
        const settled = read.finally(() => building.delete(key));
        building.set(key, settled);
        read = settled;
      }
      let { entry, cached } = await read;
      // The cached build was replaced between the statement and now (another request rebuilt it
      // under a newer fingerprint): build for this request alone.
      if (!entry) ({ entry, cached } = await lookup(address, name, key, ''));
      const dbMs = performance.now() - started;
      if (!entry) throw new Error(`tile ${key} was neither cached nor built`);
      const notModified = ifNoneMatch?.trim() === '*' || matches(ifNoneMatch, entry.digest);
      const gzipped = acceptsGzip ? await cache.gzipped(key, entry) : null;
      const etag = `"${ENCODING_VERSION}-${entry.digest}${gzipped ? '-gzip' : ''}"`;
      if (notModified) return { etag, bytes: null, dbMs, cached };
      return gzipped ? { etag, bytes: gzipped, encoding: 'gzip', dbMs, cached } : { etag, bytes: entry.bytes, dbMs, cached };
    },

    /** Entries and bytes the tile cache holds (for tests and diagnostics). */
    cacheStats: () => cache.stats(),

    /** How many features a bbox holds, up to atMost + 1, and whether tiles can be served at all. */
    async density(bbox: Bbox, atMost: number): Promise<Density> {
      const query = countQuery(bbox, atMost);
      const { rows } = await db.query<{ count: number }>(query.text, query.values).catch((error: unknown) => {
        throw fromDatabaseError(error) ?? error;
      });
      const count = rows[0]!.count;
      return { count, exceeds: count > atMost, tiles: true };
    },
  };
}

export type TileService = ReturnType<typeof createTileService>;

/** A tile statement's name, from its text, so one name never stands for two statements. */
function statementName(text: string): string {
  return `tile_${createHash('sha1').update(text).digest('hex').slice(0, 20)}`;
}

/** Whether If-None-Match holds our ETag for this digest (RFC 9110 §13.1.2 compares weakly). */
function matches(header: string | undefined, digest: string): boolean {
  for (const tag of header?.split(',') ?? []) {
    if (ETAG.exec(tag.trim())?.[1] === digest) return true;
  }
  return false;
}

/** z/x/y from the path; out of range or malformed → 400 naming the part. */
export function parseTileAddress(z: string, x: string, file: string): TileAddress {
  const fields: { field: string; message: string }[] = [];
  const match = /^(\d{1,8})\.mvt$/.exec(file);
  const zoom = /^\d{1,2}$/.test(z) ? Number(z) : NaN;
  if (!(zoom >= 0 && zoom <= MAX_ZOOM)) fields.push({ field: 'z', message: `must be an integer from 0 to ${MAX_ZOOM}` });
  const limit = zoom >= 0 && zoom <= MAX_ZOOM ? 2 ** zoom - 1 : NaN;
  const column = /^\d{1,8}$/.test(x) ? Number(x) : NaN;
  const row = match ? Number(match[1]) : NaN;
  if (!(column <= limit)) fields.push({ field: 'x', message: Number.isNaN(limit) ? 'must be an integer' : `must be an integer from 0 to ${limit} at zoom ${zoom}` });
  if (!match) fields.push({ field: 'y', message: 'must be an integer followed by .mvt' });
  else if (!(row <= limit)) fields.push({ field: 'y', message: Number.isNaN(limit) ? 'must be an integer' : `must be an integer from 0 to ${limit} at zoom ${zoom}` });
  if (fields.length > 0) {
    throw new AppError('INVALID_QUERY', `invalid tile address: ${fields.map((f) => `${f.field}: ${f.message}`).join('; ')}`, { fields });
  }
  return { z: zoom, x: column, y: row };
}
