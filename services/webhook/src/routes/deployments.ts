/**
 * GET /deployments and /deployments/:id — recent deployments with target, commit, state, timings
 * and log path. Readable only with `Authorization: Bearer $WEBHOOK_ADMIN_TOKEN`; without a
 * configured token the endpoints answer 401 to everyone. Other methods: 405 with `Allow: GET`.
 * With a shared journal (PostgreSQL) every replica answers the same.
 */
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { AppError } from '../../../shared/errors.js';
import { safeEqual } from '../../../shared/safe-compare.js';
import type { DeploymentJournal } from '../deployments/journal.js';
import { methodNotAllowed } from './method-not-allowed.js';

const ListQuery = z.object({
  target: z.string().max(200).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
});

export function deploymentRoutes({ adminToken, journal }: { adminToken: string | undefined; journal: Pick<DeploymentJournal, 'get' | 'list'> }): FastifyPluginAsync {
  return async (app) => {
    const requireAdmin = async (request: FastifyRequest): Promise<void> => {
      const match = /^Bearer (.+)$/.exec(request.headers.authorization ?? '');
      if (!adminToken || !match || !safeEqual(match[1]!, adminToken)) {
        throw new AppError('UNAUTHENTICATED', 'a valid admin bearer token is required', { headers: { 'WWW-Authenticate': 'Bearer' } });
      }
    };
    app.get('/deployments', { onRequest: requireAdmin }, async (request) => {
      const query = ListQuery.safeParse(request.query);
      if (!query.success) throw new AppError('INVALID_QUERY', query.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
      return { deployments: await journal.list(query.data) };
    });
    app.get<{ Params: { id: string } }>('/deployments/:id', { onRequest: requireAdmin }, async (request) => {
      const deployment = await journal.get(request.params.id);
      if (!deployment) throw new AppError('NOT_FOUND', 'no such deployment');
      return deployment;
    });
    methodNotAllowed(app, '/deployments', 'GET');
    methodNotAllowed(app, '/deployments/:id', 'GET');
  };
}
