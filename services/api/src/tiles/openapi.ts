import { z } from 'zod';
import type { ZodOpenApiPathsObject } from 'zod-openapi';
import { ProblemSchema } from '../../../shared/features/schema.js';
import { TILE_DETAIL_MIN_ZOOM } from '../../../shared/tiles.js';
import { OVERVIEW_BUDGET_BYTES } from './queries.js';
import { DensityQuerySchema, TileQuerySchema } from './routes.js';
import { MAX_COUNT, MAX_ZOOM } from './service.js';

/** GET /api/tiles/{z}/{x}/{y}.mvt in the OpenAPI document (spread into openapi.ts `paths`). */
const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: ProblemSchema } } });

export const tilePaths: ZodOpenApiPathsObject = {
  '/api/tiles/{z}/{x}/{y}.mvt': {
    get: {
      summary: 'A Mapbox Vector Tile of the features (Web Mercator, layer "features")',
      description:
        `Built by PostGIS (ST_AsMVT) from live data under the same visibility rules as GET /api/features. From zoom ${TILE_DETAIL_MIN_ZOOM} on, each feature carries id, kategorie, status and name. Below it a tile is an overview of at most ${OVERVIEW_BUDGET_BYTES} bytes: each feature carries kategorie and status, and its MVT feature id is an integer that is the same for the feature in every tile (to count it once), not its id; a dense overview keeps one feature smaller than a pixel per pixel, simplifies the others to the pixel and, if still too large, keeps the largest first. ?name= filters by name at any zoom. Built tiles are cached in the API's memory and dropped as soon as the API is notified of a change that meets them, whoever wrote it (API, SQL, GeoServer WFS-T, imports); while it cannot be notified, each request asks the database whether its tile is current. The ETag is the MD5 of the tile's bytes (with -gzip for the gzip representation): send it in If-None-Match to get 304 while the tile is unchanged. Clients accepting gzip get tiles of 1 KiB or more gzip-encoded.`,
      requestParams: {
        path: z.object({
          z: z.string().meta({ description: `zoom, 0 to ${MAX_ZOOM}`, example: '12' }),
          x: z.string().meta({ description: 'column, 0 to 2^z − 1', example: '2200' }),
          y: z.string().meta({ description: 'row from the north, 0 to 2^z − 1', example: '1343' }),
        }),
        query: TileQuerySchema,
        header: z.object({ 'If-None-Match': z.string().optional().meta({ description: 'the ETag of the tile the client holds' }) }),
      },
      responses: {
        '200': {
          description: 'the tile (an empty body is an empty tile)',
          headers: z.object({
            ETag: z.string().meta({ description: 'strong ETag: the MD5 of the tile\'s bytes, one per representation' }),
            'Cache-Control': z.string().meta({ description: 'public, no-cache: keep it, revalidate before use' }),
            Vary: z.string().meta({ description: 'Accept-Encoding' }),
            'Content-Encoding': z.string().optional().meta({ description: 'gzip when the client accepts it and the tile is 1 KiB or more' }),
            'Server-Timing': z.string().meta({ description: 'db;dur=<ms>, cache;desc=hit|miss (whether the server-side cache held the tile; db;dur=0.0 when it answered without asking the database)' }),
          }),
          content: { 'application/vnd.mapbox-vector-tile': { schema: z.string().meta({ format: 'binary' }) } },
        },
        '304': { description: 'If-None-Match matches: the tile is unchanged' },
        '400': problem('z, x or y out of range or malformed, or name empty, too long or repeated (the fields list names which)'),
      },
    },
  },
  '/api/tiles/count': {
    get: {
      summary: 'Whether a bbox holds more features than a given count, and whether tiles can be served',
      description: `The web map asks this before drawing a view: more features than one list page → vector tiles, otherwise GeoJSON. Counts what GET /api/features?bbox=… would list, up to atMost + 1 (so the answer stays cheap for any view), at most ${MAX_COUNT}.`,
      requestParams: { query: DensityQuerySchema },
      responses: {
        '200': {
          description: 'the count',
          content: {
            'application/json': {
              schema: z.object({
                count: z.number().int().meta({ description: 'features in the bbox, counted up to atMost + 1' }),
                exceeds: z.boolean().meta({ description: 'count > atMost' }),
                tiles: z.boolean().meta({ description: 'whether this API can serve /api/tiles/{z}/{x}/{y}.mvt (false: the database has no ST_AsMVT)' }),
              }),
            },
          },
        },
        '400': problem('bbox or atMost missing, malformed or out of range (the fields list names which)'),
      },
    },
  },
};
