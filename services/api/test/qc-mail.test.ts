import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { startSmtpDouble, type SmtpDouble } from '../../shared/testing/smtp.js';
import { reviewsOf, startWorker, waitFor } from './qc-harness.js';

/**
 * The reviewer notice over real SMTP (an in-process smtp-server): queued with the submission, so a
 * mail server that is down does not fail the submit; the worker retries with backoff and the mail
 * arrives once the server is back — once.
 */
const { db, api } = useTestApi({ queue: true });
let smtp: SmtpDouble;
let worker: Awaited<ReturnType<typeof startWorker>>;

beforeAll(async () => {
  smtp = await startSmtpDouble();
  worker = await startWorker(db, { SMTP_URL: smtp.url, MAIL_FROM: 'QC <qc@example.org>', REVIEWER_EMAILS: 'qc-team@example.org, RITA@example.org', EXPORT_HTTP_TIMEOUT_MS: '2000' });
});
afterAll(async () => {
  await worker?.stop();
  await smtp?.stop();
});

describe('reviewer notice', () => {
  it('with the SMTP server down the submit still succeeds, and the mail arrives once the server is back', async () => {
    const contributor = await api.tokenFor('contributor', 'conny');
    const created = await api.request('POST', '/api/features', { token: contributor, body: aFeature({ properties: { name: 'Neuer Friedhof', kategorie: 'friedhof' } }) });
    const id = created.json.id as string;
    // Recipients: reviewers and admins with an address (users.users) plus REVIEWER_EMAILS, de-duplicated.
    await db.pool.query(
      `INSERT INTO users.users (id, email, name, role) VALUES
         ('mail-rita', 'rita@example.org', 'Rita', 'reviewer'), ('mail-adam', 'adam@example.org', 'Adam', 'admin'),
         ('mail-carl', 'carl@example.org', 'Carl', 'contributor'), ('mail-rolf', NULL, 'Rolf', 'reviewer')
       ON CONFLICT (id) DO UPDATE SET email = EXCLUDED.email, role = EXCLUDED.role`,
    );

    await smtp.stop();
    const submitted = await api.request('POST', '/api/qc/submit', { token: contributor, body: { featureId: id, comment: 'Bitte prüfen' } });
    expect(submitted.status).toBe(200);
    const failedAttempt = await waitFor('a failed delivery attempt', async () => {
      const job = (await reviewsOf(api, id)).jobs[0]!;
      return job.status === 'retrying' ? job : undefined;
    });
    expect(failedAttempt.attempts).toBe(1);
    expect(smtp.messages).toHaveLength(0);

    await smtp.start();
    const [mail] = await smtp.waitForMessages(1, 30_000);
    expect(mail!.envelope.to.map((a) => a.toLowerCase()).sort()).toEqual(['adam@example.org', 'qc-team@example.org', 'rita@example.org']);
    expect(mail!.envelope.from).toBe('qc@example.org');
    expect(mail!.subject).toContain('Neuer Friedhof');
    expect(mail!.text).toContain('Bitte prüfen');
    expect(mail!.text).toContain(id);

    const job = await waitFor('the job recorded as sent', async () => {
      const j = (await reviewsOf(api, id)).jobs[0]!;
      return j.status === 'sent' ? j : undefined;
    });
    expect(job.attempts).toBe(2);
    expect(job.result).toMatchObject({ channel: 'email' });
    await new Promise((r) => setTimeout(r, 500));
    expect(smtp.messages).toHaveLength(1);
  });
});
