import type { FastifyInstance, FastifyRequest } from 'fastify';
import { requirePermission } from '../auth/middleware.js';
import { requireSecondFactor } from '../auth/assurance.js';
import { jsonBody } from '../http/body.js';
import { sendJson, singleValued } from '../http/fastify.js';
import { parseOrThrow } from '../http/validate.js';
import { RoleChangeSchema, UserIdSchema, UserListQuerySchema } from './schema.js';
import type { UserService } from './service.js';

/** /api/users: user administration, admin only (anonymous → 401, other roles → 403, before any body is read). */
export async function userRoutes(app: FastifyInstance, { service }: { service: UserService }): Promise<void> {
  app.addHook('onRequest', requirePermission('users:admin', 'administer users'));
  app.addHook('onRequest', requireSecondFactor('administer users'));

  app.get('/', async (request, reply) => {
    const query = parseOrThrow(UserListQuerySchema, singleValued(request.query), 'INVALID_QUERY', 'query');
    const users = await service.list(query);
    const last = users.length === query.limit ? users[users.length - 1] : undefined;
    reply.header('Cache-Control', 'no-store');
    return sendJson(reply, { users, ...(last ? { next: `${basePath(request)}?${new URLSearchParams({ ...(query.role ? { role: query.role } : {}), after: last.id, limit: String(query.limit) })}` } : {}) });
  });

  app.put('/:id/role', jsonBody(), async (request, reply) => {
    const id = parseOrThrow(UserIdSchema, (request.params as { id: string }).id, 'VALIDATION_FAILED', 'user id');
    const { role } = parseOrThrow(RoleChangeSchema, request.body, 'VALIDATION_FAILED', 'role change');
    const user = await service.setRole(id, role);
    reply.header('Cache-Control', 'no-store');
    return sendJson(reply, user);
  });
}

/** /api/users as the client named it (Express' baseUrl). */
function basePath(request: FastifyRequest): string {
  const end = request.url.indexOf('?');
  const path = end === -1 ? request.url : request.url.slice(0, end);
  return path.endsWith('/') ? path.slice(0, -1) : path;
}
