import type { Principal } from '../../../shared/principal.js';
import { AppError } from '../../../shared/errors.js';
import { query, withTransaction, type Db, type Queryable } from '../db/pool.js';
import * as sql from './claims-queries.js';

/**
 * Review claims: a reviewer holds a feature in_qc for a limited time, so two reviewers do not review
 * it at once (docs/qc.md "Claims").
 *
 * Glossary
 * - claim: (feature, holder, expiresAt) in qc.claims; live while expiresAt is in the future.
 * - holder: the principal id that took the claim; only the holder renews it (another POST) or, with
 *   admins, releases it (DELETE).
 * - a claim ends on a decision, an edit or deletion of the feature (database trigger), a release, or
 *   expiry. A decision by anyone but the holder of a live claim is refused (409, naming the holder).
 */
export const CLAIM_TTL_SECONDS = 10 * 60;

export interface Claim {
  featureId: string;
  holder: string;
  holderName: string | null;
  claimedAt: string;
  expiresAt: string;
}

export function createClaimService(db: Db, options: { ttlSeconds?: number } = {}) {
  const ttlSeconds = options.ttlSeconds ?? CLAIM_TTL_SECONDS;

  return {
    /** Claim or renew; 409 while someone else holds a live claim, 403 for the reviewer's own submission. */
    async claim(principal: Principal, featureId: string): Promise<Claim> {
      const holder = actorOf(principal);
      return withTransaction(db, async (client) => {
        const { rows } = await query(client, sql.lockFeatureForClaim(featureId));
        const feature = rows[0] as { status: string; submittedBy: string | null } | undefined;
        if (!feature) throw new AppError('FEATURE_NOT_FOUND', `no feature with id ${featureId}`);
        if (feature.status !== 'in_qc') throw new AppError('INVALID_STATE', `the feature is ${feature.status}, not in_qc; only a submitted feature can be claimed for review`);
        if (principal.role !== 'admin' && feature.submittedBy === holder) {
          throw new AppError('FORBIDDEN', 'four-eyes rule: you submitted this feature, another reviewer (or an admin) must review it');
        }
        const taken = await query(client, sql.takeClaim(featureId, holder, principal.name ?? null, ttlSeconds));
        if (taken.rows[0]) return (taken.rows[0] as { claim: Claim }).claim;
        const current = await query(client, sql.liveClaim(featureId));
        const claim = (current.rows[0] as { claim: Claim } | undefined)?.claim;
        // The row existed and was live when the upsert ran; it can only have vanished since by a
        // concurrent release or decision, so saying "try again" is the honest answer.
        if (!claim) throw new AppError('CONFLICT', 'the claim changed hands concurrently; try again');
        throw claimedBy(claim);
      }, { actor: holder });
    },

    /**
     * Release one's own claim (admins: anyone's). Releasing nothing is fine (204); another's live claim
     * is 409. With `expiresAt` (the end the caller's last claim or renewal answered) only that claim
     * goes: a page that closes after another page of the same reviewer renewed the claim leaves it.
     */
    async release(principal: Principal, featureId: string, expiresAt: string | null = null): Promise<void> {
      const holder = actorOf(principal);
      const released = await query(db, sql.releaseClaim(featureId, holder, principal.role === 'admin', expiresAt));
      if (released.rowCount) return;
      const current = await query(db, sql.liveClaim(featureId));
      const claim = (current.rows[0] as { claim: Claim } | undefined)?.claim;
      if (claim && expiresAt !== null && (claim.holder === holder || principal.role === 'admin')) return; // renewed since: kept
      if (claim) throw claimedBy(claim);
      const exists = await query(db, sql.featureStatus(featureId));
      if (exists.rowCount === 0) throw new AppError('FEATURE_NOT_FOUND', `no feature with id ${featureId}`);
    },

    /**
     * Called by the QC service inside a decision's transaction, after the feature row is locked: a
     * live claim by someone else blocks the decision. The decision itself ends the claim (trigger).
     */
    async assertMayDecide(client: Queryable, principal: Principal, featureId: string): Promise<void> {
      const { rows } = await query(client, sql.liveClaim(featureId));
      const claim = (rows[0] as { claim: Claim } | undefined)?.claim;
      if (claim && claim.holder !== principal.id) throw claimedBy(claim);
    },
  };
}

export type ClaimService = ReturnType<typeof createClaimService>;

function claimedBy(claim: Claim): AppError {
  const who = claim.holderName ? `${claim.holderName} (${claim.holder})` : claim.holder;
  return new AppError('CLAIMED', `${who} is reviewing this feature (claim until ${new Date(claim.expiresAt).toISOString()})`, { statusCode: 409 });
}

/**
 * The `expiresAt` of a release (DELETE …?expiresAt=), as a claim's answer gives it: an ISO 8601 time
 * with up to microseconds and an offset, passed to PostgreSQL as written (a JavaScript Date would drop
 * the microseconds the comparison needs). Absent: null; anything else: 400.
 */
export function releaseExpiresAt(value: unknown): string | null {
  if (value === undefined) return null;
  if (typeof value !== 'string' || value.length > 40 || !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:\d{2})$/.test(value) || Number.isNaN(Date.parse(value))) {
    throw new AppError('VALIDATION_FAILED', 'expiresAt must be the expiresAt of a claim, as the claim answered it (ISO 8601 with an offset)');
  }
  return value;
}

function actorOf(principal: Principal): string {
  if (principal.id === null) throw new AppError('UNAUTHENTICATED', 'authentication required');
  return principal.id;
}


