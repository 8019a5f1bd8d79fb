import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { assertCan } from './permissions.js';
import { ANONYMOUS, type Authenticator, type Permission, type Principal } from './types.js';

/** Resolves the caller once per request; later handlers read it with principalOf(res). */
export function authenticate(authenticator: Authenticator): RequestHandler {
  return async (req: Request, res: Response, next: NextFunction) => {
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

/** Guard a route by one permission: anonymous → 401 with a Bearer challenge, lacking role → 403. */
export function requirePermission(permission: Permission, what: string = permission): RequestHandler {
  return (_req, res, next) => {
    assertCan(principalOf(res), permission, what);
    next();
  };
}
