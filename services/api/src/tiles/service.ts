import { createHash } from 'node:crypto';
import { AppError } from '../../../shared/errors.js';
import { fromDatabaseError } from '../db/errors.js';
import type { Db } from '../db/pool.js';
import { tileQuery } from './queries.js';

/**
 * Vector tiles from live data. Nothing is cached on the server, so every write — through the API,
 * GeoServer WFS-T or SQL — is in the next tile served. The ETag is a digest of the tile's bytes: an
 * edit changes the ETag of exactly the tiles whose content it changes, and a client revalidating an
 * unchanged tile gets 304 without the body.
 */
export const MAX_ZOOM = 22;

export interface TileAddress {
  z: number;
  x: number;
  y: number;
}

export interface Tile {
  bytes: Buffer;
  etag: string;
  dbMs: number;
}

/** Version of the tile encoding; part of the ETag so a change of layer or properties invalidates caches. */
const ENCODING_VERSION = 'v1';

export function createTileService(db: Db) {
  let unsupported: AppError | undefined;
  return {
    async render({ z, x, y }: TileAddress): Promise<Tile> {
      if (unsupported) throw unsupported;
      const started = performance.now();
      let bytes: Buffer;
      try {
        const query = tileQuery(z, x, y);
        const { rows } = await db.query<{ tile: Buffer | null }>(query.text, query.values);
        bytes = rows[0]?.tile ?? Buffer.alloc(0);
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
      return { bytes, etag: etagOf(bytes), dbMs: performance.now() - started };
    },
  };
}

export type TileService = ReturnType<typeof createTileService>;

export function etagOf(bytes: Buffer): string {
  return `"${ENCODING_VERSION}-${createHash('sha256').update(bytes).digest('base64url').slice(0, 27)}"`;
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

/** If-None-Match (RFC 9110 §13.1.2) compares weakly: W/"a" matches "a"; * matches any tile. */
export function noneMatch(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  return header.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag);
}
