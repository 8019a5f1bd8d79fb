import type { IdentityApi } from '@ory/kratos-client';
import { createCompositeAuthenticator } from './composite.js';
import { createJwtAuthenticator, invalidToken } from './jwt.js';
import { loadOrCreateDevKeys } from './dev-keys.js';
import type { Authenticator } from '../../../shared/principal.js';

export type { Authenticator, Principal, Role, Permission } from '../../../shared/principal.js';
export { ANONYMOUS } from '../../../shared/principal.js';

export interface AuthenticatorOptions {
  issuer?: string;
  jwksUrl?: string;
  audience?: string;
  production: boolean;
  /** Where the development key lives (used only without jwksUrl, outside production). */
  dataDir: string;
  /** Ory: each part is optional, so the API also runs with JWTs alone. */
  identity?: IdentityAuthOptions;
}

export interface IdentityAuthOptions {
  /** Kratos public API: session cookies are accepted when set (whoami). */
  kratosPublicUrl?: string | undefined;
  /** Hydra admin API: opaque access tokens are accepted when set (introspection). */
  hydraAdminUrl?: string | undefined;
  /** How long a whoami answer is reused (a session ended elsewhere works here at most this long). */
  sessionCacheMs?: number;
  /** Upper bound on reusing an introspection answer (never past the token's exp). */
  introspectionCacheMs?: number;
  /** Per-call timeout of Ory requests. */
  timeoutMs?: number;
}

/**
 * The API's authenticator from its configuration: JWTs against the issuer's JWKS when AUTH_JWKS_URL is
 * set, otherwise (development only) the local development key that `npm run token` signs with; plus,
 * when configured, Kratos session cookies (KRATOS_PUBLIC_URL) and opaque Hydra tokens (HYDRA_ADMIN_URL).
 */
export async function createAuthenticator(options: AuthenticatorOptions): Promise<Authenticator> {
  const jwt = await createJwtOnlyAuthenticator(options);
  const identity = options.identity;
  if (!identity?.kratosPublicUrl && !identity?.hydraAdminUrl) return jwt;
  // No redirects: whoami and introspection answer directly; a redirect would mean a misconfigured URL.
  const baseOptions = { timeout: identity.timeoutMs ?? 5_000, maxRedirects: 0 };
  // The Ory clients (and axios under them) load only when Ory is configured: an API with JWTs alone
  // never needs their few MiB.
  const sessions = identity.kratosPublicUrl
    ? await Promise.all([import('@ory/kratos-client'), import('../../../shared/ory/session-resolver.js')]).then(([kratos, { createSessionResolver }]) =>
        createSessionResolver({ frontend: new kratos.FrontendApi(new kratos.Configuration({ basePath: identity.kratosPublicUrl, baseOptions })), ...(identity.sessionCacheMs !== undefined ? { ttlMs: identity.sessionCacheMs } : {}) }),
      )
    : undefined;
  const introspector = identity.hydraAdminUrl
    ? await Promise.all([import('@ory/hydra-client'), import('../../../shared/ory/introspection.js')]).then(([hydra, { createTokenIntrospector }]) =>
        createTokenIntrospector({ oauth2: new hydra.OAuth2Api(new hydra.Configuration({ basePath: identity.hydraAdminUrl, baseOptions })), ...(identity.introspectionCacheMs !== undefined ? { maxCacheMs: identity.introspectionCacheMs } : {}), ...(options.audience ? { audience: options.audience } : {}) }),
      )
    : undefined;
  return createCompositeAuthenticator({ jwt, ...(sessions ? { sessions } : {}), ...(introspector ? { introspector } : {}) });
}

async function createJwtOnlyAuthenticator(options: AuthenticatorOptions): Promise<Authenticator> {
  if (options.jwksUrl) {
    return createJwtAuthenticator({ jwksUrl: options.jwksUrl, issuer: options.issuer, audience: options.audience });
  }
  if (options.production) {
    if (!options.identity?.hydraAdminUrl) throw new Error('AUTH_JWKS_URL or HYDRA_ADMIN_URL is required in production');
    // Opaque access tokens only (hydra.yml `strategies.access_token: opaque`): a JWT is not a token this
    // deployment's Hydra issues for the API (its ID tokens are JWTs, and are no access tokens).
    return { authenticate: () => Promise.reject(invalidToken('this API accepts opaque access tokens from the platform\'s Hydra only')) };
  }
  const dev = await loadOrCreateDevKeys(options.dataDir);
  return createJwtAuthenticator({ localJwks: dev.jwks, issuer: dev.issuer, audience: options.audience });
}

/** The Kratos admin API client for user administration (role changes); the client loads only then. */
export async function createIdentityAdmin(kratosAdminUrl: string, timeoutMs = 5_000): Promise<IdentityApi> {
  const kratos = await import('@ory/kratos-client');
  return new kratos.IdentityApi(new kratos.Configuration({ basePath: kratosAdminUrl, baseOptions: { timeout: timeoutMs, maxRedirects: 0 } }));
}
