import { ROLES, type Role } from './principal.js';

/** The platform role from an identity's metadata_public or a token claim; anything unknown is a guest. */
export function roleFrom(value: unknown): Role {
  const role = value !== null && typeof value === 'object' ? (value as { role?: unknown }).role : value;
  return typeof role === 'string' && (ROLES as readonly string[]).includes(role) ? (role as Role) : 'guest';
}
