/**
 * Who is calling and what they may do.
 *
 * Glossary:
 * - principal: the caller of one request, resolved from a bearer JWT, an opaque Hydra access token
 *   (introspection) or a Kratos session cookie (whoami) — see composite.ts; a caller with no credentials
 *   is the anonymous guest.
 * - role: one of the four platform roles; the permission table below is the seed's.
 * - permission: an action on features or the QC workflow. `update:own` is satisfied only for a
 *   feature the caller created, which the route checks with `isOwner`.
 */
export const ROLES = ['guest', 'contributor', 'reviewer', 'admin'] as const;
export type Role = (typeof ROLES)[number];

export const PERMISSIONS = ['read', 'create', 'update', 'update:own', 'delete', 'qc:submit', 'qc:review', 'users:admin', 'jobs:admin'] as const;
export type Permission = (typeof PERMISSIONS)[number];

export interface Principal {
  /** The `sub` of the token or the identity id; null for the anonymous guest. */
  id: string | null;
  role: Role;
  /** How the caller authenticated; 'anonymous' means no credentials were presented. */
  via: 'anonymous' | 'jwt' | 'session' | 'introspection';
  email?: string;
  name?: string;
  /**
   * Whether the caller's e-mail address is verified: from the Kratos session's verifiable_addresses or
   * the token's `email_verified` claim (set by the consent app). `false` limits the caller to what a
   * guest may do (see permissions.ts); undefined (a token from before the claim existed, a development
   * token) keeps the role.
   */
  emailVerified?: boolean;
  /**
   * Authenticator assurance level of the sign-in behind this request: the Kratos session's
   * `authenticator_assurance_level`, or a token's `acr` claim (`aal2`, set at login from the session) or
   * its `amr` naming a second factor. Unknown counts as aal1.
   */
  aal?: Aal;
}

/**
 * A cached answer may be older than what the identity service knows now: a person who just verified the
 * address or stepped up to a second factor would be refused by a session answer cached before. A
 * principal from such a cache carries (non-enumerable, never serialised) a way to ask again, uncached;
 * guards use it before they refuse for one of those two reasons (auth/assurance.ts, auth/middleware.ts).
 */
export const REFRESH = Symbol('principal.refresh');

/** The principal asked for afresh, when its resolver can; undefined otherwise (or when no longer signed in). */
export async function refreshed(principal: Principal): Promise<Principal | undefined> {
  const refresh = (principal as { [REFRESH]?: () => Promise<Principal | undefined> })[REFRESH];
  return refresh ? refresh() : undefined;
}

/** aal1: one factor (password, passkey without user verification, social login); aal2: a second factor too. */
export type Aal = 'aal1' | 'aal2';

/** `amr` values that stand for a second factor (RFC 8176 names and Kratos' method names). */
const SECOND_FACTOR_AMR = new Set(['otp', 'totp', 'mfa', 'hwk', 'webauthn', 'lookup_secret']);

/** The AAL a token's claims state: `acr` aal2/aal3, or an `amr` list naming a second factor. */
export function aalOfClaims(claims: Record<string, unknown>): Aal | undefined {
  const acr = claims.acr;
  if (acr === 'aal2' || acr === 'aal3') return 'aal2';
  const amr = claims.amr;
  if (Array.isArray(amr) && amr.some((m) => typeof m === 'string' && SECOND_FACTOR_AMR.has(m))) return 'aal2';
  if (acr === 'aal1' || acr === 'aal0' || Array.isArray(amr)) return 'aal1';
  return undefined;
}

export const ANONYMOUS: Principal = Object.freeze({ id: null, role: 'guest', via: 'anonymous' });

/**
 * Resolves the caller of a request. Implementations reject with AppError INVALID_TOKEN (401, with
 * WWW-Authenticate) for a presented but invalid credential and answer ANONYMOUS when none is presented.
 *
 * The answer is a value when nothing had to be waited for (no credentials, a token verified before,
 * a caller already recorded) and a promise otherwise: most requests are answered without a turn of
 * the microtask queue per layer. A refusal is always a rejected promise, never a synchronous throw.
 */
export interface Authenticator {
  authenticate(request: { headers: Record<string, string | string[] | undefined> }): Principal | Promise<Principal>;
}
