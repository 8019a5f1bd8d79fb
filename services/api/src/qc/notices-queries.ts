import type { Query } from '../db/pool.js';

/** The SQL of contributor notices and QC comment threads (migration 022). */

/**
 * The notice of a decision for the feature's latest submitter, in the decision's transaction; none
 * when the decider is the submitter (an admin deciding their own submission) or nobody submitted.
 */
export function insertNotice(n: { featureId: string; transitionId: string; action: 'approve' | 'reject'; reason: string | null; actor: string; actorName: string | null; recipient: string | null }): Query {
  return {
    name: 'qc_insert_notice',
    text: `
      INSERT INTO qc.notices (recipient, feature_id, feature_name, transition_id, action, reason, actor, actor_name)
      SELECT $1::text, f.id, f.name, $3::bigint, $4::text, $5::text, $6::text, $7::text
      FROM features.features f
      WHERE f.id = $2::text AND $1::text IS NOT NULL AND $1::text <> $6::text`,
    values: [n.recipient, n.featureId, n.transitionId, n.action, n.reason, n.actor, n.actorName],
  };
}

const NOTICE_JSON = `json_build_object('id', n.id, 'featureId', n.feature_id, 'featureName', n.feature_name, 'action', n.action,
  'reason', n.reason, 'actor', n.actor, 'actorName', n.actor_name, 'createdAt', n.created_at, 'readAt', n.read_at)`;

/** A user's notices, newest first, and how many are unread. */
export function noticesOf(recipient: string, limit: number): Query {
  return {
    text: `
      SELECT (SELECT coalesce(json_agg(${NOTICE_JSON} ORDER BY n.id DESC), '[]'::json)
                FROM (SELECT * FROM qc.notices WHERE recipient = $1::text ORDER BY id DESC LIMIT $2::int) n)::text AS "itemsJson",
             (SELECT count(*)::int FROM qc.notices WHERE recipient = $1::text AND read_at IS NULL) AS unread`,
    values: [recipient, limit],
  };
}

export function markNoticesRead(recipient: string): Query {
  return { text: `UPDATE qc.notices SET read_at = now() WHERE recipient = $1::text AND read_at IS NULL`, values: [recipient] };
}

/** Up to `limit` notices waiting for their mail, locked for this worker (others skip them). */
export function pendingMails(limit: number): Query {
  return {
    text: `
      SELECT n.id, n.recipient, n.feature_id AS "featureId", n.feature_name AS "featureName", n.action, n.reason,
             n.actor, n.actor_name AS "actorName", n.created_at AS "createdAt", u.email, u.name AS "recipientName"
      FROM qc.notices n LEFT JOIN users.users u ON u.id = n.recipient
      WHERE n.mail_status = 'pending'
      ORDER BY n.id
      LIMIT $1::int
      FOR UPDATE OF n SKIP LOCKED`,
    values: [limit],
  };
}

/** The mail outcomes of one round's notices, in one statement. */
export function recordMails(outcomes: readonly { id: string; status: 'sent' | 'skipped' | 'failed'; detail: string | null }[]): Query {
  return {
    text: `UPDATE qc.notices n SET mail_status = o.status, mail_detail = o.detail
           FROM unnest($1::bigint[], $2::text[], $3::text[]) AS o(id, status, detail) WHERE n.id = o.id`,
    values: [outcomes.map((o) => o.id), outcomes.map((o) => o.status), outcomes.map((o) => o.detail)],
  };
}

const COMMENT_JSON = `json_build_object('id', c.id, 'author', c.author, 'authorName', c.author_name, 'body', c.body, 'createdAt', c.created_at)`;

/** The thread of a feature's review, oldest first (at most `limit`, the newest ones). */
export function commentsOf(featureId: string, limit: number): Query {
  return {
    text: `
      SELECT coalesce(json_agg(${COMMENT_JSON} ORDER BY c.id), '[]'::json)::text AS "itemsJson"
      FROM (SELECT * FROM qc.comments WHERE feature_id = $1::text ORDER BY id DESC LIMIT $2::int) c`,
    values: [featureId, limit],
  };
}

/** Adds a comment to an existing feature's thread; no row when the feature does not exist. */
export function insertComment(featureId: string, author: string, authorName: string | null, body: string): Query {
  return {
    text: `
      INSERT INTO qc.comments (feature_id, author, author_name, body)
      SELECT f.id, $2::text, $3::text, $4::text FROM features.features f WHERE f.id = $1::text
      RETURNING ${COMMENT_JSON.replace(/c\./g, '')}::text AS json`,
    values: [featureId, author, authorName, body],
  };
}
