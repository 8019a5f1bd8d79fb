import { createHash } from 'node:crypto';
import type { OAuth2Api } from '@ory/hydra-client';
import { aalOfClaims, type Principal } from '../principal.js';
import { roleFrom } from '../roles.js';
import { TtlCache } from './ttl-cache.js';

/**
 * Introspects opaque Hydra access tokens on the admin API (POST /admin/oauth2/introspect) and caches the
 * answer at most until the token expires (and at most `maxCacheMs`, so a revocation is seen within that
 * bound). The role comes from the token session the consent app set (`ext.role`), or a top-level `role`
 * claim; without either the caller is a guest.
 */

export interface TokenPrincipal extends Principal {
  via: 'introspection';
  id: string;
  clientId?: string;
  scopes: string[];
  /** Token expiry, ms since epoch. */
  expiresAt: number;
}

export type IntrospectionResult = { active: true; principal: TokenPrincipal } | { active: false };

export interface TokenIntrospectorOptions {
  oauth2: OAuth2Api;
  /** Upper bound on caching an active token, whatever its expiry (revocations show up within it). */
  maxCacheMs?: number;
  /** How long an inactive answer is remembered (a token never turns active again). */
  inactiveCacheMs?: number;
  maxEntries?: number;
  now?: () => number;
  /** Scopes the token must carry; Hydra answers inactive otherwise. */
  requiredScope?: string;
  /**
   * The audience the token must be granted for (`aud`, e.g. geodata-api). A token issued for another
   * resource server, or for none, counts as inactive here: it was never meant for this API.
   */
  audience?: string;
}

export interface TokenIntrospector {
  introspect(token: string): Promise<IntrospectionResult>;
}

export function createTokenIntrospector(options: TokenIntrospectorOptions): TokenIntrospector {
  const now = options.now ?? Date.now;
  const maxCacheMs = options.maxCacheMs ?? 5 * 60_000;
  const inactiveCacheMs = options.inactiveCacheMs ?? 60_000;
  const cache = new TtlCache<IntrospectionResult>(options.maxEntries ?? 50_000, now);

  return {
    introspect(token) {
      const key = createHash('sha256').update(token).digest('base64url');
      return cache.getOrLoad(key, async () => {
        const { data } = await options.oauth2.introspectOAuth2Token({ token, ...(options.requiredScope ? { scope: options.requiredScope } : {}) });
        const audiences = Array.isArray(data.aud) ? data.aud : [];
        const forThisAudience = options.audience === undefined || audiences.includes(options.audience);
        if (!data.active || !data.sub || data.token_use === 'refresh_token' || !forThisAudience) {
          return { value: { active: false }, expiresAt: now() + inactiveCacheMs };
        }
        const ext = (data.ext ?? {}) as Record<string, unknown>;
        const top = data as unknown as Record<string, unknown>;
        const expiresAt = typeof data.exp === 'number' ? data.exp * 1000 : now();
        const email = ext.email ?? top.email;
        const name = ext.name ?? top.name;
        const verified = ext.email_verified ?? top.email_verified;
        const aal = aalOfClaims({ acr: ext.acr ?? top.acr, amr: ext.amr ?? top.amr });
        const principal: TokenPrincipal = {
          id: data.sub,
          role: roleFrom(ext.role ?? top.role),
          via: 'introspection',
          scopes: (data.scope ?? '').split(' ').filter(Boolean),
          expiresAt,
          ...(data.client_id ? { clientId: data.client_id } : {}),
          ...(typeof email === 'string' ? { email } : {}),
          ...(typeof name === 'string' ? { name } : {}),
          ...(typeof verified === 'boolean' ? { emailVerified: verified } : {}),
          ...(aal ? { aal } : {}),
        };
        // An expired token is not active any more: never cache past exp (a token without exp is not cached).
        return { value: { active: true, principal }, expiresAt: Math.min(expiresAt, now() + maxCacheMs) };
      });
    },
  };
}
