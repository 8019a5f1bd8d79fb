import { AppError } from '../../../shared/errors.js';
import type { Permission, Principal, Role } from '../../../shared/principal.js';

/** The seed's role table. `*` grants everything, including permissions added later. */
const ROLE_PERMISSIONS: Record<Role, readonly Permission[] | '*'> = {
  guest: ['read'],
  contributor: ['read', 'create', 'update:own', 'qc:submit'],
  reviewer: ['read', 'create', 'update:own', 'qc:submit', 'qc:review'],
  admin: '*',
};

/**
 * The role that counts for this request: an identity whose e-mail address is not verified may do what a
 * guest may (read) until it verifies, whatever role it was given. The role itself is kept (users.users,
 * the tokens): verifying is all it takes.
 */
export function effectiveRole(principal: Principal): Role {
  return principal.emailVerified === false ? 'guest' : principal.role;
}

export function can(principal: Principal, permission: Permission): boolean {
  const granted = ROLE_PERMISSIONS[effectiveRole(principal)];
  return granted === '*' || granted.includes(permission);
}

/** What the caller's own role would grant, were its address verified. */
function roleCan(role: Role, permission: Permission): boolean {
  const granted = ROLE_PERMISSIONS[role];
  return granted === '*' || granted.includes(permission);
}

/**
 * The refusal for a caller lacking a permission: an anonymous caller is asked to authenticate (401 with
 * a Bearer challenge, RFC 6750), an authenticated one is forbidden (403) — even with the role guest.
 */
export function denied(principal: Principal, what: string): AppError {
  if (principal.via === 'anonymous') {
    return new AppError('UNAUTHENTICATED', `authentication required to ${what}`, {
      headers: { 'WWW-Authenticate': 'Bearer realm="api"' },
    });
  }
  return new AppError('FORBIDDEN', `role ${principal.role} may not ${what}`);
}

/** 403 EMAIL_NOT_VERIFIED: the role would allow it, the unverified address does not (yet). */
export function emailNotVerified(what: string): AppError {
  return new AppError('EMAIL_NOT_VERIFIED', `verify your e-mail address to ${what}: until then this account may only read`, { statusCode: 403 });
}

export function assertCan(principal: Principal, permission: Permission, what: string = permission): void {
  if (can(principal, permission)) return;
  if (principal.emailVerified === false && roleCan(principal.role, permission)) throw emailNotVerified(what);
  throw denied(principal, what);
}

/** `update` on any feature, or `update:own` on one the caller created. */
export function assertMayUpdate(principal: Principal, createdBy: string | null): void {
  if (can(principal, 'update')) return;
  if (can(principal, 'update:own') && principal.id !== null && principal.id === createdBy) return;
  if (principal.emailVerified === false && roleCan(principal.role, 'update:own')) throw emailNotVerified('update features');
  if (can(principal, 'update:own') && principal.via !== 'anonymous') {
    throw new AppError('FORBIDDEN', 'only the creator of this feature or an admin may change it');
  }
  throw denied(principal, 'update features');
}
