import type { FastifyReply, FastifyRequest } from 'fastify';
import { assertCan, can } from './permissions.js';
import { ANONYMOUS, refreshed, type Authenticator, type Permission, type Principal } from '../../../shared/principal.js';
import type { Hook } from '../http/fastify.js';

/**
 * Resolves the caller once per request (an onRequest hook of the /api and /ogcapi scopes); later
 * steps read it with principalOf(request). Idempotent: a caller already resolved is kept.
 */
export function authenticate(authenticator: Authenticator): Hook {
  return async (request: FastifyRequest) => {
    if (request.principal !== undefined) return;
    request.principal = await authenticator.authenticate(request.raw);
  };
}

export function principalOf(request: FastifyRequest): Principal {
  return request.principal ?? ANONYMOUS;
}

/**
 * Guard a route by one permission (a route's onRequest hook, so it runs before any body is read):
 * anonymous → 401 with a Bearer challenge, lacking role → 403. An unverified address is looked at
 * again past the session cache before the refusal (it may just have been verified).
 */
export function requirePermission(permission: Permission, what: string = permission): Hook {
  return async (request: FastifyRequest, _reply: FastifyReply) => {
    let principal = principalOf(request);
    if (principal.emailVerified === false && !can(principal, permission)) {
      const fresh = await refreshed(principal);
      if (fresh) request.principal = principal = fresh;
    }
    assertCan(principal, permission, what);
  };
}
