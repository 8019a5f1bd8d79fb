import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { principalOf, requirePermission } from '../auth/middleware.js';
import { featureIdParam, methodNotAllowed, sendText } from '../http/fastify.js';
import { parseOrThrow } from '../http/validate.js';
import type { CheckService } from './checks.js';

export const MineQuerySchema = z.object({ limit: z.coerce.number().int().min(1).max(1000).default(200) }).strict();

/** GET /api/qc/items/:id (the review view) and GET /api/qc/mine (a contributor's submissions). */
export async function checkRoutes(app: FastifyInstance, { checks }: { checks: CheckService }): Promise<void> {
  app.get('/items/:id', { onRequest: requirePermission('read', 'read QC items') }, async (request, reply) => {
    return sendText(reply, 'application/json', await checks.item(featureIdParam(request)));
  });

  app.get('/mine', { onRequest: requirePermission('qc:submit', 'list your submissions') }, async (request, reply) => {
    const query = parseOrThrow(MineQuerySchema, request.query, 'INVALID_QUERY', 'query');
    return sendText(reply, 'application/json', `{"items":${await checks.mine(principalOf(request), query.limit)}}`);
  });

  methodNotAllowed(app, ['/items/:id', '/mine'], 'GET, HEAD', (method) => `${method} is not allowed here; use GET`);
}
