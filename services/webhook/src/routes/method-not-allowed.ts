import type { FastifyInstance } from 'fastify';
import { AppError } from '../../../shared/errors.js';

/**
 * 405 with `Allow` for every method a path does not take, as Express' `app.all` after the route
 * answered it (HEAD comes with GET).
 */
export function methodNotAllowed(app: FastifyInstance, url: string, allowed: 'GET' | 'POST'): void {
  const taken = allowed === 'GET' ? ['GET', 'HEAD'] : [allowed];
  app.route({
    method: app.supportedMethods.filter((method) => !taken.includes(method)),
    url,
    handler: async () => {
      throw new AppError('METHOD_NOT_ALLOWED', `use ${allowed}`, { headers: { Allow: allowed } });
    },
  });
}
