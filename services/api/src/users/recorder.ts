import type { Logger } from 'pino';
import type { Db } from '../db/pool.js';
import type { Authenticator, Principal } from '../../../shared/principal.js';
import { upsertSeenUser } from './queries.js';

/**
 * Keeps users.users in step with the callers the API sees, so the QC reviewer notices find reviewers'
 * addresses. Cheap by construction: a principal whose (id, email, name, role) was recorded before by
 * this process is not written again, so steady traffic costs no database write. The set is bounded;
 * when it is full it starts over (the worst case is one redundant, no-op upsert per user).
 *
 * A failed write is logged and never fails the request: the caller's credentials are fine.
 */

export interface UserRecorder {
  /** Records the caller; undefined (nothing to wait for) when this process has recorded it as it is. */
  record(principal: Principal): Promise<void> | undefined;
  /** Forget what was recorded (after an admin changed a role, so the next sight writes again). */
  forget(id: string): void;
}

const MAX_REMEMBERED = 50_000;
/** The column limits of users.users: longer claims are not stored rather than failing the write. */
const LIMITS = { id: 255, email: 320, name: 255 };

function fits(value: string | undefined, max: number): string | null {
  return value !== undefined && [...value].length <= max ? value : null;
}

export function createUserRecorder(db: Db, logger: Logger): UserRecorder {
  const seen = new Map<string, string>();
  return {
    record(principal) {
      const id = principal.id;
      if (id === null || [...id].length > LIMITS.id) return undefined;
      const fingerprint = JSON.stringify([principal.email ?? null, principal.name ?? null, principal.role, principal.via === 'session']);
      if (seen.get(id) === fingerprint) return undefined;
      return upsertSeenUser(db, { id, email: fits(principal.email, LIMITS.email), name: fits(principal.name, LIMITS.name), role: principal.role }, principal.via === 'session').then(
        () => {
          if (seen.size >= MAX_REMEMBERED) seen.clear();
          seen.set(id, fingerprint);
        },
        (error: unknown) => logger.warn({ err: error, user: id }, 'could not record the caller in users.users'),
      );
    },
    forget(id) {
      seen.delete(id);
    },
  };
}

/** An authenticator that also records every authenticated caller. */
export function recordingCallers(authenticator: Authenticator, recorder: UserRecorder): Authenticator {
  /** The principal once recorded, when recording it means waiting; undefined when it does not. */
  const recorded = (principal: Principal): Promise<Principal> | undefined => {
    if (principal.via === 'anonymous') return undefined;
    return recorder.record(principal)?.then(() => principal);
  };
  return {
    // At once when the inner answer was and the caller is anonymous or recorded as it is.
    authenticate(request) {
      const answer = authenticator.authenticate(request);
      if (answer instanceof Promise) return answer.then((principal) => recorded(principal) ?? principal);
      return recorded(answer) ?? answer;
    },
  };
}
