import { AppError } from '../../../shared/errors.js';
import { fromDatabaseError } from '../db/errors.js';
import type { Db } from '../db/pool.js';
import { tileQuery } from './queries.js';

/**
 * Vector tiles from live data. Nothing is cached on the server, so every write — through the API,
 * GeoServer WFS-T or SQL — is in the next tile served. The ETag carries a fingerprint of the rows the
 * tile is built from (tiles/queries.ts): an edit changes the ETag of exactly the tiles it touches, and
 * a revalidation with a current ETag is answered from the fingerprint alone, without building the tile.
 */
export const MAX_ZOOM = 22;

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

/** Version of the tile encoding; part of the ETag so a change of layer or properties invalidates caches. */
const ENCODING_VERSION = 'v2';
const ETAG = new RegExp(`^(?:W/)?"${ENCODING_VERSION}-([0-9a-f]{32})"$`);

export function createTileService(db: Db) {
  let unsupported: AppError | undefined;
  return {
    /** The tile, or only its ETag when `ifNoneMatch` holds the current one (or is `*`). */
    async render({ z, x, y }: TileAddress, ifNoneMatch?: string): Promise<Tile> {
      if (unsupported) throw unsupported;
      const known = knownFingerprint(ifNoneMatch);
      const started = performance.now();
      let row: { fingerprint: string; tile: Buffer | null };
      try {
        const query = tileQuery(z, x, y, known);
        // One statement, one round trip: the planner's estimate for a tile stays far below the JIT
        // threshold, so no session setting is needed.
        const { rows } = await db.query<{ fingerprint: string; tile: Buffer | null }>(query.text, query.values);
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
      const etag = `"${ENCODING_VERSION}-${row.fingerprint}"`;
      const notModified = ifNoneMatch?.trim() === '*' || row.fingerprint === known;
      return { etag, bytes: notModified ? null : (row.tile ?? Buffer.alloc(0)), dbMs: performance.now() - started };
    },
  };
}

export type TileService = ReturnType<typeof createTileService>;

/** The fingerprint of the first of our ETags in If-None-Match (RFC 9110 §13.1.2 compares weakly). */
function knownFingerprint(header: string | undefined): string | null {
  for (const tag of header?.split(',') ?? []) {
    const match = ETAG.exec(tag.trim());
    if (match) return match[1]!;
  }
  return null;
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
