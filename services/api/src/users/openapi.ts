import { z } from 'zod';
import type { ZodOpenApiPathsObject } from 'zod-openapi';
import { ProblemSchema } from '../../../shared/features/schema.js';
import { ROLES } from '../../../shared/principal.js';
import { RoleChangeSchema, UserIdSchema, UserListQuerySchema } from './schema.js';

/** /api/users in the OpenAPI document (merged into openapi.ts). */
const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: ProblemSchema } } });

const UserSchema = z
  .object({
    id: z.string(),
    email: z.string().nullable(),
    name: z.string().nullable(),
    role: z.enum(ROLES),
    firstSeenAt: z.string().meta({ format: 'date-time' }),
    updatedAt: z.string().meta({ format: 'date-time' }),
  })
  .meta({ id: 'User' });

const adminOnly = { '401': problem('no credentials'), '403': problem('not an admin, or a cookie-authenticated change without our Origin') };

export const userPaths: ZodOpenApiPathsObject = {
  '/api/users': {
    get: {
      summary: 'Users the platform knows, by id (admins)',
      requestParams: { query: UserListQuerySchema },
      responses: {
        '200': { description: 'a page of users; `next` while more follow', content: { 'application/json': { schema: z.object({ users: z.array(UserSchema), next: z.string().optional() }) } } },
        '400': problem('invalid query'),
        ...adminOnly,
      },
    },
  },
  '/api/users/{id}/role': {
    put: {
      summary: 'Set a user’s role in Kratos (metadata_public) and in the users table, both or neither (admins)',
      requestParams: { path: z.object({ id: UserIdSchema }) },
      requestBody: { required: true, content: { 'application/json': { schema: RoleChangeSchema } } },
      responses: {
        '200': { description: 'the user with the new role', content: { 'application/json': { schema: UserSchema } } },
        '400': problem('invalid id or role'),
        ...adminOnly,
        '404': problem('Kratos knows no identity with this id'),
        '500': problem('ROLE_OUT_OF_SYNC: Kratos has the new role, the database could not store it and Kratos could not be set back'),
        '502': problem('Kratos refused the change; nothing was changed'),
        '503': problem('Kratos is not reachable or not configured; nothing was changed'),
      },
    },
  },
};
