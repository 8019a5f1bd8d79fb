import { createHmac } from 'node:crypto';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeGracefully, listen } from '../../shared/http-server.js';
import { startSmtpDouble, type SmtpDouble } from '../../shared/testing/smtp.js';
import { createSmtpMailer } from '../src/notifications/mailer.js';
import { RetryableExportError } from '../src/exports/errors.js';
import type { FeatureSnapshot } from '../src/exports/types.js';
import { computeAgencyChangeset, type AgencyChangeset } from '../src/exports/agency/changeset.js';
import { AgencyNotifier } from '../src/exports/agency/notifier.js';
import { verifyAgencySignature } from '../src/exports/agency/signature.js';

const SECRET = 'agency-secret-0123456789abcdef0123456789';
const NOW = new Date('2026-06-01T12:00:00Z');

const v1: FeatureSnapshot = {
  id: '7a0e0000-0000-4000-8000-000000000001',
  version: 1,
  name: 'Kriegerdenkmal',
  kategorie: 'denkmal',
  adresse: 'Marktplatz 1, 01067 Dresden',
  telefon: null,
  geometry: { type: 'Point', coordinates: [13.7373, 51.0504] },
};

describe('the approval changeset', () => {
  it('a first approval lists every field that has a value and counts the geometry as changed', () => {
    const changeset = computeAgencyChangeset(null, v1, { reviewer: { id: 'rev-1', name: 'Rita Reviewer' }, approvedAt: NOW });
    expect(changeset).toMatchObject({ kind: 'created', previousVersion: null, geometryChanged: true, deliveryId: `${v1.id}:v1`, approvedAt: '2026-06-01T12:00:00.000Z', reviewer: { id: 'rev-1', name: 'Rita Reviewer' } });
    expect(changeset.changes).toEqual([
      { field: 'name', before: null, after: 'Kriegerdenkmal' },
      { field: 'kategorie', before: null, after: 'denkmal' },
      { field: 'adresse', before: null, after: 'Marktplatz 1, 01067 Dresden' },
    ]);
  });

  it('a re-approval lists only changed fields with before and after', () => {
    const v4 = { ...v1, version: 4, telefon: '0351 123', adresse: null };
    const changeset = computeAgencyChangeset(v1, v4, { reviewer: { id: 'rev-2' }, approvedAt: NOW });
    expect(changeset.kind).toBe('updated');
    expect(changeset.previousVersion).toBe(1);
    expect(changeset.changes).toEqual([
      { field: 'adresse', before: 'Marktplatz 1, 01067 Dresden', after: null },
      { field: 'telefon', before: null, after: '0351 123' },
    ]);
    expect(changeset.geometryChanged).toBe(false);
  });

  it('float noise below OSM precision is no geometry change; a real move is', () => {
    const noisy = { ...v1, version: 2, geometry: { type: 'Point' as const, coordinates: [13.73730000001, 51.0504] as [number, number] } };
    expect(computeAgencyChangeset(v1, noisy, { reviewer: { id: 'r' }, approvedAt: NOW }).geometryChanged).toBe(false);
    const moved = { ...v1, version: 2, geometry: { type: 'Point' as const, coordinates: [13.7374, 51.0504] as [number, number] } };
    expect(computeAgencyChangeset(v1, moved, { reviewer: { id: 'r' }, approvedAt: NOW }).geometryChanged).toBe(true);
  });
});

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
}

