import { Router } from 'express';
import { principalOf, requirePermission } from '../auth/middleware.js';
import { AppError } from '../../../shared/errors.js';
import type { ClaimService } from './claims.js';

/** POST and DELETE /api/qc/claim/:id (docs/qc.md "Claims"). Mounted under /api/qc after authentication. */
export function claimRoutes(claims: ClaimService): Router {
  const router = Router();

  router.post('/claim/:id', requirePermission('qc:review', 'claim features for review'), async (req, res) => {
    res.json(await claims.claim(principalOf(res), featureIdOf(req.params.id as string)));
  });

  router.delete('/claim/:id', requirePermission('qc:review', 'release review claims'), async (req, res) => {
    await claims.release(principalOf(res), featureIdOf(req.params.id as string));
    res.status(204).end();
  });

  router.all('/claim/:id', (req, _res, next) => {
    next(new AppError('METHOD_NOT_ALLOWED', `${req.method} is not allowed here; use POST or DELETE`, { headers: { Allow: 'POST, DELETE' } }));
  });
  return router;
}

/** Any string a feature row could hold is looked up; anything else cannot exist. */
export function featureIdOf(id: string): string {
  if (id.length === 0 || id.length > 255 || id.includes('\u0000')) throw new AppError('FEATURE_NOT_FOUND', 'no feature with this id');
  return id;
}
