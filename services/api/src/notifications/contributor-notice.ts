import type { Logger } from 'pino';
import { query, withTransaction, type Db } from '../db/pool.js';
import * as sql from '../qc/notices-queries.js';
import { MailRejectedError, type Mailer } from './mailer.js';

/**
 * The contributor's e-mail about a decision on their submission (qc.notices, migration 022): sent by
 * the QC worker, which takes pending notices every poll interval. A notice without SMTP or without the
 * contributor's address is recorded as skipped (it is still shown in the app, /qc/mine); a refused
 * mail as failed; an unreachable server leaves it pending for the next round.
 */
export interface ContributorNotice {
  id: string;
  featureId: string;
  featureName: string;
  action: 'approve' | 'reject';
  reason: string | null;
  actor: string;
  actorName: string | null;
  createdAt: Date;
  email: string | null;
  recipientName: string | null;
}

const BATCH = 20;

export function composeContributorNotice(notice: ContributorNotice, reviewLink: string): { subject: string; text: string } {
  const decided = notice.action === 'approve' ? 'approved' : 'rejected';
  const by = notice.actorName ?? notice.actor;
  const link = reviewLink.replace('{featureId}', encodeURIComponent(notice.featureId));
  return {
    subject: `"${notice.featureName}" was ${decided}`,
    text: [
      `${by} ${decided} "${notice.featureName}" on ${new Date(notice.createdAt).toISOString()}.`,
      '',
      notice.action === 'reject' ? 'Reason:' : 'Comment:',
      notice.reason?.trim() ? notice.reason.trim() : '(none given)',
      '',
      `The review and its comments: ${link}`,
      `Feature id: ${notice.featureId}`,
    ].join('\n'),
  };
}

/** One round: mails up to BATCH pending notices and records their outcomes in one statement; returns how many it settled. */
export async function deliverNotices(db: Db, mailer: Mailer | null, reviewLink: string, logger?: Logger): Promise<number> {
  return withTransaction(db, async (client) => {
    const { rows } = await query(client, sql.pendingMails(BATCH));
    const settled: { id: string; status: 'sent' | 'skipped' | 'failed'; detail: string | null }[] = [];
    for (const notice of rows as ContributorNotice[]) {
      let outcome: { status: 'sent' | 'skipped' | 'failed'; detail: string | null };
      if (!mailer) outcome = { status: 'skipped', detail: 'SMTP_URL is not set' };
      else if (!notice.email) outcome = { status: 'skipped', detail: 'the contributor has no e-mail address' };
      else {
        const { subject, text } = composeContributorNotice(notice, reviewLink);
        try {
          const id = await mailer.send({ to: [notice.email], subject, text, messageId: `<qc-notice.${notice.id}@feature-platform>` });
          outcome = { status: 'sent', detail: id };
        } catch (error) {
          if (!(error instanceof MailRejectedError)) {
            // Unreachable: stays pending, the next round tries again.
            logger?.warn({ err: error, notice: notice.id }, 'contributor notice not sent; retried next round');
            continue;
          }
          outcome = { status: 'failed', detail: error.message };
        }
      }
      settled.push({ id: notice.id, ...outcome });
    }
    if (settled.length > 0) await query(client, sql.recordMails(settled));
    return settled.length;
  });
}

/** Delivers notices every `intervalMs` until stopped: rounds one after the other while each finds a full batch. */
export function startNoticeMailer(db: Db, mailer: Mailer | null, options: { intervalMs: number; reviewLink: string; logger: Logger }): { stop(): Promise<void> } {
  let running: Promise<unknown> = Promise.resolve();
  let stopped = false;
  const rounds = async () => {
    while (!stopped && (await deliverNotices(db, mailer, options.reviewLink, options.logger)) === BATCH);
  };
  const timer = setInterval(() => {
    running = running.then(rounds).catch((error: unknown) => options.logger.warn({ err: error }, 'contributor notices: a round failed'));
  }, options.intervalMs);
  timer.unref();
  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
