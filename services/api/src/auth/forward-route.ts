import type { FastifyInstance } from 'fastify';
import { AppError } from '../../../shared/errors.js';
import type { Principal } from '../../../shared/principal.js';
import { principalOf } from './middleware.js';
import { assertCan } from './permissions.js';
import { ensureSecondFactor } from './assurance.js';

/**
 * GET /api/auth/forward: the proxy's `forward_auth` check in front of GeoServer's WFS-T writes
 * (infra/caddy.ts, docs/infra.md "WFS-T writes and who made them").
 *
 * Caddy sends the original request's Authorization and Cookie headers here. The caller is resolved by
 * the same authenticator as every /api route (bearer JWT, opaque Hydra token, Kratos session cookie):
 *   anonymous                        → 401 with a Bearer challenge (Caddy passes it back to the client)
 *   a role that may not create       → 403 (guest)
 *   a reviewer or admin below aal2   → 403 AAL2_REQUIRED (a transaction may delete; AUTH_AAL2_ROLES)
 *   a cookie sent from a foreign page → 403 (the WFS-T POST is a change; same rule as the API's CSRF check)
 *   otherwise                        → 204 with X-Geodata-User and X-Geodata-Role, which Caddy copies onto
 *                                      the request to GeoServer (its HTTP-header authentication filter).
 *
 * X-Geodata-User is `u_` and the 32 hex digits of the identity id: GeoServer puts it into the JDBC
 * session startup SQL as ${GSUSER}, and GeoTools accepts only identifier-shaped values there, so a user
 * name can never carry SQL. Migration 013 turns it back into the identity id for the history.
 */

export const USER_HEADER = 'X-Geodata-User';
export const ROLE_HEADER = 'X-Geodata-Role';

const IDENTITY_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The GeoServer user name of a platform identity, or undefined when its id is not an identity id (a UUID). */
export function geoServerUserOf(principal: Principal): string | undefined {
  if (!principal.id || !IDENTITY_ID.test(principal.id)) return undefined;
  return `u_${principal.id.toLowerCase().replace(/-/g, '')}`;
}

export async function forwardAuthRoutes(app: FastifyInstance, options: { origins: readonly string[] }): Promise<void> {
  app.get('/forward', async (request, reply) => {
    const principal = principalOf(request);
    assertCan(principal, 'create', 'edit features through GeoServer WFS-T');
    // A WFS-T transaction may delete or change anyone's feature, and the proxy cannot see its body: for the
    // roles of the assurance policy (reviewer and admin by default) every WFS-T write needs aal2, as the
    // API's own deletes do.
    await ensureSecondFactor(request, 'write features through GeoServer WFS-T (a transaction may delete)');
    // Caddy forwards the client's Origin with the other request headers.
    const origin = request.headers.origin;
    if (principal.via === 'session' && origin !== undefined && !options.origins.includes(origin)) {
      throw new AppError('FORBIDDEN', `a change with the session cookie from ${origin} is refused`);
    }
    const user = geoServerUserOf(principal);
    if (!user) throw new AppError('FORBIDDEN', 'this account has no identity id GeoServer can name');
    reply.header('Cache-Control', 'no-store').header(USER_HEADER, user).header(ROLE_HEADER, `ROLE_${principal.role.toUpperCase()}`);
    return reply.code(204).send();
  });
}
