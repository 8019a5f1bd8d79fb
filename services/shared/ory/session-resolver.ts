import { createHash } from 'node:crypto';
import type { FrontendApi } from '@ory/kratos-client';
import { REFRESH, type Principal } from '../principal.js';
import { emailVerified, whoami } from './kratos-session.js';
import { roleFrom } from '../roles.js';
import { TtlCache } from './ttl-cache.js';

/**
 * Resolves a Kratos session (the browser's cookie or a session token) to the caller, for the API and any
 * other service behind the parent domain. whoami answers are cached briefly (`ttlMs`, never past the
 * session's own expiry) so an API request costs no Kratos round trip most of the time.
 *
 * Trade-off, documented in docs/identity.md: a session ended elsewhere keeps working here for at most
 * `ttlMs`. A 403 (second factor pending) is never cached, so finishing the second factor takes effect
 * at once. Unknown cookies are cached as "anonymous" for the same short time, so garbage cookies cannot
 * turn into a flood of whoami calls.
 */

export interface SessionPrincipal extends Principal {
  via: 'session';
  id: string;
  sessionId: string;
  /** When Kratos ends the session (ms since epoch). */
  expiresAt: number;
}

export type SessionResolution = SessionPrincipal | 'anonymous' | 'second-factor-required';

export interface SessionResolverOptions {
  frontend: FrontendApi;
  ttlMs?: number;
  maxEntries?: number;
  now?: () => number;
  cookieName?: string;
}

export interface SessionResolver {
  /** `cookie` is the request's whole Cookie header; only the Kratos session cookie is used. */
  resolve(credentials: { cookie?: string; sessionToken?: string }): Promise<SessionResolution>;
  /** Forget a session at once (e.g. after the API itself logged the user out). */
  forget(credentials: { cookie?: string; sessionToken?: string }): void;
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

export function createSessionResolver(options: SessionResolverOptions): SessionResolver {
  const ttlMs = options.ttlMs ?? 15_000;
  const now = options.now ?? Date.now;
  const cookieName = options.cookieName ?? 'ory_kratos_session';
  const cache = new TtlCache<SessionResolution>(options.maxEntries ?? 10_000, now);

  function credentialKey(credentials: { cookie?: string; sessionToken?: string }): { key: string; cookie?: string; sessionToken?: string } | undefined {
    const session = cookieValue(credentials.cookie, cookieName);
    if (session) return { key: `c:${createHash('sha256').update(session).digest('base64url')}`, cookie: `${cookieName}=${session}` };
    if (credentials.sessionToken) return { key: `t:${createHash('sha256').update(credentials.sessionToken).digest('base64url')}`, sessionToken: credentials.sessionToken };
    return undefined;
  }

  const resolver: SessionResolver = {
    async resolve(credentials) {
      const found = credentialKey(credentials);
      if (!found) return 'anonymous';
      return cache.getOrLoad(found.key, async () => {
        const result = await whoami(options.frontend, { ...(found.cookie ? { cookie: found.cookie } : {}), ...(found.sessionToken ? { sessionToken: found.sessionToken } : {}) });
        if (result.state === 'second-factor-required') return { value: 'second-factor-required', expiresAt: 0 };
        if (result.state === 'anonymous') return { value: 'anonymous', expiresAt: now() + ttlMs };
        const { session } = result;
        const traits = (session.identity.traits ?? {}) as Record<string, unknown>;
        const expiresAt = session.expires_at ? Date.parse(session.expires_at) : now() + ttlMs;
        const principal: SessionPrincipal = {
          id: session.identity.id,
          role: roleFrom(session.identity.metadata_public),
          via: 'session',
          sessionId: session.id,
          expiresAt,
          ...(typeof traits.email === 'string' ? { email: traits.email } : {}),
          ...(typeof traits.name === 'string' ? { name: traits.name } : {}),
          emailVerified: emailVerified(traits.email, session.identity.verifiable_addresses),
          aal: session.authenticator_assurance_level === 'aal2' || session.authenticator_assurance_level === 'aal3' ? 'aal2' : 'aal1',
        };
        // Ask Kratos again, past the cache: for a guard about to refuse an unverified address or a
        // missing second factor, which the person may have just fixed.
        Object.defineProperty(principal, REFRESH, {
          enumerable: false,
          value: async (): Promise<Principal | undefined> => {
            resolver.forget(credentials);
            const again = await resolver.resolve(credentials);
            return typeof again === 'string' ? undefined : again;
          },
        });
        return { value: principal, expiresAt: Math.min(now() + ttlMs, expiresAt) };
      });
    },
    forget(credentials) {
      const found = credentialKey(credentials);
      if (found) cache.delete(found.key);
    },
  };
  return resolver;
}
