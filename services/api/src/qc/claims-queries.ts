import type { Query } from '../db/pool.js';

/**
 * The SQL of review claims (qc.claims, migration 008). Time is the database's (now() of the
 * transaction), so every API process and the expiry check agree on one clock.
 */

export const CLAIM_JSON = `json_build_object(
  'featureId', c.feature_id, 'holder', c.holder, 'holderName', c.holder_name,
  'claimedAt', c.claimed_at, 'expiresAt', c.expires_at)`;

/**
 * The feature and its last submitter, share-locked: a claim waits for a decision running on the same
 * feature (which holds the row FOR UPDATE) and then sees its outcome, so no claim outlives a decision.
 */
export function lockFeatureForClaim(featureId: string): Query {
  return {
    text: `
      SELECT f.status,
        (SELECT t.actor FROM qc.transitions t
          WHERE t.feature_id = f.id AND t.action = 'submit' ORDER BY t.id DESC LIMIT 1) AS "submittedBy"
      FROM features.features f WHERE f.id = $1::text FOR SHARE`,
    values: [featureId],
  };
}

/**
 * Take the claim, renew one's own, or take over an expired one — in one statement. Concurrent
 * claimers serialise on the primary key; the losers' ON CONFLICT sees the winner's live row, the
 * WHERE fails and nothing is returned.
 */
export function takeClaim(featureId: string, holder: string, holderName: string | null, ttlSeconds: number): Query {
  return {
    text: `
      INSERT INTO qc.claims AS c (feature_id, holder, holder_name, claimed_at, expires_at)
      VALUES ($1::text, $2::text, $3::text, now(), now() + make_interval(secs => $4::int))
      ON CONFLICT (feature_id) DO UPDATE
        SET holder = excluded.holder,
            holder_name = excluded.holder_name,
            -- A renewal keeps the time the review started.
            claimed_at = CASE WHEN c.holder = excluded.holder AND c.expires_at > now() THEN c.claimed_at ELSE excluded.claimed_at END,
            expires_at = excluded.expires_at
        WHERE c.holder = excluded.holder OR c.expires_at <= now()
      RETURNING ${CLAIM_JSON} AS claim`,
    values: [featureId, holder, holderName, ttlSeconds],
  };
}

/** The live claim on a feature, if any. */
export function liveClaim(featureId: string): Query {
  return {
    text: `SELECT c.holder, ${CLAIM_JSON} AS claim FROM qc.claims c WHERE c.feature_id = $1::text AND c.expires_at > now()`,
    values: [featureId],
  };
}

/**
 * Release a claim: the holder's own, or any when `anyHolder` (admins). Expired rows go as well. With
 * `expiresAt` only the claim as it stood with that end (what the releasing page last took or
 * renewed): one renewed since, from another page, stays.
 */
export function releaseClaim(featureId: string, holder: string, anyHolder: boolean, expiresAt: string | null = null): Query {
  return {
    text: `DELETE FROM qc.claims c WHERE c.feature_id = $1::text
             AND (c.expires_at <= now() OR (($3::boolean OR c.holder = $2::text) AND ($4::timestamptz IS NULL OR c.expires_at = $4::timestamptz)))
           RETURNING c.holder`,
    values: [featureId, holder, anyHolder, expiresAt],
  };
}

export function featureStatus(featureId: string): Query {
  return { text: `SELECT f.status FROM features.features f WHERE f.id = $1::text`, values: [featureId] };
}
