import { mkdtempSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../src/app.js';
import { createAuthenticator } from '../src/auth/index.js';
import { loadOrCreateDevKeys } from '../src/auth/dev-keys.js';
import { serveApp } from '../src/http/server.js';
import { closeGracefully, listen } from '../../shared/http-server.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { sendRaw } from '../../../test/helpers/raw-http.js';
import { describeRequest, loadRecording, normalise, recordedAnswer } from '../../../test/fixtures/express-answers/recorded.js';

/**
 * GET /api/features/{id}, the API's hottest route, answers every kind of request exactly as the
 * Express app did before the move to Fastify: status, headers and body, byte for byte after the
 * normalisation of test/fixtures/express-answers/README.md. (A hand-written fast path used to answer
 * the plain reads in front of Express and was held to Express' answers; now one implementation is
 * held to the recorded ones.)
 */

const APP_ORIGIN = 'https://app.example.org';
const recording = loadRecording('feature-read');
let db: TestDatabase;
let dataDir: string;
let server: Server;
let base: string;
/** Secrets of this run, and the placeholders the recording shows for them. */
const tokens = { reader: '', forged: '' };
const placeholders = () => ({
  [tokens.reader]: '<token: fast-reader, contributor>',
  [tokens.forged]: '<forged token: fast-reader, signature ending AAAA>',
});

beforeAll(async () => {
  db = await createTestDatabase();
  dataDir = mkdtempSync(join(tmpdir(), 'hot-read-'));
  const authenticator = await createAuthenticator({ production: false, dataDir });
  tokens.reader = await (await loadOrCreateDevKeys(dataDir)).sign({ sub: 'fast-reader', role: 'contributor' });
  tokens.forged = `${tokens.reader.slice(0, -4)}AAAA`;
  await db.pool.query(
    `INSERT INTO features.features (id, name, kategorie, geom) VALUES
       ('fast-1', 'Erster', 'friedhof', ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326)),
       ('mit leer/zeichen', 'Zweiter', 'denkmal', ST_SetSRID(ST_MakePoint(13.5, 52.5), 4326)),
       ('Grüße', 'Dritter', 'blumenbeet', ST_SetSRID(ST_MakePoint(13.6, 52.5), 4326))`,
  );
  server = await serveApp(createApp({ db: db.pool, config: { rateLimit: { writesPerMinute: 0 }, cors: { origins: [APP_ORIGIN] } }, authenticator, logger: pino({ level: 'silent' }, pino.destination({ sync: true })) }));
  base = `http://127.0.0.1:${await listen(server, 0, '127.0.0.1')}`;
});

afterAll(async () => {
  if (server) await closeGracefully(server, 1_000);
  await db?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

const CASES: Array<{ name: string; method?: string; path: string; headers?: () => Record<string, string> }> = [
  { name: 'an anonymous read', path: '/api/features/fast-1' },
  { name: 'a read from an allowed origin', path: '/api/features/fast-1', headers: () => ({ origin: APP_ORIGIN }) },
  { name: 'a read from a foreign origin', path: '/api/features/fast-1', headers: () => ({ origin: 'https://evil.example.net' }) },
  { name: 'a read with a valid token', path: '/api/features/fast-1', headers: () => ({ authorization: `Bearer ${tokens.reader}` }) },
  { name: 'a read with a query string', path: '/api/features/fast-1?f=json' },
  { name: 'an id with %-escapes', path: `/api/features/${encodeURIComponent('mit leer/zeichen')}` },
  { name: 'an id with non-ASCII letters', path: `/api/features/${encodeURIComponent('Grüße')}` },
  { name: 'an unknown id', path: '/api/features/no-such-feature' },
  { name: 'a forged token', path: '/api/features/fast-1', headers: () => ({ authorization: `Bearer ${tokens.forged}` }) },
  { name: 'a malformed %-escape', path: '/api/features/%E0%A4%A' },
  { name: 'a conditional read of the current version', path: '/api/features/fast-1', headers: () => ({ 'if-none-match': '"1"' }) },
  { name: 'a HEAD request', method: 'HEAD', path: '/api/features/fast-1' },
  { name: 'a trailing slash', path: '/api/features/fast-1/' },
  { name: 'other letter case', path: '/API/Features/fast-1' },
  { name: 'the history', path: '/api/features/fast-1/history' },
  { name: 'an id of 256 characters', path: `/api/features/${'x'.repeat(256)}` },
  { name: 'a DELETE', method: 'DELETE', path: '/api/features/fast-1' },
];

/**
 * The one difference made on purpose: a malformed %-escape is still a 400 with the scope's headers,
 * but its detail now says what is wrong (Express said only "Bad Request"; http/problem.ts).
 */
function withIntendedChanges(name: string, answer: ReturnType<typeof recordedAnswer>): ReturnType<typeof recordedAnswer> {
  if (name !== 'a malformed %-escape') return answer;
  const body = answer.body.replace('"detail":"Bad Request"', '"detail":"the request URL is not valid (a malformed %-escape)"');
  return { ...answer, body, headers: { ...answer.headers, 'content-length': String(Buffer.byteLength(body)) } };
}

describe('the single-feature GET answers as the Express app did', () => {
  it('has a recorded Express answer for each case, and no recorded case goes unchecked', () => {
    expect(CASES.map((c) => c.name)).toEqual(Object.keys(recording.cases));
  });

  for (const c of CASES) {
    it(`answers ${c.name} as Express did`, async () => {
      const sent = { method: c.method ?? 'GET', path: c.path, headers: c.headers?.() ?? {} };
      expect(describeRequest(sent, placeholders()), 'the request the answer was recorded for').toEqual(recording.cases[c.name]?.request);
      expect(normalise(await sendRaw(base, sent))).toEqual(withIntendedChanges(c.name, recordedAnswer(recording, c.name, db.kind)));
    });
  }

  it('sends the CORS and security headers of the /api routes on a plain read', async () => {
    const answer = await sendRaw(base, { path: '/api/features/fast-1', headers: { origin: APP_ORIGIN } });
    expect(answer.status).toBe(200);
    expect(answer.headers).toMatchObject({
      'x-content-type-options': 'nosniff',
      vary: 'Origin',
      'access-control-allow-origin': APP_ORIGIN,
      'access-control-allow-credentials': 'true',
      etag: '"1"',
      'cache-control': 'no-cache',
      'content-type': 'application/geo+json; charset=utf-8',
    });
    expect(JSON.parse(answer.body)).toMatchObject({ type: 'Feature', id: 'fast-1', properties: { name: 'Erster' } });
  });

  it('refuses a malformed %-escape from an allowed origin with the scope\'s CORS headers, and answers its preflight as any other', async () => {
    const refused = await sendRaw(base, { path: '/api/features/%E0%A4%A', headers: { origin: APP_ORIGIN } });
    expect(refused.status).toBe(400);
    expect(refused.headers).toMatchObject({ 'x-content-type-options': 'nosniff', vary: 'Origin', 'access-control-allow-origin': APP_ORIGIN, 'content-type': 'application/problem+json; charset=utf-8' });
    expect(JSON.parse(refused.body)).toMatchObject({ status: 400, detail: 'the request URL is not valid (a malformed %-escape)' });

    const preflight = await sendRaw(base, { method: 'OPTIONS', path: '/api/features/%E0%A4%A', headers: { origin: APP_ORIGIN, 'access-control-request-method': 'GET' } });
    expect(preflight.status).toBe(204);
    expect(preflight.headers).toMatchObject({ 'access-control-allow-origin': APP_ORIGIN, 'access-control-allow-methods': expect.stringContaining('GET') });
    const foreign = await sendRaw(base, { method: 'OPTIONS', path: '/api/features/%E0%A4%A', headers: { origin: 'https://evil.example.net', 'access-control-request-method': 'GET' } });
    expect(foreign.status).toBe(400);
    expect(foreign.headers['access-control-allow-origin']).toBeUndefined();
  });
});
