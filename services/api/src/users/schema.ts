import { z } from 'zod';
import { ROLES } from '../../../shared/principal.js';

/** An identity id as Kratos and token issuers use them (a UUID, or an issuer's `sub`). */
export const UserIdSchema = z.string().min(1).max(255).regex(/^[A-Za-z0-9][A-Za-z0-9._~:@|-]*$/, 'letters, digits and . _ ~ : @ | - only');

export const RoleChangeSchema = z.strictObject({ role: z.enum(ROLES) });

export const UserListQuerySchema = z.strictObject({
  role: z.enum(ROLES).optional(),
  /** The id after which the page starts: the last id of the previous page (keyset paging). */
  after: UserIdSchema.optional(),
  limit: z.coerce.number().int().min(1).transform((n) => Math.min(n, 1_000)).default(100),
});
