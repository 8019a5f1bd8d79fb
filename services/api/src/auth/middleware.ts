import type { FastifyRequest, HookHandlerDoneFunction, onRequestHookHandler } from 'fastify';
import { assertCan, can } from './permissions.js';
import { ANONYMOUS, refreshed, type Authenticator, type Permission, type Principal } from '../../../shared/principal.js';

/**
 * Resolves the caller once per request (a step of the /api and /ogcapi scopes' onRequest hook);
 * later steps read it with principalOf(request). Idempotent: a caller already resolved is kept.
 * Returns a promise only when the authenticator has to wait (a token not verified before, a
 * session, a caller to record); an anonymous request or a known token is resolved at once.
 */
export function resolveCaller(authenticator: Authenticator): (request: FastifyRequest) => Promise<void> | undefined {
  return (request) => {
    if (request.principal !== undefined) return undefined;
    const answer = authenticator.authenticate(request.raw);
    if (!(answer instanceof Promise)) {
      request.principal = answer;
      return undefined;
    }
    return answer.then((principal) => {
      request.principal = principal;
    });
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
export function requirePermission(permission: Permission, what: string = permission): onRequestHookHandler {
  return routeGuard(
    (request) => {
      const principal = principalOf(request);
      return principal.emailVerified === false && !can(principal, permission);
    },
    (request) => assertCan(principalOf(request), permission, what),
  );
}

/**
 * A route's guard as a callback hook: `check` throws to refuse. When `askAgain` says the session's
 * cached state may be stale in the caller's favour (an address just verified, a second factor just
 * added), the session is looked at again past its cache before `check`. A callback hook, not an
 * async one: nearly every request passes (or is refused) without waiting, and a promise per guard
 * per request would be for nothing.
 */
export function routeGuard(askAgain: (request: FastifyRequest) => boolean, check: (request: FastifyRequest) => void): onRequestHookHandler {
  return (request, _reply, done) => {
    if (!askAgain(request)) {
      passOrRefuse(check, request, done);
      return;
    }
    askSessionAgain(request).then(() => passOrRefuse(check, request, done), done);
  };
}

/** A synchronous step of a callback hook: done(error) when `check` throws its refusal, done() when it passes. */
export function passOrRefuse(check: (request: FastifyRequest) => void, request: FastifyRequest, done: HookHandlerDoneFunction): void {
  try {
    check(request);
  } catch (error) {
    done(error as Error);
    return;
  }
  done();
}

/** The caller as the session stands now, past its cache (shared/principal.ts refreshed), when it can be asked. */
export async function askSessionAgain(request: FastifyRequest): Promise<void> {
  const fresh = await refreshed(principalOf(request));
  if (fresh) request.principal = fresh;
}
