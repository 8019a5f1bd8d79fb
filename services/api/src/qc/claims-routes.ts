import type { FastifyInstance } from 'fastify';
import { principalOf, requirePermission } from '../auth/middleware.js';
import { AppError } from '../../../shared/errors.js';
import { methodNotAllowed, param, sendJson } from '../http/fastify.js';
import type { ClaimService } from './claims.js';

/** POST and DELETE /api/qc/claim/:id (docs/qc.md "Claims"), in the /api/qc scope. */
export async function claimRoutes(app: FastifyInstance, { claims }: { claims: ClaimService }): Promise<void> {
  app.post('/claim/:id', { onRequest: requirePermission('qc:review', 'claim features for review') }, async (request, reply) => {
    return sendJson(reply, await claims.claim(principalOf(request), featureIdOf(param(request, 'id'))));
  });

  app.delete('/claim/:id', { onRequest: requirePermission('qc:review', 'release review claims') }, async (request, reply) => {
    await claims.release(principalOf(request), featureIdOf(param(request, 'id')));
    return reply.code(204).send();
  });

  methodNotAllowed(app, ['/claim/:id'], 'POST, DELETE', (method) => `${method} is not allowed here; use POST or DELETE`);
}

/** Any string a feature row could hold is looked up; anything else cannot exist. */
export function featureIdOf(id: string): string {
  if (id.length === 0 || id.length > 255 || id.includes('\u0000')) throw new AppError('FEATURE_NOT_FOUND', 'no feature with this id');
  return id;
}
