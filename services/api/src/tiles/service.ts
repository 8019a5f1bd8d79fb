import { createHash } from 'node:crypto';
import { AppError } from '../../../shared/errors.js';
import type { Bbox } from '../../../shared/features/schema.js';
import { query, type Db, type Query } from '../db/pool.js';
import { meets, tileBounds, type Box } from './bounds.js';
import { createTileCache, type CachedTile } from './cache.js';
import type { TileChangeFeed } from './changes.js';
import { encodeTile, type TileRow } from './encode.js';
import { countQuery, tileQuery, tileRowsQuery, VISIBILITY_CLASS } from './queries.js';

/**
 * Vector tiles from live data, with built tiles cached in memory and dropped exactly when a change
 * meets them, whoever wrote it (API, GeoServer WFS-T, SQL, imports).
 *
 * - Every write to features.features records the boxes it changed and notifies every API process
 *   (migration 023); this process hears them on a connection of its own (tiles/changes.ts) and drops
 *   the cached tiles, of every zoom, whose box the change meets. While it hears them (the feed is
 *   covered), a cached tile is served with no query at all: a key lookup.
 * - A build records the snapshot it read (tiles/queries.ts tileQuery). While the feed is not covered
 *   (start-up, a lost connection, its catch-up) or where there is no feed, every request asks the
 *   database instead whether a change the tile's snapshot does not see meets it (an index lookup),
 *   and rebuilds it if one does: nothing stale is served, only slower.
 * - A build or a check that a change met while it ran, or that began or ended uncovered, is kept but
 *   not trusted: its next request asks the database once.
 * - Builds run ST_AsMVT, or the API's own encoder where PostGIS lacks it (tiles/encode.ts); overview
 *   tiles are thinned to a size budget (tiles/queries.ts). The ETag is the MD5 of the tile's bytes,
 *   computed once per build: equal ETags mean byte-equal tiles whoever wrote the rows.
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
  /** Time spent waiting for the database (0 when the cache answered alone). */
  dbMs: number;
  /** Served from the cache (asking the database at most whether it was current). */
  cached: boolean;
}

