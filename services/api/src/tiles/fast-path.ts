import type { FastPath } from '../../../shared/http-server.js';
import { answerReader, type ReaderFastPathOptions } from '../http/reader-fast-path.js';
import { acceptsGzip, tileHeaders } from './routes.js';
import { parseTileAddress, type TileService } from './service.js';

/**
 * GET /api/tiles/{z}/{x}/{y}.mvt answered without Express: a map view asks for tens of tiles at once,
 * and a tile the server has just built should cost little more than building it.
 *
 * Why: measured on a street tile built afresh after a write (bench/tiles.bench.ts), Express and its
 * /api middleware stack cost about 2 ms of HTTP on top of a ~15 ms build, the largest part of the
 * API's overhead over the raw ST_AsMVT query (see features/read-fast-path.ts for why Express costs
 * this much per request).
 *
 * Invariant: this path writes only the 200 or 304 the Express route (tiles/routes.ts) would write, with
 * the same headers (tileHeaders, nosniff, CORS via the same origin set). Anything else — another
 * path or method, a query string, an address out of range, credentials that fail, a caller lacking
 * `read`, a database error or one without ST_AsMVT — goes to Express untouched (`fallback`), which
 * answers it as it always did. services/api/test/tiles.test.ts compares both answers.
 */
const TILE_PATH = /^\/api\/tiles\/(\d{1,2})\/(\d{1,8})\/(\d{1,8}\.mvt)$/;

export interface TileFastPathOptions extends ReaderFastPathOptions {
  tiles: TileService;
}

export function tileFastPath(options: TileFastPathOptions): FastPath {
  const { tiles } = options;
  return (req, res, fallback) => {
    const match = req.method === 'GET' ? TILE_PATH.exec(req.url ?? '') : null;
    if (!match) return fallback();
    let address;
    try {
      address = parseTileAddress(match[1]!, match[2]!, match[3]!);
    } catch {
      return fallback();
    }
    answerReader(options, req, fallback, async (readerHeaders) => {
      const tile = await tiles.render(address, req.headers['if-none-match'], acceptsGzip(req.headers['accept-encoding']));
      const headers = { ...readerHeaders, ...tileHeaders(tile), Vary: 'Origin, Accept-Encoding' };
      if (tile.bytes === null) {
        res.writeHead(304, headers).end();
        return;
      }
      res.writeHead(200, headers).end(tile.bytes);
    });
  };
}
