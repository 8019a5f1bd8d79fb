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
  record(principal: Principal): Promise<void>;
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
    async record(principal) {
      if (principal.id === null || [...principal.id].length > LIMITS.id) return;
      const fingerprint = JSON.stringify([principal.email ?? null, principal.name ?? null, principal.role, principal.via === 'session']);
      if (seen.get(principal.id) === fingerprint) return;
      try {
        await upsertSeenUser(db, { id: principal.id, email: fits(principal.email, LIMITS.email), name: fits(principal.name, LIMITS.name), role: principal.role }, principal.via === 'session');
        if (seen.size >= MAX_REMEMBERED) seen.clear();
        seen.set(principal.id, fingerprint);
      } catch (error) {
        logger.warn({ err: error, user: principal.id }, 'could not record the caller in users.users');
      }
    },
    forget(id) {
      seen.delete(id);
    },
  };
}

/** An authenticator that also records every authenticated caller. */
export function recordingCallers(authenticator: Authenticator, recorder: UserRecorder): Authenticator {
  return {
    async authenticate(request) {
      const principal = await authenticator.authenticate(request);
      if (principal.via !== 'anonymous') await recorder.record(principal);
      return principal;
    },
  };
}
