import { Router } from 'express';
import { requirePermission } from '../auth/middleware.js';
import { requireSecondFactor } from '../auth/assurance.js';
import { AppError } from '../../../shared/errors.js';
import { jsonBody } from '../http/body.js';
import { parseOrThrow } from '../http/validate.js';
import { RoleChangeSchema, UserIdSchema, UserListQuerySchema } from './schema.js';
import type { UserService } from './service.js';

/** /api/users: user administration, admin only (anonymous → 401, other roles → 403, before any body is read). */
export function userRoutes(service: UserService): Router {
  const router = Router();
  router.use(requirePermission('users:admin', 'administer users'), requireSecondFactor('administer users'));

  router.get('/', async (req, res) => {
    const query = parseOrThrow(UserListQuerySchema, singleValued(req.query as Record<string, unknown>), 'INVALID_QUERY', 'query');
    const users = await service.list(query);
    const last = users.length === query.limit ? users[users.length - 1] : undefined;
    res.setHeader('Cache-Control', 'no-store');
    res.json({ users, ...(last ? { next: `${req.baseUrl}?${new URLSearchParams({ ...(query.role ? { role: query.role } : {}), after: last.id, limit: String(query.limit) })}` } : {}) });
  });

  router.put('/:id/role', ...jsonBody(), async (req, res) => {
    const id = parseOrThrow(UserIdSchema, req.params.id, 'VALIDATION_FAILED', 'user id');
    const { role } = parseOrThrow(RoleChangeSchema, req.body, 'VALIDATION_FAILED', 'role change');
    const user = await service.setRole(id, role);
    res.setHeader('Cache-Control', 'no-store');
    res.json(user);
  });

  return router;
}

/** A repeated query parameter is an error, not an array (as in the features routes). */
function singleValued(query: Record<string, unknown>): Record<string, unknown> {
  for (const [key, value] of Object.entries(query)) {
    if (Array.isArray(value)) throw new AppError('INVALID_QUERY', `invalid query: ${key}: must be given once`, { fields: [{ field: key, message: 'must be given once' }] });
  }
  return query;
}
