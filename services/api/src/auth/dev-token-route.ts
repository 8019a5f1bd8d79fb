import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { AppError } from '../../../shared/errors.js';
import { ROLES } from '../../../shared/principal.js';
import { jsonBody } from '../http/body.js';
import { sendJson } from '../http/fastify.js';
import { parseOrThrow } from '../http/validate.js';
import type { DevKeys } from './dev-keys.js';

/**
 * POST /api/dev/token {role, sub} → {token}: the web app's development sign-in (`/login?as=…`) asks
 * the API for a token signed with the development key, the same one `npm run token` prints.
 *
 * Why it is safe to have: it exists only where the API already trusts the development key (no
 * AUTH_JWKS_URL, not production — boot.ts passes the keys only then), it is refused in production even
 * if keys are handed in, and it answers only callers on the loopback interface, so a development API
 * bound to a public address does not hand out admin tokens to the network.
 */
const DevTokenRequest = z.strictObject({
  role: z.enum(ROLES, { error: `must be one of ${ROLES.join(', ')}` }),
  sub: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$/, 'must be 1 to 64 letters, digits or . _ @ - (starting with a letter or digit)'),
});

const LOOPBACK = new Set(['127.0.0.1', '::1', '::ffff:127.0.0.1']);

export async function devTokenRoutes(app: FastifyInstance, options: { keys: DevKeys | undefined; production: boolean }): Promise<void> {
  const allowed = async (request: { socket: { remoteAddress?: string | undefined } }) => {
    if (options.production || !options.keys) throw new AppError('NOT_FOUND', 'development tokens exist only where the API runs with its development key');
    if (!LOOPBACK.has(request.socket.remoteAddress ?? '')) throw new AppError('FORBIDDEN', 'development tokens are handed out to loopback callers only');
  };
  app.post('/token', { onRequest: allowed, ...jsonBody() }, async (request, reply) => {
    const { role, sub } = parseOrThrow(DevTokenRequest, request.body, 'VALIDATION_FAILED', 'token request');
    // Development only: the token stands for a complete sign-in, second factor included (acr aal2).
    const token = await options.keys!.sign({ sub, role, acr: 'aal2' }, '12h');
    reply.header('Cache-Control', 'no-store');
    return sendJson(reply, { token, expiresIn: 12 * 3600 });
  });
}
