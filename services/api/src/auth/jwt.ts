import { createLocalJWKSet, createRemoteJWKSet, errors as joseErrors, jwtVerify, type JSONWebKeySet, type JWTPayload } from 'jose';
import { LRUCache } from 'lru-cache';
import { AppError } from '../../../shared/errors.js';
import { ANONYMOUS, ROLES, aalOfClaims, type Authenticator, type Principal, type Role } from '../../../shared/principal.js';

export interface JwtAuthenticatorOptions {
  /** Expected `iss`; when unset any issuer is accepted (only sensible with a local development key). */
  issuer?: string;
  /** Expected `aud`; optional, as many issuers (Hydra without audience) omit it. */
  audience?: string;
  /** Remote key set; jose refetches it when a token names an unknown `kid`, which is how rotation works. */
  jwksUrl?: string | URL;
  /** A fixed key set, for the development key. */
  localJwks?: JSONWebKeySet;
  /** Clock tolerance for exp/nbf, in seconds. */
  clockToleranceSeconds?: number;
  /** How long fetched keys are trusted before a verification fetches them again (default 10 min). */
  keyCacheMaxAgeMs?: number;
  /** Earliest refetch after the previous one, for unknown kids (default 30 s). */
  keyRefetchCooldownMs?: number;
  /** Verified tokens remembered at most (default 10 000); 0 turns the cache off. */
  verifiedCacheSize?: number;
  /** The clock, for tests of expiry. */
  now?: () => number;
}

interface VerifiedToken {
  principal: Principal;
  /** exp (plus the clock tolerance jose also grants), in ms: never reused past it. */
  validUntilMs: number;
  /** When it was verified: reused only while the key set it was verified with is still trusted. */
  verifiedAtMs: number;
}

/** Algorithms the API accepts: asymmetric only, so a leaked JWKS can never be used to sign. */
const ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'];

