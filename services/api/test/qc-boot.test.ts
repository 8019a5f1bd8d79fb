import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { startTestIssuer, type TestIssuer } from '../../../test/helpers/test-issuer.js';
import { startSmtpDouble, type SmtpDouble } from '../../shared/testing/smtp.js';
import { startApi, type RunningApi } from '../src/boot.js';
import { loadApiConfig } from '../src/config.js';

/**
 * The API as it boots for `npm run api`: it installs graphile-worker's schema and runs the QC worker
 * in its own process by default, so a submit's reviewer notice is delivered with nothing else running;
 * closing the API stops the worker. WORKER_ENABLED=false leaves the jobs for `npm run worker`.
 */
let db: TestDatabase;
let issuer: TestIssuer;
let smtp: SmtpDouble;
const dataDir = mkdtempSync(join(tmpdir(), 'qc-boot-'));

beforeAll(async () => {
  db = await createTestDatabase();
  issuer = await startTestIssuer();
  smtp = await startSmtpDouble();
});
afterAll(async () => {
  await smtp?.stop();
  await issuer?.close();
  await db?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

function boot(extra: Record<string, string>): Promise<RunningApi> {
  const config = loadApiConfig({
    DATABASE_URL: db.url,
    PORT: '0',
    DATA_DIR: dataDir,
    AUTH_ISSUER: issuer.issuer,
    AUTH_JWKS_URL: issuer.jwksUrl,
    SMTP_URL: smtp.url,
    REVIEWER_EMAILS: 'reviewers@example.org',
    WORKER_POLL_INTERVAL_MS: '100',
    ...extra,
  });
  return startApi(config, pino({ level: 'silent' }, pino.destination({ sync: true })));
}

async function createAndSubmit(api: RunningApi): Promise<string> {
  const token = await issuer.sign({ sub: 'conny', role: 'contributor' });
  const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
  const base = `http://127.0.0.1:${api.port}`;
  const created = await fetch(`${base}/api/features`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ type: 'Feature', geometry: { type: 'Point', coordinates: [13.4, 52.5] }, properties: { name: 'Boot Friedhof', kategorie: 'friedhof' } }),
  });
  expect(created.status).toBe(201);
  const id = ((await created.json()) as { id: string }).id;
  const submitted = await fetch(`${base}/api/qc/submit`, { method: 'POST', headers, body: JSON.stringify({ featureId: id }) });
  expect(submitted.status).toBe(200);
  return id;
}

describe('the API process and its worker', () => {
  it('runs the QC worker in-process by default: the reviewer notice of a submit is delivered', async () => {
    const api = await boot({});
    try {
      await createAndSubmit(api);
      const [mail] = await smtp.waitForMessages(1, 20_000);
      expect(mail!.envelope.to).toEqual(['reviewers@example.org']);
      expect(mail!.subject).toContain('Boot Friedhof');
    } finally {
      await api.close();
    }
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM qc.worker_processes');
    expect(rows[0].n).toBe(0); // unregistered on close
  });

  it('with WORKER_ENABLED=false the job stays queued for a separate worker', async () => {
    const api = await boot({ WORKER_ENABLED: 'false' });
    try {
      const before = smtp.messages.length;
      const id = await createAndSubmit(api);
      await new Promise((r) => setTimeout(r, 1_000));
      expect(smtp.messages.length).toBe(before);
      const { rows } = await db.pool.query(`SELECT status FROM qc.jobs WHERE feature_id = $1`, [id]);
      expect(rows).toEqual([{ status: 'queued' }]);
    } finally {
      await api.close();
    }
  });

  it('refuses bad QC configuration by naming the variable', () => {
    expect(() => loadApiConfig({ WORKER_CONCURRENCY: '0' })).toThrow(/WORKER_CONCURRENCY/);
    expect(() => loadApiConfig({ WORKER_ENABLED: 'yes' })).toThrow(/WORKER_ENABLED/);
    expect(() => loadApiConfig({ QC_JOB_MAX_ATTEMPTS: '-1' })).toThrow(/QC_JOB_MAX_ATTEMPTS/);
    expect(() => loadApiConfig({ AGENCY_WEBHOOK_URL: 'https://agency.example.org/hook' })).toThrow(/AGENCY_WEBHOOK_SECRET/);
    expect(() => loadApiConfig({ SMTP_URL: 'http://mail' })).toThrow(/SMTP_URL/);
    const defaults = loadApiConfig({});
    expect(defaults.worker).toEqual({ enabled: true, concurrency: 2, pollIntervalMs: 2000, heartbeatMs: 10000 });
    expect(defaults.qc.maxAttempts).toBe(12);
    expect(defaults.exports.osm.apiUrl).toBe('https://master.apis.dev.openstreetmap.org');
  });
});
