import { AppError } from '../../../shared/errors.js';
import type { Bbox } from '../../../shared/features/schema.js';
import { fromDatabaseError } from '../db/errors.js';
import type { Db } from '../db/pool.js';
import { countQuery, tileQuery } from './queries.js';

/**
 * Vector tiles from live data. Nothing is cached on the server, so every write — through the API,
 * GeoServer WFS-T or SQL — is in the next tile served. The ETag is the MD5 of the tile's bytes,
 * computed by Postgres in the statement that builds the tile (tiles/queries.ts): an edit changes the
 * ETag of exactly the tiles whose bytes it changes, and a tile costs one statement, one scan.
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
  dbMs: number;
}

export interface Density {
  /** Features in the bbox, counted up to `atMost + 1`. */
  count: number;
  /** More than `atMost`: the list needs more than one page of that size. */
  exceeds: boolean;
  /** Whether /api/tiles/{z}/{x}/{y}.mvt can serve this database (false: 501, draw GeoJSON). */
  tiles: boolean;
}

/** Version of the tile encoding; part of the ETag so a change of layer or properties invalidates caches. */
const ENCODING_VERSION = 'v3';
const ETAG = new RegExp(`^(?:W/)?"${ENCODING_VERSION}-([0-9a-f]{32})"$`);

export function createTileService(db: Db) {
  let unsupported: AppError | undefined;
  /** Whether this database encodes MVT: asked once with a one-point tile, then remembered. */
  let supported: Promise<boolean> | undefined;
  const probe = () =>
    (supported ??= db
      .query(`SELECT ST_AsMVT(t, 'probe') FROM (SELECT ST_AsMVTGeom(ST_MakePoint(0, 0), ST_TileEnvelope(0, 0, 0)) AS geom) t`)
      .then(
        () => true,
        (error: unknown) => {
          // Missing protobuf-c or ST_AsMVT: a fact about this database. Anything else may pass: ask again next time.
          if (/protobuf|does not exist/i.test(String((error as Error).message))) return false;
          supported = undefined;
          throw fromDatabaseError(error) ?? error;
        },
      ));
  return {
    /** The tile, or only its ETag when `ifNoneMatch` holds the current one (or is `*`). */
    async render({ z, x, y }: TileAddress, ifNoneMatch?: string): Promise<Tile> {
      if (unsupported) throw unsupported;
      const started = performance.now();
      let row: { digest: string; tile: Buffer };
      try {
        const query = tileQuery(z, x, y);
        // One statement, one round trip: the planner's estimate for a tile stays far below the JIT
        // threshold, so no session setting is needed.
        const { rows } = await db.query<{ digest: string; tile: Buffer }>(query.text, query.values);
        row = rows[0]!;
      } catch (error) {
        if (/protobuf/i.test(String((error as Error).message))) {
          // PostGIS built without protobuf-c (the embedded PGlite): say so once, and every time after.
          unsupported = new AppError('TILES_UNAVAILABLE', 'vector tiles need PostGIS built with protobuf-c, which this database lacks (the embedded development database does); read features with GET /api/features', {
            statusCode: 501,
            cause: error,
          });
          throw unsupported;
        }
        throw fromDatabaseError(error) ?? error;
      }
      const etag = `"${ENCODING_VERSION}-${row.digest}"`;
      const notModified = ifNoneMatch?.trim() === '*' || matches(ifNoneMatch, row.digest);
      return { etag, bytes: notModified ? null : row.tile, dbMs: performance.now() - started };
    },

    /** How many features a bbox holds, up to atMost + 1, and whether tiles can be served at all. */
    async density(bbox: Bbox, atMost: number): Promise<Density> {
      const query = countQuery(bbox, atMost);
      const [{ rows }, tiles] = await Promise.all([db.query<{ count: number }>(query.text, query.values).catch((error: unknown) => {
        throw fromDatabaseError(error) ?? error;
      }), unsupported ? Promise.resolve(false) : probe()]);
      const count = rows[0]!.count;
      return { count, exceeds: count > atMost, tiles };
    },
  };
}

export type TileService = ReturnType<typeof createTileService>;

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
