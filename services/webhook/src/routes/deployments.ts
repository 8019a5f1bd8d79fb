/**
 * GET /deployments and /deployments/:id — recent deployments with target, commit, state, timings
 * and log path. Readable only with `Authorization: Bearer $WEBHOOK_ADMIN_TOKEN`; without a
 * configured token the endpoints answer 401 to everyone.
 */
import { Router, type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import { AppError } from '../../../shared/errors.js';
import { safeEqual } from '../../../shared/safe-compare.js';
import type { DeploymentStore } from '../deployments/store.js';

const ListQuery = z.object({
  target: z.string().max(200).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
});

export function deploymentsRouter({ adminToken, store }: { adminToken: string | undefined; store: DeploymentStore }): Router {
  const router = Router();
  const requireAdmin = (req: Request, _res: Response, next: NextFunction): void => {
    const match = /^Bearer (.+)$/.exec(req.headers.authorization ?? '');
    if (!adminToken || !match || !safeEqual(match[1]!, adminToken)) {
      throw new AppError('UNAUTHENTICATED', 'a valid admin bearer token is required', { headers: { 'WWW-Authenticate': 'Bearer' } });
    }
    next();
  };
  router.get('/deployments', requireAdmin, (req, res) => {
    const query = ListQuery.safeParse(req.query);
    if (!query.success) throw new AppError('INVALID_QUERY', query.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
    res.json({ deployments: store.list(query.data) });
  });
  router.get('/deployments/:id', requireAdmin, (req, res) => {
    const deployment = store.get(String(req.params.id));
    if (!deployment) throw new AppError('NOT_FOUND', 'no such deployment');
    res.json(deployment);
  });
  return router;
}