export interface TileServiceOptions {
  /** Memory for built tiles, raw and gzip bytes together (default 64 MiB); 0 turns the cache off. */
  cacheBytes?: number;
  /** Encode tiles in the API even where the database has ST_AsMVT (tests and benchmarks compare both). */
  encodeInApi?: boolean;
  /**
   * The changes this process hears (tiles/changes.ts): while covered, a cached tile is served without
   * a query. Without it every request asks the database whether its tile is current.
   */
  changes?: TileChangeFeed | undefined;
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

/** A database read under way (a build or a check): the box it is about and whether a change met it meanwhile. */
interface Read {
  bounds: Box;
  /** The feed's session and coverage when it began. */
  session: number;
  covered: boolean;
  touched: boolean;
}

export function createTileService(db: Db, options: TileServiceOptions = {}) {
  const cache = createTileCache(options.cacheBytes ?? DEFAULT_CACHE_BYTES);
  const changes = options.changes;
  /** Reads under way, by tile: a request for a tile being read waits for that read first. */
  const building = new Map<string, Promise<unknown>>();
  const reads = new Set<Read>();
  /** Entries whose `generation` is this one are current while the feed is covered; a catch-up that failed moves it on. */
  let generation = 0;
  const trusted = (entry: CachedTile): boolean => changes !== undefined && changes.covered && entry.generation === generation;
  changes?.subscribe({
    changed(boxes) {
      cache.invalidate(boxes);
      for (const read of reads) if (boxes.some((box) => meets(box, read.bounds))) read.touched = true;
    },
    lost() {
      for (const read of reads) read.touched = true;
    },
    regained(caughtUp) {
      if (!caughtUp) generation++;
    },
  });

  /**
   * One statement: whether the cached build `held` is still current and, if not (or without one), the
   * tile built afresh with the snapshot it was read in.
   */
  async function load({ z, x, y }: TileAddress, name: string | undefined, key: string, held: CachedTile | undefined): Promise<{ entry: CachedTile; cached: boolean }> {
    const read: Read = { bounds: tileBounds({ z, x, y }), session: changes?.session ?? 0, covered: changes?.covered ?? false, touched: false };
    reads.add(read);
    let fresh: boolean;
    let snapshot: string;
    let bytes: Buffer | null;
    try {
      const since = held?.fingerprint ?? null;
      if (await probe()) {
        ({ fresh, snapshot, tile: bytes } = await run<{ fresh: boolean; snapshot: string; tile: Buffer | null }>(tileQuery(z, x, y, since, name)));
      } else {
        const row = await run<{ fresh: boolean; snapshot: string; rows: TileRow[] | null }>(tileRowsQuery(z, x, y, since, name));
        ({ fresh, snapshot } = row);
        bytes = row.rows === null ? null : encodeTile(row.rows);
      }
    } finally {
      reads.delete(read);
    }
    // Heard every change committed while the statement ran: what it found is current until the next one.
    const sure = read.covered && !read.touched && changes?.covered === true && changes.session === read.session;
    if (fresh && held) {
      // Current as of this statement's snapshot, which is what this request gets even if a change or
      // another build replaced the entry meanwhile (then it is not put back).
      if (cache.get(key, held.fingerprint) === held && sure) held.generation = generation;
      return { entry: held, cached: true };
    }
    if (bytes === null) throw new Error(`tile ${key} was neither current nor built`);
    const entry: CachedTile = { fingerprint: snapshot, digest: createHash('md5').update(bytes).digest('hex'), bytes, bounds: read.bounds };
    if (sure) entry.generation = generation;
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
    (supported ??= query(db, { text: `SELECT ST_AsMVT(t, 'probe') FROM (SELECT ST_AsMVTGeom(ST_MakePoint(0, 0), ST_TileEnvelope(0, 0, 0)) AS geom) t`, values: [] }).then(
      () => !options.encodeInApi,
      (error: unknown) => {
        // Missing protobuf-c or ST_AsMVT: a fact about this database. Anything else may pass: ask again next time.
        if (/protobuf|does not exist/i.test(databaseMessage(error))) return false;
        supported = undefined;
        throw error;
      },
    ));
  /**
   * One statement's single row, as a named prepared statement: PostgreSQL parses and plans each of
   * the few tile statements (overview or detail, with or without a search) once per connection
   * instead of on every request.
   */
  async function run<Row>(statement: Query): Promise<Row> {
    try {
      // One statement, one round trip: the planner's estimate for a tile stays far below the JIT
      // threshold, so no session setting is needed.
      const { rows } = await query(db, { name: statementName(statement.text), text: statement.text, values: statement.values });
      return rows[0] as Row;
    } catch (error) {
      // PostGIS built without protobuf-c, found by the statement itself (the probe said otherwise,
      // e.g. the database was swapped under a running API): encode in the API from the next request on.
      if (/protobuf/i.test(databaseMessage(error))) supported = Promise.resolve(false);
      throw error;
    }
  }
  return {
    /**
     * The tile, or only its ETag when `ifNoneMatch` holds the current one (or is `*`); gzip bytes when
     * `gzip` is accepted and the tile is large enough to gain from it. With `name`, only the features
     * whose name holds it (case-insensitive), cached apart from the whole tile.
     */
    async render(address: TileAddress, ifNoneMatch?: string, acceptsGzip = false, name?: string): Promise<Tile> {
      const { z, x, y } = address;
      const key = `${VISIBILITY_CLASS}/${z}/${x}/${y}${name === undefined ? '' : `?name=${name}`}`;
      let entry = cache.peek(key);
      let cached = true;
      let dbMs = 0;
      if (entry && trusted(entry)) {
        cache.get(key, entry.fingerprint); // marks it recently used
      } else {
        const started = performance.now();
        // A request arriving while this tile is being read waits for that read, then looks again:
        // concurrent first visitors cause one build, and the others find it trusted (covered) or ask
        // whether it is current (their own snapshot, so nothing committed before they arrived is missed).
        const pending = building.get(key);
        if (pending) await pending.catch(() => undefined);
        entry = cache.peek(key);
        if (!entry || !trusted(entry)) {
          let read = load(address, name, key, entry);
          if (!building.has(key)) {
            const settled = read.finally(() => building.delete(key));
            building.set(key, settled);
            read = settled;
          }
          ({ entry, cached } = await read);
        }
        dbMs = performance.now() - started;
      }
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
      const { rows } = await query(db, countQuery(bbox, atMost));
      const count = (rows[0] as { count: number }).count;
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

/** pg's message of a failed statement: query() leaves it as it is, or as the cause of the API's error. */
function databaseMessage(error: unknown): string {
  const failure = error as { message?: unknown; cause?: { message?: unknown } } | null;
  return `${String(failure?.message)} ${String(failure?.cause?.message)}`;
}
