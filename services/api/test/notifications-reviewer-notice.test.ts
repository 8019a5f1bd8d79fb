import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSmtpDouble, type SmtpDouble } from '../../shared/testing/smtp.js';
import { RetryableExportError } from '../src/exports/errors.js';
import { createSmtpMailer } from '../src/notifications/mailer.js';
import { ReviewerNotifier, type ReviewerNoticeInput } from '../src/notifications/reviewer-notice.js';

let smtp: SmtpDouble;
beforeAll(async () => {
  smtp = await startSmtpDouble({ rejectRecipients: ['gone@example.org'] });
});
afterAll(() => smtp.stop());

const LINK = 'https://maps.example.org/qc/{featureId}';

function notifier(options: { smtpUrl?: string; configured?: string[] } = {}): ReviewerNotifier {
  const mailer = createSmtpMailer({ smtpUrl: 'smtpUrl' in options ? options.smtpUrl : smtp.url, from: 'QC <qc@example.org>' }, 2000);
  return new ReviewerNotifier({ settings: { reviewers: { emails: options.configured ?? ['lead@example.org'], reviewLink: LINK } }, mailer });
}

const input = (extra: Partial<ReviewerNoticeInput> = {}): ReviewerNoticeInput => ({
  feature: { id: '6f1c2a4e-0000-4000-8000-000000000001', name: 'Alter Friedhof Süd', kategorie: 'friedhof', version: 3 },
  submitter: { name: 'Erika Mustermann', email: 'erika@example.org' },
  comment: 'Grenze nach Ortsbegehung korrigiert.\nBitte prüfen.',
  submittedAt: new Date('2026-05-04T10:30:00Z'),
  reviewerEmails: ['rev1@example.org', 'LEAD@example.org'],
  submissionId: 'sub-1',
  ...extra,
});

describe('reviewer notice over real SMTP', () => {
  it('reaches every reviewer once and names feature, submitter, comment and link', async () => {
    const before = smtp.messages.length;
    const outcome = await notifier().notify(input());
    expect(outcome).toMatchObject({ status: 'sent', channel: 'email', recipients: ['rev1@example.org', 'LEAD@example.org'] });

    const [mail] = (await smtp.waitForMessages(before + 1)).slice(before);
    expect(mail!.envelope).toEqual({ from: 'qc@example.org', to: ['rev1@example.org', 'LEAD@example.org'] });
    expect(mail!.subject).toBe('QC review requested: "Alter Friedhof Süd" (friedhof, version 3)');
    expect(mail!.headers['message-id']).toBe('<qc-submit.sub-1@feature-platform>');
    expect(mail!.text).toContain('Erika Mustermann <erika@example.org> submitted "Alter Friedhof Süd" (friedhof, version 3) for review on 2026-05-04T10:30:00.000Z.');
    expect(mail!.text).toContain('Grenze nach Ortsbegehung korrigiert.\nBitte prüfen.');
    expect(mail!.text).toContain('Review it here: https://maps.example.org/qc/6f1c2a4e-0000-4000-8000-000000000001');
  });

  it('a line break in the feature name cannot inject a header', async () => {
    const before = smtp.messages.length;
    await notifier().notify(input({ feature: { ...input().feature, name: 'X\r\nBcc: victim@example.org' }, submissionId: 'sub-2' }));
    const [mail] = (await smtp.waitForMessages(before + 1)).slice(before);
    expect(mail!.headers.bcc).toBeUndefined();
    expect(mail!.envelope.to).not.toContain('victim@example.org');
  });

  it('with the SMTP server down the notice is retryable, and it arrives once the server is back', async () => {
    const before = smtp.messages.length;
    await smtp.stop();
    await expect(notifier().notify(input({ submissionId: 'sub-3' }))).rejects.toBeInstanceOf(RetryableExportError);
    await smtp.start(); // same port
    expect(await notifier().notify(input({ submissionId: 'sub-3' }))).toMatchObject({ status: 'sent' });
    const arrived = (await smtp.waitForMessages(before + 1)).slice(before);
    expect(arrived).toHaveLength(1);
    expect(arrived[0]!.headers['message-id']).toBe('<qc-submit.sub-3@feature-platform>');
  });

  it('a permanent rejection (550) is recorded as failed, not retried', async () => {
    const outcome = await notifier({ configured: [] }).notify(input({ reviewerEmails: ['gone@example.org'] }));
    expect(outcome.status).toBe('failed');
    expect(outcome.status === 'failed' && outcome.reason).toContain('550');
  });

  it('is skipped without SMTP_URL, and without any recipient', async () => {
    expect(await notifier({ smtpUrl: undefined }).notify(input())).toEqual({ status: 'skipped', reason: 'SMTP_URL is not set' });
    expect(await notifier({ configured: [] }).notify(input({ reviewerEmails: [] }))).toEqual({ status: 'skipped', reason: 'no reviewer has an e-mail address and REVIEWER_EMAILS is empty' });
  });
});
