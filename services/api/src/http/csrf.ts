import { principalOf } from '../auth/middleware.js';
import { AppError } from '../../../shared/errors.js';
import { normalizeOrigin } from './cors.js';
import type { FastifyRequest } from 'fastify';

/**
 * CSRF protection for cookie-authenticated changes. The browser attaches the Kratos session cookie
 * (SameSite=Lax, on the parent domain) to requests from any of our subdomains, so a change that is
 * authenticated by that cookie must prove where it came from: its Origin header (which page scripts
 * cannot forge) must be the API itself or one of CORS_ORIGINS. A missing, `null` or foreign Origin is
 * refused with 403 before the route runs.
 *
 * Requests authenticated by a Bearer token are not subject to it: a foreign page cannot make the
 * browser add an Authorization header. Safe methods (GET, HEAD, OPTIONS) change nothing.
 * Runs after authentication, as it needs to know how the caller authenticated; synchronous, as it
 * never waits (a step of the scope's hook, app.ts).
 */

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export function originCheckForCookieWrites(options: { origins: readonly string[] }): (request: FastifyRequest) => void {
  const allowed = new Set(options.origins.map(normalizeOrigin));
  return (request) => {
    if (SAFE_METHODS.has(request.method) || principalOf(request).via !== 'session') return;
    const origin = request.headers.origin;
    if (origin === undefined || origin === 'null') {
      throw new AppError('CSRF_REJECTED', 'a change authenticated by the session cookie must carry an Origin header', { statusCode: 403 });
    }
    if (allowed.has(origin) || isSameOrigin(origin, request.headers.host)) return;
    throw new AppError('CSRF_REJECTED', `a change authenticated by the session cookie is not accepted from ${origin}`, { statusCode: 403 });
  };
}

/** The API's own pages: the Origin's host:port is the Host the request was sent to. */
function isSameOrigin(origin: string, host: string | undefined): boolean {
  if (!host) return false;
  try {
    return new URL(origin).host === host.toLowerCase();
  } catch {
    return false;
  }
}
