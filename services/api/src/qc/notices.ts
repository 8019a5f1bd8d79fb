import { z } from 'zod';
import { AppError } from '../../../shared/errors.js';
import { storableText } from '../../../shared/features/schema.js';
import type { Principal } from '../../../shared/principal.js';
import { query, type Db, type Queryable } from '../db/pool.js';
import * as sql from './notices-queries.js';

/**
 * Notices to contributors (a decision on their submission, with the reason) and the comment thread of
 * each QC item. Notices are written by the decision itself (qc/service.ts calls noticeOfDecision in its
 * transaction); the QC worker mails them (notifications/contributor-notice.ts).
 */
export const COMMENT_MAX = 2000;
export const CommentBodySchema = z.strictObject({
  body: storableText()
    .refine((s) => s.trim().length > 0, 'must not be empty')
    .refine((s) => [...s].length <= COMMENT_MAX, `must be at most ${COMMENT_MAX} characters`)
    .meta({ description: `the comment, 1 to ${COMMENT_MAX} characters`, example: 'Die Grenze im Norden stimmt nicht mit dem Zaun überein.' }),
});

const NOTICES_LIMIT = 100;
const COMMENTS_LIMIT = 500;

/** Inside a decision's transaction: the notice for the feature's submitter. */
export async function noticeOfDecision(client: Queryable, notice: Parameters<typeof sql.insertNotice>[0]): Promise<void> {
  await query(client, sql.insertNotice(notice));
}

export function createNoticeService(db: Db) {
  return {
    /** The caller's notices, newest first, and the unread count. */
    async mine(principal: Principal): Promise<string> {
      const id = signedIn(principal);
      const { rows } = await query(db, sql.noticesOf(id, NOTICES_LIMIT));
      const row = rows[0] as { itemsJson: string; unread: number };
      return `{"items":${row.itemsJson},"unread":${row.unread}}`;
    },

    async markRead(principal: Principal): Promise<void> {
      await query(db, sql.markNoticesRead(signedIn(principal)));
    },

    async comments(featureId: string): Promise<string> {
      const { rows } = await query(db, sql.commentsOf(featureId, COMMENTS_LIMIT));
      return `{"items":${(rows[0] as { itemsJson: string }).itemsJson}}`;
    },

    async addComment(principal: Principal, featureId: string, body: string): Promise<string> {
      const { rows } = await query(db, sql.insertComment(featureId, signedIn(principal), principal.name ?? null, body.trim()));
      const row = rows[0] as { json: string } | undefined;
      if (!row) throw new AppError('FEATURE_NOT_FOUND', `no feature with id ${featureId}`);
      return row.json;
    },
  };
}

export type NoticeService = ReturnType<typeof createNoticeService>;

function signedIn(principal: Principal): string {
  if (principal.id === null) throw new AppError('UNAUTHENTICATED', 'authentication required');
  return principal.id;
}

