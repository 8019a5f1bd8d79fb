import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { assertCan, can } from './permissions.js';
import { ANONYMOUS, refreshed, type Authenticator, type Permission, type Principal } from '../../../shared/principal.js';

/**
 * Resolves the caller once per request; later handlers read it with principalOf(res). Idempotent: when
 * the app already authenticated the request (for the CSRF check in front of every /api route), a
 * router's own authenticate() reuses that answer instead of verifying the credentials again.
 */
export function authenticate(authenticator: Authenticator): RequestHandler {
  return async (req: Request, res: Response, next: NextFunction) => {
    if (res.locals.principal !== undefined) return next();
    try {
      res.locals.principal = await authenticator.authenticate(req);
      next();
    } catch (error) {
      next(error);
    }
  };
}

export function principalOf(res: Response): Principal {
  return (res.locals.principal as Principal | undefined) ?? ANONYMOUS;
}

/**
 * Guard a route by one permission: anonymous → 401 with a Bearer challenge, lacking role → 403. An
 * unverified address is looked at again past the session cache before the refusal (it may just have
 * been verified).
 */
export function requirePermission(permission: Permission, what: string = permission): RequestHandler {
  return async (_req, res, next) => {
    let principal = principalOf(res);
    if (principal.emailVerified === false && !can(principal, permission)) {
      const fresh = await refreshed(principal);
      if (fresh) res.locals.principal = principal = fresh;
    }
    assertCan(principal, permission, what);
    next();
  };
}
