import { Router } from 'express';
import { z } from 'zod';
import { requirePermission } from '../auth/middleware.js';
import { AppError } from '../../../shared/errors.js';
import { BboxSchema, codePoints, NAME_MAX, storableText } from '../../../shared/features/schema.js';
import { parseOrThrow } from '../http/validate.js';
import { MAX_COUNT, parseTileAddress, type Tile, type TileService } from './service.js';

export const MVT_MEDIA_TYPE = 'application/vnd.mapbox-vector-tile';

/** Query of GET /api/tiles/count: a bbox (required) and the count that matters to the caller. */
export const DensityQuerySchema = z.strictObject({
  bbox: BboxSchema,
  atMost: z
    .string()
    .regex(/^\d{1,9}$/, 'must be a positive integer')
    .transform(Number)
    .refine((n) => n >= 1 && n <= MAX_COUNT, `must be from 1 to ${MAX_COUNT}`)
    .meta({ description: `count up to this many (and one more), at most ${MAX_COUNT}`, example: '5000' }),
});

/** Query of GET /api/tiles/{z}/{x}/{y}.mvt: optionally, a search by name. */
export const TileQuerySchema = z.strictObject({
  name: storableText()
    .min(1, 'must not be empty')
    // No feature's name is longer, so a longer search finds nothing.
    .refine((s) => codePoints(s) <= NAME_MAX, `must be at most ${NAME_MAX} characters`)
    .optional()
    .meta({ description: 'only the features whose name contains this, ignoring case (the map\'s search by name)', example: 'friedhof' }),
});

/** Each query parameter once: a repeated one is a 400 naming it, not an array for the schema to misread. */
function singleValued(query: Record<string, unknown>): void {
  for (const [key, value] of Object.entries(query)) {
    if (Array.isArray(value)) throw new AppError('INVALID_QUERY', `invalid query: ${key}: must be given once`, { fields: [{ field: key, message: 'must be given once' }] });
  }
}

/**
 * GET /api/tiles/:z/:x/:y.mvt. Cache-Control lets browsers and proxies keep a tile but makes them
 * revalidate it every time (no-cache), so an edit is visible at once; an unchanged tile costs a 304.
 * The bytes go out with one `end()` of the cached Buffer (no copy, Content-Length exact). An MVT
 * compresses three- to fivefold (repeated property keys and values, small coordinate deltas), so a
 * client accepting gzip gets the gzip bytes, compressed once per built tile and cached with it.
 *
 * GET /api/tiles/count?bbox=…&atMost=N: whether a view holds more than N features (the map draws
 * from tiles then) and whether this database can serve tiles at all.
 */
export function tileRoutes(tiles: TileService): Router {
  const router = Router();
  router.get('/count', requirePermission('read', 'read features'), async (req, res) => {
    singleValued(req.query);
    const query = parseOrThrow(DensityQuerySchema, req.query, 'INVALID_QUERY', 'query');
    res.setHeader('Cache-Control', 'no-store');
    res.json(await tiles.density(query.bbox, query.atMost));
  });
  router.get('/:z/:x/:file', requirePermission('read', 'read tiles'), async (req, res) => {
    const address = parseTileAddress(req.params.z as string, req.params.x as string, req.params.file as string);
    singleValued(req.query);
    const { name } = parseOrThrow(TileQuerySchema, req.query, 'INVALID_QUERY', 'query');
    const tile = await tiles.render(address, req.get('if-none-match'), acceptsGzip(req.get('accept-encoding')), name);
    for (const [name, value] of Object.entries(tileHeaders(tile))) res.setHeader(name, value);
    // Added to cors()' Vary: Origin, not in its place: answers differ by both.
    res.vary('Accept-Encoding');
    if (tile.bytes === null) {
      res.statusCode = 304;
      res.end();
      return;
    }
    res.end(tile.bytes);
  });
  router.all(['/count', '/:z/:x/:file'], (req, res) => {
    res.setHeader('Allow', 'GET, HEAD');
    throw new AppError('METHOD_NOT_ALLOWED', `${req.method} is not supported here; allowed: GET, HEAD`);
  });
  return router;
}

/**
 * The headers of a tile answer (200 or 304) besides Vary, CORS and nosniff: the same from this route
 * and from the fast path before Express (tiles/fast-path.ts).
 */
export function tileHeaders(tile: Tile): Record<string, string | number> {
  const headers: Record<string, string | number> = {
    ETag: tile.etag,
    'Cache-Control': 'public, no-cache',
    'Server-Timing': `db;dur=${tile.dbMs.toFixed(1)}, cache;desc=${tile.cached ? 'hit' : 'miss'}`,
  };
  if (tile.bytes === null) return headers;
  headers['Content-Type'] = MVT_MEDIA_TYPE;
  if (tile.encoding) headers['Content-Encoding'] = tile.encoding;
  headers['Content-Length'] = tile.bytes.length;
  return headers;
}

/** Whether Accept-Encoding accepts gzip (RFC 9110 §12.5.3): named or `*`, with a q above 0. */
export function acceptsGzip(header: string | undefined): boolean {
  let gzip: boolean | undefined;
  let any = false;
  for (const part of header?.split(',') ?? []) {
    const [coding, ...params] = part.trim().toLowerCase().split(';');
    const q = params.map((p) => /^\s*q\s*=\s*([\d.]+)\s*$/.exec(p)?.[1]).find((v) => v !== undefined);
    const accepted = q === undefined || Number(q) > 0;
    if (coding?.trim() === 'gzip' || coding?.trim() === 'x-gzip') gzip = accepted;
    else if (coding?.trim() === '*') any = accepted;
  }
  return gzip ?? any;
}
