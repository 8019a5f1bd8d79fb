import type { SessionResolver } from '../../../shared/ory/session-resolver.js';
import type { TokenIntrospector } from '../../../shared/ory/introspection.js';
import { AppError } from '../../../shared/errors.js';
import { assertStorable, bearerTokenOf, invalidToken } from './jwt.js';
import { oryFailure } from './upstream.js';
import { ANONYMOUS, type Authenticator, type Principal } from '../../../shared/principal.js';

/**
 * The API's authenticator when Ory is configured. Credentials, in order of precedence:
 *
 * 1. `Authorization: Bearer <token>`:
 *    - JWT-shaped (three base64url parts) → verified locally against the issuer's JWKS (`jwt`);
 *    - anything else → an opaque Hydra access token, introspected on Hydra's admin API (cached at most
 *      until it expires). An inactive, expired, revoked or refresh token is a 401.
 * 2. The Kratos session cookie → whoami (cached briefly). An unknown or ended session is anonymous (a
 *    browser with a stale cookie can still read); a session still waiting for its second factor is a 401.
 * 3. Nothing → the anonymous guest.
 *
 * A Bearer header always wins over a cookie, so a request that carries both is not cookie-authenticated
 * and not subject to the CSRF Origin check (an attacker's page cannot set Authorization).
 */

export interface CompositeAuthenticatorOptions {
  jwt: Authenticator;
  sessions?: SessionResolver;
  introspector?: TokenIntrospector;
}

/** header.payload.signature, each base64url — what a JWS compact serialisation looks like. */
const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

export function isJwtShaped(token: string): boolean {
  return JWT_SHAPE.test(token);
}

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join('; ') : value;
}

export function createCompositeAuthenticator(options: CompositeAuthenticatorOptions): Authenticator {
  const { jwt, sessions, introspector } = options;

  async function byIntrospection(token: string): Promise<Principal> {
    let result;
    try {
      result = await introspector!.introspect(token);
    } catch (error) {
      throw await oryFailure('SERVICE_UNAVAILABLE', 'the token issuer (Hydra) cannot be reached to check the access token', error);
    }
    if (!result.active) throw invalidToken('the token is not active (unknown, expired or revoked)');
    return assertStorable(result.principal);
  }

  async function bySession(cookie: string): Promise<Principal> {
    let result;
    try {
      result = await sessions!.resolve({ cookie });
    } catch (error) {
      throw await oryFailure('SERVICE_UNAVAILABLE', 'the identity service (Kratos) cannot be reached to check the session', error);
    }
    if (result === 'anonymous') return ANONYMOUS;
    if (result === 'second-factor-required') {
      throw new AppError('UNAUTHENTICATED', 'the session needs a second factor before it can be used', {
        headers: { 'WWW-Authenticate': 'Bearer realm="api"' },
      });
    }
    return result;
  }

  return {
    // Answered at once without credentials or with a JWT verified before (jwt's answer as it is).
    authenticate(request) {
      const token = bearerTokenOf(request.headers);
      if (token instanceof AppError) return Promise.reject(token);
      if (token !== undefined) {
        if (isJwtShaped(token) || !introspector) return jwt.authenticate(request);
        return byIntrospection(token);
      }
      const cookie = headerValue(request.headers.cookie);
      if (cookie && sessions) return bySession(cookie);
      return ANONYMOUS;
    },
  };
}
