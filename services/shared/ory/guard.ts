import type { FrontendApi } from '@ory/kratos-client';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Principal } from '../principal.js';
import { whoami, kratosCookies } from './kratos-session.js';
import { roleFrom } from '../roles.js';

/**
 * A route guard for the frontend and any Express app behind the parent domain: whoami with the request's
 * cookie. Logged in → `res.locals.identity` and next(). No session → redirect to the login with a return
 * URL (an API client, which does not accept HTML, gets 401 JSON instead). whoami 403 → redirect to the
 * second-factor login (`aal=aal2`). Kratos unreachable → 503, never an open door.
 *
 * The return URL is built from the configured public base URL, never from the Host header, so a forged
 * Host cannot turn the login into an open redirect.
 */

export interface GuardOptions {
  frontend: FrontendApi;
  /** The login start URL, e.g. https://auth.example.org/kratos/self-service/login/browser. */
  loginUrl: string;
  /** This app's public base URL, e.g. https://app.example.org. */
  publicBaseUrl: string;
}

export interface GuardedIdentity extends Principal {
  via: 'session';
  id: string;
}

function wantsHtml(req: Request): boolean {
  return (req.method === 'GET' || req.method === 'HEAD') && req.accepts(['html', 'json']) === 'html';
}

export function createRouteGuard(options: GuardOptions): RequestHandler {
  const base = options.publicBaseUrl.replace(/\/+$/, '');
  const loginRedirect = (req: Request, aal2: boolean) => {
    const url = new URL(options.loginUrl);
    if (aal2) url.searchParams.set('aal', 'aal2');
    url.searchParams.set('return_to', `${base}${req.originalUrl.startsWith('/') ? req.originalUrl : '/'}`);
    return url.toString();
  };

  return async (req: Request, res: Response, next: NextFunction) => {
    let result;
    try {
      result = await whoami(options.frontend, { cookie: kratosCookies(req.headers.cookie) });
    } catch {
      res.status(503).json({ error: 'identity_unavailable', message: 'the identity service is not reachable' });
      return;
    }
    if (result.state === 'authenticated') {
      const traits = (result.session.identity.traits ?? {}) as Record<string, unknown>;
      const identity: GuardedIdentity = {
        id: result.session.identity.id,
        role: roleFrom(result.session.identity.metadata_public),
        via: 'session',
        ...(typeof traits.email === 'string' ? { email: traits.email } : {}),
        ...(typeof traits.name === 'string' ? { name: traits.name } : {}),
      };
      res.locals.identity = identity;
      next();
      return;
    }
    const aal2 = result.state === 'second-factor-required';
    if (wantsHtml(req)) {
      res.redirect(303, loginRedirect(req, aal2));
      return;
    }
    res.status(aal2 ? 403 : 401).json(aal2 ? { error: 'second_factor_required', login: loginRedirect(req, true) } : { error: 'unauthenticated', login: loginRedirect(req, false) });
  };
}
