import { Router } from 'express';
import { z } from 'zod';
import { principalOf, requirePermission } from '../auth/middleware.js';
import { AppError } from '../../../shared/errors.js';
import { parseOrThrow } from '../http/validate.js';
import type { CheckService } from './checks.js';
import { featureIdOf } from './claims-routes.js';

export const MineQuerySchema = z.object({ limit: z.coerce.number().int().min(1).max(1000).default(200) }).strict();

/** GET /api/qc/items/:id (the review view) and GET /api/qc/mine (a contributor's submissions). */
export function checkRoutes(checks: CheckService): Router {
  const router = Router();

  router.get('/items/:id', requirePermission('read', 'read QC items'), async (req, res) => {
    res.type('application/json').send(await checks.item(featureIdOf(req.params.id as string)));
  });

  router.get('/mine', requirePermission('qc:submit', 'list your submissions'), async (req, res) => {
    const query = parseOrThrow(MineQuerySchema, req.query, 'INVALID_QUERY', 'query');
    res.type('application/json').send(`{"items":${await checks.mine(principalOf(res), query.limit)}}`);
  });

  router.all(['/items/:id', '/mine'], (req, _res, next) => {
    next(new AppError('METHOD_NOT_ALLOWED', `${req.method} is not allowed here; use GET`, { headers: { Allow: 'GET, HEAD' } }));
  });
  return router;
}
