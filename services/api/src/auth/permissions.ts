import { AppError } from '../../../shared/errors.js';
import type { Permission, Principal, Role } from '../../../shared/principal.js';

/** The seed's role table. `*` grants everything, including permissions added later. */
const ROLE_PERMISSIONS: Record<Role, readonly Permission[] | '*'> = {
  guest: ['read'],
  contributor: ['read', 'create', 'update:own', 'qc:submit'],
  reviewer: ['read', 'create', 'update:own', 'qc:submit', 'qc:review'],
  admin: '*',
};

export function can(principal: Principal, permission: Permission): boolean {
  const granted = ROLE_PERMISSIONS[principal.role];
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

export function assertCan(principal: Principal, permission: Permission, what: string = permission): void {
  if (!can(principal, permission)) throw denied(principal, what);
}

/** `update` on any feature, or `update:own` on one the caller created. */
export function assertMayUpdate(principal: Principal, createdBy: string | null): void {
  if (can(principal, 'update')) return;
  if (can(principal, 'update:own') && principal.id !== null && principal.id === createdBy) return;
  if (can(principal, 'update:own') && principal.via !== 'anonymous') {
    throw new AppError('FORBIDDEN', 'only the creator of this feature or an admin may change it');
  }
  throw denied(principal, 'update features');
}