function challenge(description: string): Record<string, string> {
  // RFC 6750 §3: the description must not contain quotes or backslashes.
  const safe = description.replace(/["\\]/g, "'");
  return { 'WWW-Authenticate': `Bearer realm="api", error="invalid_token", error_description="${safe}"` };
}

export function invalidToken(description: string, cause?: unknown): AppError {
  return new AppError('INVALID_TOKEN', `invalid access token: ${description}`, { headers: challenge(description), cause });
}

/** The bearer token of a request, undefined when none is presented; a malformed header gets the 401 to answer with (returned, not thrown). */
export function bearerTokenOf(headers: Record<string, string | string[] | undefined>): string | undefined | AppError {
  const header = headers.authorization;
  if (header === undefined) return undefined;
  const value = Array.isArray(header) ? header[0] ?? '' : header;
  const match = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i.exec(value);
  if (!match) return invalidToken('the Authorization header must be "Bearer <token>"');
  return match[1];
}

/** The role is the claim `role`, or `ext.role` where Ory Hydra puts session claims in access tokens. */
export function roleOfClaims(payload: Record<string, unknown>): Role {
  const ext = payload.ext;
  const candidate = payload.role ?? (ext && typeof ext === 'object' ? (ext as Record<string, unknown>).role : undefined);
  // An unknown or missing role gets the least privilege, never an error: the token itself is valid.
  return typeof candidate === 'string' && (ROLES as readonly string[]).includes(candidate) ? (candidate as Role) : 'guest';
}

export function principalOfClaims(payload: JWTPayload, via: Principal['via']): Principal {
  const claims = payload as Record<string, unknown>;
  const ext = (claims.ext && typeof claims.ext === 'object' ? claims.ext : {}) as Record<string, unknown>;
  const principal: Principal = { id: payload.sub!, role: roleOfClaims(claims), via };
  const email = claims.email ?? ext.email;
  const name = claims.name ?? ext.name;
  if (typeof email === 'string') principal.email = email;
  if (typeof name === 'string') principal.name = name;
  const verified = claims.email_verified ?? ext.email_verified;
  if (typeof verified === 'boolean') principal.emailVerified = verified;
  const aal = aalOfClaims({ acr: claims.acr ?? ext.acr, amr: claims.amr ?? ext.amr });
  if (aal) principal.aal = aal;
  return principal;
}

/** What users.users (migration 002) holds, in characters (code points) as char_length counts them. */
const CLAIM_LIMITS = { id: 255, email: 320, name: 255 } as const;

/**
 * A caller whose identity the database cannot hold is not authenticated: a subject, e-mail or name
 * with NUL (PostgreSQL text cannot store it), a lone surrogate (it would be stored as U+FFFD, another
 * identity) or over the column's length. Refused here with 401, as a signed but unusable token,
 * instead of reaching the database as a 400 or 500 later.
 */
export function assertStorable(principal: Principal): Principal {
  const claims: Array<[keyof typeof CLAIM_LIMITS, string, string | null | undefined]> = [
    ['id', 'sub', principal.id],
    ['email', 'email', principal.email],
    ['name', 'name', principal.name],
  ];
  for (const [column, claim, value] of claims) {
    if (value === undefined || value === null) continue;
    if (value.includes('\u0000')) throw invalidToken(`claim ${claim} contains a NUL character`);
    if (/\p{Surrogate}/u.test(value)) throw invalidToken(`claim ${claim} contains a lone surrogate`);
    if ([...value].length > CLAIM_LIMITS[column]) throw invalidToken(`claim ${claim} is longer than ${CLAIM_LIMITS[column]} characters`);
  }
  return principal;
}

function describeJoseError(error: unknown): string {
  if (error instanceof joseErrors.JWTExpired) return 'the token has expired';
  if (error instanceof joseErrors.JWTClaimValidationFailed) return `claim ${error.claim} is not accepted`;
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return 'the signature does not verify';
  if (error instanceof joseErrors.JWKSNoMatchingKey) return 'no key of the issuer matches the token';
  if (error instanceof joseErrors.JOSEAlgNotAllowed) return 'the signing algorithm is not accepted';
  if (error instanceof joseErrors.JWSInvalid || error instanceof joseErrors.JWTInvalid) return 'the token is malformed';
  return 'the token cannot be verified';
}

/**
 * JWTs verified against a key set (ES256/RS256 … from the issuer's JWKS, or the development key).
 *
 * Verified tokens are remembered (signature checks cost more than the rest of a read): a token seen
 * again is answered from memory while all of these hold, otherwise it is verified again:
 * - its exp (with the same clock tolerance as the verification) has not passed;
 * - the key set it was verified with is still the current one: when jose fetches a changed JWKS
 *   (on an unknown kid, or keys older than keyCacheMaxAgeMs), every remembered token is forgotten, so
 *   a key the issuer withdrew stops working exactly when it would without the cache;
 * - it was verified less than keyCacheMaxAgeMs ago, so a remembered token cannot outlive the key
 *   set's own freshness (the re-verification is what makes jose look at the JWKS again).
 * Only successes are remembered; a token is a bearer secret either way and stays in memory only.
 */
export function createJwtAuthenticator(options: JwtAuthenticatorOptions): Authenticator {
  const keyCacheMaxAgeMs = options.keyCacheMaxAgeMs ?? 600_000;
  let keySet: ReturnType<typeof createLocalJWKSet> | ReturnType<typeof createRemoteJWKSet>;
  let currentKeys: () => unknown;
  if (options.jwksUrl) {
    // Refetch at most every 30 s on an unknown kid (rotation) and keep keys for 10 minutes.
    const remote = createRemoteJWKSet(new URL(options.jwksUrl), {
      cooldownDuration: options.keyRefetchCooldownMs ?? 30_000,
      cacheMaxAge: keyCacheMaxAgeMs,
      timeoutDuration: 5_000,
    });
    keySet = remote;
    currentKeys = () => JSON.stringify(remote.jwks() ?? null);
  } else if (options.localJwks) {
    keySet = createLocalJWKSet(options.localJwks);
    currentKeys = () => 'fixed';
  } else {
    throw new Error('a JWT authenticator needs jwksUrl or localJwks');
  }
  const now = options.now ?? Date.now;
  const toleranceMs = (options.clockToleranceSeconds ?? 5) * 1000;
  const maxEntries = options.verifiedCacheSize ?? 10_000;
  // Read only with `peek`: the oldest verified first out, in constant time (a Map trimmed with
  // keys().next() walks past every deleted entry V8 still keeps as a hole).
  const verified = new LRUCache<string, VerifiedToken>({ max: Math.max(1, maxEntries) });
  // jose fetches the key set again only inside a verification, so comparing it after each one
  // (success or failure) sees every refetch; answers from memory cannot miss one.
  let keysOfCache = currentKeys();
  const noticeRefetch = (): void => {
    const keys = currentKeys();
    if (keys === keysOfCache) return;
    // The key set changed (rotation, withdrawal): nothing verified before counts any more.
    verified.clear();
    keysOfCache = keys;
  };

  const remembered = (token: string): Principal | undefined => {
    const entry = verified.peek(token);
    if (!entry) return undefined;
    const at = now();
    if (at >= entry.validUntilMs || at - entry.verifiedAtMs >= keyCacheMaxAgeMs) {
      verified.delete(token);
      return undefined;
    }
    return { ...entry.principal };
  };

  const remember = (token: string, principal: Principal, exp: number): void => {
    if (maxEntries <= 0) return;
    // The cache's bound drops the oldest: a flood of distinct tokens cannot grow memory.
    verified.set(token, { principal: { ...principal }, validUntilMs: exp * 1000 + toleranceMs, verifiedAtMs: now() });
  };

  const verify = async (token: string): Promise<Principal> => {
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, keySet, {
        algorithms: ALGORITHMS,
        requiredClaims: ['sub', 'exp'],
        clockTolerance: options.clockToleranceSeconds ?? 5,
        ...(options.issuer ? { issuer: options.issuer } : {}),
        ...(options.audience ? { audience: options.audience } : {}),
      }));
    } catch (error) {
      noticeRefetch();
      if (error instanceof joseErrors.JWKSTimeout || (error instanceof TypeError && !(error instanceof joseErrors.JOSEError))) {
        // The key server is unreachable: the caller did nothing wrong, and we cannot tell.
        throw new AppError('SERVICE_UNAVAILABLE', 'the token issuer cannot be reached', { cause: error });
      }
      throw invalidToken(describeJoseError(error), error);
    }
    if (typeof payload.sub !== 'string' || payload.sub.length === 0) throw invalidToken('the token has no subject');
    noticeRefetch();
    const principal = assertStorable(principalOfClaims(payload, 'jwt'));
    remember(token, principal, payload.exp!);
    return principal;
  };

  return {
    // No token, or one verified before: answered at once. A malformed header is a rejection.
    authenticate(request) {
      const token = bearerTokenOf(request.headers);
      if (token instanceof AppError) return Promise.reject(token);
      if (token === undefined) return ANONYMOUS;
      return remembered(token) ?? verify(token);
    },
  };
}
