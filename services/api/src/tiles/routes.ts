import { Router } from 'express';
import { requirePermission } from '../auth/middleware.js';
import { AppError } from '../../../shared/errors.js';
import { parseTileAddress, type TileService } from './service.js';

export const MVT_MEDIA_TYPE = 'application/vnd.mapbox-vector-tile';

/**
 * GET /api/tiles/:z/:x/:y.mvt. Cache-Control lets browsers and proxies keep a tile but makes them
 * revalidate it every time (no-cache), so an edit is visible at once; an unchanged tile costs a 304.
 */
export function tileRoutes(tiles: TileService): Router {
  const router = Router();
  router.get('/:z/:x/:file', requirePermission('read', 'read tiles'), async (req, res) => {
    const address = parseTileAddress(req.params.z as string, req.params.x as string, req.params.file as string);
    const tile = await tiles.render(address, req.get('if-none-match'));
    res.setHeader('ETag', tile.etag);
    res.setHeader('Cache-Control', 'public, no-cache');
    res.setHeader('Server-Timing', `db;dur=${tile.dbMs.toFixed(1)}`);
    if (tile.bytes === null) {
      res.status(304).end();
      return;
    }
    res.setHeader('Content-Type', MVT_MEDIA_TYPE);
    res.setHeader('Content-Length', tile.bytes.length);
    res.end(tile.bytes);
  });
  router.all('/:z/:x/:file', (req, res) => {
    res.setHeader('Allow', 'GET, HEAD');
    throw new AppError('METHOD_NOT_ALLOWED', `${req.method} is not supported here; allowed: GET, HEAD`);
  });
  return router;
}
