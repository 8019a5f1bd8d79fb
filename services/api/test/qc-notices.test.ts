import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi } from '../../../test/helpers/api.js';
import { startSmtpDouble, type SmtpDouble } from '../../shared/testing/smtp.js';
import { startWorker, waitFor } from './qc-harness.js';

/**
 * A contributor's notices about decisions on their submissions (in the app and by e-mail through the
 * QC worker), and the comment thread of a QC item, over HTTP with a real worker and SMTP server.
 */
const { db, api } = useTestApi({ queue: true });
let smtp: SmtpDouble;
let worker: Awaited<ReturnType<typeof startWorker>>;
const tokens: Record<string, string> = {};

beforeAll(async () => {
  smtp = await startSmtpDouble();
  worker = await startWorker(db, { SMTP_URL: smtp.url, MAIL_FROM: 'QC <qc@example.org>', QC_REVIEW_LINK: 'https://map.example.org/qc/{featureId}' });
  for (const [role, sub] of [['contributor', 'nora'], ['contributor', 'otto'], ['reviewer', 'rita'], ['guest', 'gast']] as const) tokens[sub] = await api.tokenFor(role, sub);
  await db.pool.query(`INSERT INTO users.users (id, email, name, role) VALUES ('nora', 'nora@example.org', 'Nora', 'contributor') ON CONFLICT (id) DO UPDATE SET email = EXCLUDED.email`);
});
afterAll(async () => {
  await worker?.stop();
  await smtp?.stop();
});

async function submitted(owner: string, name: string): Promise<string> {
  const created = await api.request('POST', '/api/features', { token: tokens[owner], body: aFeature({ properties: { name, kategorie: 'denkmal' } }) });
  expect(created.status).toBe(201);
  const id = created.json.id as string;
  expect((await api.request('POST', '/api/qc/submit', { token: tokens[owner], body: { featureId: id } })).status).toBe(200);
  return id;
}

describe('notices to contributors', () => {
  it('a rejection gives the submitter a notice with the reason, in the app and by e-mail; nobody else gets it', async () => {
    const id = await submitted('nora', 'Gedenkstein am Teich');
    const rejected = await api.request('POST', `/api/qc/reject/${id}`, { token: tokens.rita, body: { reason: 'Die Lage stimmt nicht: der Stein steht am Südufer.' } });
    expect(rejected.status).toBe(200);

    const mine = await api.request('GET', '/api/qc/notices', { token: tokens.nora });
    expect(mine.status).toBe(200);
    expect(mine.json.unread).toBe(1);
    expect(mine.json.items[0]).toMatchObject({ featureId: id, featureName: 'Gedenkstein am Teich', action: 'reject', reason: 'Die Lage stimmt nicht: der Stein steht am Südufer.', actor: 'rita', readAt: null });
    expect((await api.request('GET', '/api/qc/notices', { token: tokens.otto })).json.items).toEqual([]);

    const mails = await smtp.waitForMessages(1, 20_000);
    const mail = mails.find((m) => m.subject?.includes('Gedenkstein am Teich'))!;
    expect(mail.envelope.to).toEqual(['nora@example.org']);
    expect(mail.subject).toBe('"Gedenkstein am Teich" was rejected');
    expect(mail.text).toContain('Die Lage stimmt nicht: der Stein steht am Südufer.');
    expect(mail.text).toContain(`https://map.example.org/qc/${encodeURIComponent(id)}`);
    await waitFor('the notice recorded as mailed', async () => (await db.pool.query(`SELECT 1 FROM qc.notices WHERE feature_id = $1 AND mail_status = 'sent'`, [id])).rowCount === 1);

    expect((await api.request('POST', '/api/qc/notices/read', { token: tokens.nora })).status).toBe(204);
    expect((await api.request('GET', '/api/qc/notices', { token: tokens.nora })).json.unread).toBe(0);
  });

  it('an approval gives a notice too; one without an address is shown in the app and its mail recorded as skipped', async () => {
    const id = await submitted('otto', 'Brunnen am Markt');
    expect((await api.request('POST', `/api/qc/approve/${id}`, { token: tokens.rita, body: { comment: 'Sauber erfasst.' } })).status).toBe(200);
    const mine = await api.request('GET', '/api/qc/notices', { token: tokens.otto });
    expect(mine.json.items[0]).toMatchObject({ featureId: id, action: 'approve', reason: 'Sauber erfasst.' });
    const notice = await waitFor('the mail recorded', async () => (await db.pool.query<{ mail_status: string; mail_detail: string }>(`SELECT mail_status, mail_detail FROM qc.notices WHERE feature_id = $1 AND mail_status <> 'pending'`, [id])).rows[0]);
    expect(notice).toEqual({ mail_status: 'skipped', mail_detail: 'the contributor has no e-mail address' });
  });

  it('a guest has no notices (403) and an anonymous caller must sign in (401)', async () => {
    expect((await api.request('GET', '/api/qc/notices', { token: tokens.gast })).status).toBe(403);
    expect((await api.request('GET', '/api/qc/notices')).status).toBe(401);
  });
});

describe('the comment thread of a QC item', () => {
  it('contributors and reviewers add comments and read them oldest first; guests may not; bad input is a clear 4xx', async () => {
    const id = await submitted('nora', 'Beet mit Fragen');
    const path = `/api/qc/items/${encodeURIComponent(id)}/comments`;
    const first = await api.request('POST', path, { token: tokens.rita, body: { body: 'Ist das Beet noch da?' } });
    expect(first.status).toBe(201);
    expect(first.json).toMatchObject({ author: 'rita', body: 'Ist das Beet noch da?' });
    expect((await api.request('POST', path, { token: tokens.nora, body: { body: '  Ja, seit April neu bepflanzt.  ' } })).status).toBe(201);
    const thread = await api.request('GET', path, { token: tokens.nora });
    expect(thread.json.items.map((c: { author: string; body: string }) => `${c.author}: ${c.body}`)).toEqual(['rita: Ist das Beet noch da?', 'nora: Ja, seit April neu bepflanzt.']);

    expect((await api.request('GET', path, { token: tokens.gast })).status).toBe(403);
    expect((await api.request('POST', path, { token: tokens.gast, body: { body: 'Hallo' } })).status).toBe(403);
    expect((await api.request('POST', path, { token: tokens.nora, body: { body: '   ' } })).status).toBe(400);
    expect((await api.request('POST', path, { token: tokens.nora, body: { body: 'x'.repeat(2001) } })).status).toBe(400);
    expect((await api.request('POST', path, { token: tokens.nora, body: { text: 'falsch' } })).status).toBe(400);
    expect((await api.request('POST', '/api/qc/items/gibt-es-nicht/comments', { token: tokens.nora, body: { body: 'Hallo' } })).status).toBe(404);
  });
});
