import type { ExportsSettings } from '../exports/config.js';
import { MailRejectedError, type DeliveryOutcome, type Mailer } from './mailer.js';

/** What phase 2 knows at submit time; recipients come from the users table (reviewers and admins with an address). */
export interface ReviewerNoticeInput {
  feature: { id: string; name: string; kategorie: string; version: number };
  submitter: { name: string; email?: string | null };
  comment?: string | null;
  submittedAt: Date;
  reviewerEmails: string[];
  /** Identifies this submission; part of the Message-ID so a re-sent notice is recognisable as the same. */
  submissionId: string;
}

export interface ReviewerNotifierDeps {
  settings: Pick<ExportsSettings, 'reviewers'>;
  /** null when SMTP_URL is not set. */
  mailer: Mailer | null;
}

/** The mail a reviewer gets when a feature is submitted for QC: feature, submitter, comment and a link. */
export function composeReviewerNotice(input: ReviewerNoticeInput, reviewLink: string): { subject: string; text: string } {
  const { feature, submitter } = input;
  const link = reviewLink.replace('{featureId}', encodeURIComponent(feature.id));
  const comment = input.comment?.trim() ? input.comment.trim() : '(no comment)';
  const by = submitter.email ? `${submitter.name} <${submitter.email}>` : submitter.name;
  return {
    subject: `QC review requested: "${feature.name}" (${feature.kategorie}, version ${feature.version})`,
    text: [
      `${by} submitted "${feature.name}" (${feature.kategorie}, version ${feature.version}) for review on ${input.submittedAt.toISOString()}.`,
      '',
      'Comment:',
      comment,
      '',
      `Review it here: ${link}`,
      `Feature id: ${feature.id}`,
    ].join('\n'),
  };
}

/** Case-insensitive de-duplication that keeps the first spelling and order. */
function uniqueAddresses(addresses: string[]): string[] {
  const seen = new Map<string, string>();
  for (const raw of addresses) {
    const address = raw.trim();
    if (address && !seen.has(address.toLowerCase())) seen.set(address.toLowerCase(), address);
  }
  return [...seen.values()];
}

export class ReviewerNotifier {
  constructor(private readonly deps: ReviewerNotifierDeps) {}

  /** Throws RetryableExportError when the SMTP server is unreachable, so the job is retried. */
  async notify(input: ReviewerNoticeInput): Promise<DeliveryOutcome> {
    if (!this.deps.mailer) return { status: 'skipped', reason: 'SMTP_URL is not set' };
    const recipients = uniqueAddresses([...input.reviewerEmails, ...this.deps.settings.reviewers.emails]);
    if (recipients.length === 0) return { status: 'skipped', reason: 'no reviewer has an e-mail address and REVIEWER_EMAILS is empty' };
    const { subject, text } = composeReviewerNotice(input, this.deps.settings.reviewers.reviewLink);
    try {
      const id = await this.deps.mailer.send({ to: recipients, subject, text, messageId: `<qc-submit.${input.submissionId.replace(/[^\w.-]/g, '')}@feature-platform>` });
      return { status: 'sent', channel: 'email', recipients, id };
    } catch (error) {
      if (error instanceof MailRejectedError) return { status: 'failed', reason: error.message };
      throw error;
    }
  }
}
