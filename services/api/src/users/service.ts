import type { IdentityApi } from '@ory/kratos-client';
import type { Logger } from 'pino';
import { oryFailure } from '../auth/upstream.js';
import type { Role } from '../../../shared/principal.js';
import { withTransaction, type Db } from '../db/pool.js';
import { AppError } from '../../../shared/errors.js';
import { listUsers, lockUser, saveUserRole, type UserRow } from './queries.js';
import type { UserRecorder } from './recorder.js';

/**
 * User administration. The role lives twice: in Kratos (`metadata_public.role`, what sessions and the
 * consent app read) and in users.users (what the API's own queries, e.g. reviewer notices, read).
 *
 * setRole keeps them from disagreeing silently:
 * 1. In one database transaction the user's row is locked (concurrent changes of one user queue up).
 * 2. Kratos is changed first. If Kratos refuses or cannot be reached, the transaction rolls back:
 *    both stores keep the old role and the caller gets 502/503.
 * 3. Then the row is written and the transaction commits. Should that fail after Kratos accepted, Kratos
 *    is set back to the previous metadata. Only if that also fails do they disagree — and then not
 *    silently: the answer is 500 ROLE_OUT_OF_SYNC, an error is logged naming the user and both roles,
 *    and the user's next session sign-in copies Kratos' role into users.users (sessions are authoritative).
 */

export interface UserService {
  list(filter: { role?: Role | undefined; after?: string | undefined; limit: number }): Promise<UserRow[]>;
  setRole(id: string, role: Role): Promise<UserRow>;
}

export interface UserServiceOptions {
  db: Db;
  logger: Logger;
  /** Kratos admin API; without it role changes answer 503 (the API runs without Ory too). */
  identityAdmin?: IdentityApi | undefined;
  recorder?: UserRecorder;
}

type Metadata = Record<string, unknown>;

function metadataOf(value: unknown): Metadata {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? { ...(value as Metadata) } : {};
}

/** The Ory clients' module (and axios) loads on the first failed Kratos call, not with the API. */
const oryClients = () => import('../../../shared/ory/clients.js');

async function kratosError(error: unknown, what: string): Promise<AppError> {
  const status = (await oryClients()).oryStatus(error);
  if (status === 404) return new AppError('USER_NOT_FOUND', 'no identity with this id exists in Kratos', { statusCode: 404 });
  // An answer from Kratos that is an error is a bad gateway; no answer at all is unavailability.
  if (status !== undefined) return oryFailure('UPSTREAM_FAILED', `Kratos refused to ${what} (HTTP ${status}); nothing was changed`, error);
  return oryFailure('SERVICE_UNAVAILABLE', `Kratos cannot be reached to ${what}; nothing was changed`, error);
}

export function createUserService(options: UserServiceOptions): UserService {
  const { db, logger, identityAdmin } = options;

  async function patchMetadata(id: string, metadata: Metadata): Promise<void> {
    // `add` on an existing member replaces it (RFC 6902), and works when metadata_public is null.
    await identityAdmin!.patchIdentity({ id, jsonPatch: [{ op: 'add', path: '/metadata_public', value: metadata }] });
  }

  return {
    list: (filter) => listUsers(db, filter),

    async setRole(id, role) {
      if (!identityAdmin) {
        throw new AppError('SERVICE_UNAVAILABLE', 'role changes need the Kratos admin API (KRATOS_ADMIN_URL is not configured)');
      }
      let kratosChanged: { previous: Metadata; previousRole: unknown } | undefined;
      try {
        const row = await withTransaction(db, async (client) => {
          await lockUser(client, id);
          let identity;
          try {
            identity = (await identityAdmin.getIdentity({ id })).data;
          } catch (error) {
            throw await kratosError(error, 'read the identity');
          }
          const previous = metadataOf(identity.metadata_public);
          try {
            await patchMetadata(id, { ...previous, role });
          } catch (error) {
            throw await kratosError(error, 'change the role');
          }
          kratosChanged = { previous, previousRole: previous.role };
          const traits = metadataOf(identity.traits);
          return saveUserRole(client, {
            id,
            role,
            email: typeof traits.email === 'string' ? traits.email : null,
            name: typeof traits.name === 'string' ? traits.name : null,
          });
        });
        options.recorder?.forget(id);
        return row;
      } catch (error) {
        if (kratosChanged) await undoKratos(id, role, kratosChanged, error);
        throw error;
      }
    },
  };

  async function undoKratos(id: string, role: Role, changed: { previous: Metadata; previousRole: unknown }, cause: unknown): Promise<never> {
    try {
      await patchMetadata(id, changed.previous);
    } catch (undoError) {
      const { describeError } = await oryClients();
      logger.error(
        { user: id, kratosRole: role, databaseRole: changed.previousRole ?? null, databaseError: String((cause as Error).message), kratosError: describeError(undoError) },
        'ROLE OUT OF SYNC: the role was changed in Kratos, the database write failed and Kratos could not be set back',
      );
      throw new AppError(
        'ROLE_OUT_OF_SYNC',
        `the role was set to ${role} in Kratos but could not be stored in the database, and Kratos could not be set back; the user's next sign-in reconciles it, or repeat the request`,
        { statusCode: 500 },
      );
    }
    throw cause;
  }
}