describe('the signed webhook', () => {
  const received: Received[] = [];
  let status = 204;
  let url = '';
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.writeHead(status).end();
    });
  });
  beforeAll(async () => {
    url = `http://127.0.0.1:${await listen(server, 0, '127.0.0.1')}/hooks/features`;
  });
  afterAll(() => closeGracefully(server, 500));

  const notifier = () =>
    new AgencyNotifier({
      settings: { agency: { webhookUrl: url, webhookSecret: SECRET, email: undefined }, userAgent: 'fmp-tests/1', httpTimeoutMs: 2000 },
      mailer: null,
      clock: () => NOW,
    });
  const changeset = computeAgencyChangeset(null, v1, { reviewer: { id: 'rev-1', name: 'Rita' }, approvedAt: NOW });

  it('POSTs the changeset as JSON with a signature the receiver can verify', async () => {
    status = 204;
    const outcome = await notifier().notify(changeset);
    expect(outcome).toMatchObject({ status: 'sent', channel: 'webhook', id: changeset.deliveryId });
    const request = received.at(-1)!;
    expect(request.headers['content-type']).toBe('application/json');
    expect(request.headers['x-agency-delivery']).toBe(`${v1.id}:v1`);
    expect(request.headers['x-agency-timestamp']).toBe(String(NOW.getTime() / 1000));
    expect(JSON.parse(request.body) as AgencyChangeset).toEqual(changeset);

    // What the documentation tells a receiver to do, computed independently of the sender's code:
    const expected = 'sha256=' + createHmac('sha256', SECRET).update(`${request.headers['x-agency-timestamp'] as string}.${request.body}`).digest('hex');
    expect(request.headers['x-agency-signature']).toBe(expected);
    const verify = (body: string, now = NOW, secret = SECRET) =>
      verifyAgencySignature({ secret, body, timestamp: request.headers['x-agency-timestamp'] as string, signature: request.headers['x-agency-signature'] as string, now });
    expect(verify(request.body)).toBe(true);
    expect(verify(request.body.replace('Kriegerdenkmal', 'Kriegerdenkmai'))).toBe(false);
    expect(verify(request.body, NOW, 'another-secret-another-secret-another')).toBe(false);
    expect(verify(request.body, new Date(NOW.getTime() + 301_000))).toBe(false);
  });

  it('a 5xx answer is retryable, a 4xx answer a recorded failure', async () => {
    status = 503;
    await expect(notifier().notify(changeset)).rejects.toBeInstanceOf(RetryableExportError);
    status = 400;
    expect(await notifier().notify(changeset)).toEqual({ status: 'failed', reason: 'agency webhook answered 400' });
    status = 204;
  });

  it('an unreachable receiver is retryable', async () => {
    const unreachable = new AgencyNotifier({ settings: { agency: { webhookUrl: 'http://127.0.0.1:1/x', webhookSecret: SECRET, email: undefined }, userAgent: 'fmp-tests/1', httpTimeoutMs: 2000 }, mailer: null });
    await expect(unreachable.notify(changeset)).rejects.toBeInstanceOf(RetryableExportError);
  });
});

describe('the e-mail alternative', () => {
  let smtp: SmtpDouble;
  beforeAll(async () => {
    smtp = await startSmtpDouble();
  });
  afterAll(() => smtp.stop());

  it('mails a summary with the changeset attached as JSON', async () => {
    const mailer = createSmtpMailer({ smtpUrl: smtp.url, from: 'QC <qc@example.org>' }, 2000);
    const notifier = new AgencyNotifier({ settings: { agency: { webhookUrl: undefined, webhookSecret: undefined, email: ['gis@agency.example'] }, userAgent: 'fmp-tests/1', httpTimeoutMs: 2000 }, mailer });
    const v2 = { ...v1, version: 2, name: 'Ehrenmal' };
    const changeset = computeAgencyChangeset(v1, v2, { reviewer: { id: 'rev-1', name: 'Rita' }, approvedAt: NOW });
    expect(await notifier.notify(changeset)).toMatchObject({ status: 'sent', channel: 'email', recipients: ['gis@agency.example'] });
    const [mail] = await smtp.waitForMessages(1);
    expect(mail!.envelope.to).toEqual(['gis@agency.example']);
    expect(mail!.subject).toBe('Feature approved: "Ehrenmal" (version 2)');
    expect(mail!.text).toContain('- name: Kriegerdenkmal → Ehrenmal');
    expect(mail!.text).toContain('Geometry changed: no');
    expect(mail!.attachments).toHaveLength(1);
    expect(JSON.parse(mail!.attachments[0]!.content) as AgencyChangeset).toEqual(changeset);
  });

  it('is skipped when nothing is configured', async () => {
    const notifier = new AgencyNotifier({ settings: { agency: { webhookUrl: undefined, webhookSecret: undefined, email: undefined }, userAgent: 'x-agent/1', httpTimeoutMs: 2000 }, mailer: null });
    expect(await notifier.notify(computeAgencyChangeset(null, v1, { reviewer: { id: 'r' }, approvedAt: NOW }))).toEqual({ status: 'skipped', reason: 'neither AGENCY_WEBHOOK_URL nor AGENCY_EMAIL is set' });
  });
});
