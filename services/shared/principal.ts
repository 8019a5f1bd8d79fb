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
}

export const ANONYMOUS: Principal = Object.freeze({ id: null, role: 'guest', via: 'anonymous' });

/**
 * Resolves the caller of a request. Implementations throw AppError INVALID_TOKEN (401, with
 * WWW-Authenticate) for a presented but invalid credential and return ANONYMOUS when none is presented.
 */
export interface Authenticator {
  authenticate(request: { headers: Record<string, string | string[] | undefined> }): Promise<Principal>;
}
