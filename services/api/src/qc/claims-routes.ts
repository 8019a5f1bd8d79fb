import type { FastifyInstance } from 'fastify';
import { principalOf, requirePermission } from '../auth/middleware.js';
import { featureIdParam, methodNotAllowed, sendJson } from '../http/fastify.js';
import { releaseExpiresAt, type ClaimService } from './claims.js';

/** POST and DELETE /api/qc/claim/:id (docs/qc.md "Claims"), in the /api/qc scope. */
export async function claimRoutes(app: FastifyInstance, { claims }: { claims: ClaimService }): Promise<void> {
  app.post('/claim/:id', { onRequest: requirePermission('qc:review', 'claim features for review') }, async (request, reply) => {
    return sendJson(reply, await claims.claim(principalOf(request), featureIdParam(request)));
  });

  app.delete('/claim/:id', { onRequest: requirePermission('qc:review', 'release review claims') }, async (request, reply) => {
    const { expiresAt } = (request.query ?? {}) as { expiresAt?: unknown };
    await claims.release(principalOf(request), featureIdParam(request), releaseExpiresAt(expiresAt));
    return reply.code(204).send();
  });

  methodNotAllowed(app, ['/claim/:id'], 'POST, DELETE', (method) => `${method} is not allowed here; use POST or DELETE`);
}

