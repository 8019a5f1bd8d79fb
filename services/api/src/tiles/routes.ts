import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { requirePermission } from '../auth/middleware.js';
import { BboxSchema, codePoints, NAME_MAX, storableText } from '../../../shared/features/schema.js';
import { addVary, header, methodNotAllowed, param, sendJson, singleValued } from '../http/fastify.js';
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
export async function tileRoutes(app: FastifyInstance, { tiles }: { tiles: TileService }): Promise<void> {
  app.get('/count', { onRequest: requirePermission('read', 'read features') }, async (request, reply) => {
    const query = parseOrThrow(DensityQuerySchema, singleValued(request.query), 'INVALID_QUERY', 'query');
    reply.header('Cache-Control', 'no-store');
    return sendJson(reply, await tiles.density(query.bbox, query.atMost));
  });
  app.get('/:z/:x/:file', { onRequest: requirePermission('read', 'read tiles') }, async (request, reply) => {
    const address = parseTileAddress(param(request, 'z'), param(request, 'x'), param(request, 'file'));
    const { name } = parseOrThrow(TileQuerySchema, singleValued(request.query), 'INVALID_QUERY', 'query');
    const tile = await tiles.render(address, header(request, 'if-none-match'), acceptsGzip(header(request, 'accept-encoding')), name);
    reply.headers(tileHeaders(tile));
    // Added to cors()' Vary: Origin, not in its place: answers differ by both.
    addVary(reply, 'Accept-Encoding');
    if (tile.bytes === null) return reply.code(304).send();
    return reply.send(tile.bytes);
  });
  methodNotAllowed(app, ['/count', '/:z/:x/:file'], 'GET, HEAD');
}

/**
 * The headers of a tile answer (200 or 304) besides Vary, CORS and nosniff.
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
