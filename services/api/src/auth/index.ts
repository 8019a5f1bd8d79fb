import { createJwtAuthenticator } from './jwt.js';
import { loadOrCreateDevKeys } from './dev-keys.js';
import type { Authenticator } from './types.js';

export type { Authenticator, Principal, Role, Permission } from './types.js';
export { ANONYMOUS } from './types.js';

export interface AuthenticatorOptions {
  issuer?: string;
  jwksUrl?: string;
  audience?: string;
  production: boolean;
  /** Where the development key lives (used only without jwksUrl, outside production). */
  dataDir: string;
}

/**
 * The API's authenticator from its configuration: the issuer's JWKS when AUTH_JWKS_URL is set,
 * otherwise (development only) the local development key that `npm run token` signs with.
 */
export async function createAuthenticator(options: AuthenticatorOptions): Promise<Authenticator> {
  if (options.jwksUrl) {
    return createJwtAuthenticator({ jwksUrl: options.jwksUrl, issuer: options.issuer, audience: options.audience });
  }
  if (options.production) throw new Error('AUTH_JWKS_URL is required in production');
  const dev = await loadOrCreateDevKeys(options.dataDir);
  return createJwtAuthenticator({ localJwks: dev.jwks, issuer: dev.issuer, audience: options.audience });
}
