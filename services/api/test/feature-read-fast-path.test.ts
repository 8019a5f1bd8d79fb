import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../src/app.js';
import { createAuthenticator } from '../src/auth/index.js';
import { loadOrCreateDevKeys } from '../src/auth/dev-keys.js';
import { featureReadFastPath } from '../src/features/read-fast-path.js';
import { createFeatureService } from '../src/features/service.js';
import { allowedOrigins } from '../src/http/cors.js';
import { createApiServer } from '../src/http/server.js';
import { closeGracefully, listen } from '../../shared/http-server.js';
import type { Authenticator } from '../../shared/principal.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { sendRaw, type RawAnswer } from '../../../test/helpers/raw-http.js';

/**
 * The single-feature GET answered without Express (features/read-fast-path.ts) must be
 * indistinguishable from Express' answer, and must leave everything but the plain 200 to Express.
 */

const APP_ORIGIN = 'https://app.example.org';
let db: TestDatabase;
let dataDir: string;
let authenticator: Authenticator;
let token: string;
const servers: Server[] = [];
let withFastPath: string;
let expressOnly: string;

async function serve(server: Server): Promise<string> {
  servers.push(server);
  return `http://127.0.0.1:${await listen(server, 0, '127.0.0.1')}`;
}

beforeAll(async () => {
  db = await createTestDatabase();
  dataDir = mkdtempSync(join(tmpdir(), 'fast-path-'));
  authenticator = await createAuthenticator({ production: false, dataDir });
  token = await (await loadOrCreateDevKeys(dataDir)).sign({ sub: 'fast-reader', role: 'contributor' });
  await db.pool.query(
    `INSERT INTO features.features (id, name, kategorie, geom) VALUES
       ('fast-1', 'Erster', 'friedhof', ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326)),
       ('mit leer/zeichen', 'Zweiter', 'denkmal', ST_SetSRID(ST_MakePoint(13.5, 52.5), 4326)),
       ('Grüße', 'Dritter', 'blumenbeet', ST_SetSRID(ST_MakePoint(13.6, 52.5), 4326))`,
  );
  const app = (fastPaths: boolean) =>
    createApiServer(createApp({ db: db.pool, config: { rateLimit: { writesPerMinute: 0 }, cors: { origins: [APP_ORIGIN] } }, authenticator, logger: pino({ level: 'silent' }), fastPaths }));
  withFastPath = await serve(app(true));
  expressOnly = await serve(app(false));
});

afterAll(async () => {
  for (const server of servers) await closeGracefully(server, 1_000);
  await db?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

const send = (base: string, method: string, path: string, headers: Record<string, string> = {}): Promise<RawAnswer> => sendRaw(base, { method, path, headers });

const CASES: Array<{ name: string; method?: string; path: string; headers?: () => Record<string, string>; fastStatus: number | 'express' }> = [
  { name: 'an anonymous read', path: '/api/features/fast-1', fastStatus: 200 },
  { name: 'a read from an allowed origin', path: '/api/features/fast-1', headers: () => ({ origin: APP_ORIGIN }), fastStatus: 200 },
  { name: 'a read from a foreign origin', path: '/api/features/fast-1', headers: () => ({ origin: 'https://evil.example.net' }), fastStatus: 200 },
  { name: 'a read with a valid token', path: '/api/features/fast-1', headers: () => ({ authorization: `Bearer ${token}` }), fastStatus: 200 },
  { name: 'a read with a query string', path: '/api/features/fast-1?f=json', fastStatus: 200 },
  { name: 'an id with %-escapes', path: `/api/features/${encodeURIComponent('mit leer/zeichen')}`, fastStatus: 200 },
  { name: 'an id with non-ASCII letters', path: `/api/features/${encodeURIComponent('Grüße')}`, fastStatus: 200 },
  { name: 'an unknown id', path: '/api/features/no-such-feature', fastStatus: 'express' },
  { name: 'a forged token', path: '/api/features/fast-1', headers: () => ({ authorization: `Bearer ${token.slice(0, -4)}AAAA` }), fastStatus: 'express' },
  { name: 'a malformed %-escape', path: '/api/features/%E0%A4%A', fastStatus: 'express' },
  { name: 'a conditional read of the current version', path: '/api/features/fast-1', headers: () => ({ 'if-none-match': '"1"' }), fastStatus: 'express' },
  { name: 'a HEAD request', method: 'HEAD', path: '/api/features/fast-1', fastStatus: 'express' },
  { name: 'a trailing slash', path: '/api/features/fast-1/', fastStatus: 'express' },
  { name: 'other letter case', path: '/API/Features/fast-1', fastStatus: 'express' },
  { name: 'the history', path: '/api/features/fast-1/history', fastStatus: 'express' },
  { name: 'an id of 256 characters', path: `/api/features/${'x'.repeat(256)}`, fastStatus: 'express' },
  { name: 'a DELETE', method: 'DELETE', path: '/api/features/fast-1', fastStatus: 'express' },
];

describe('the single-feature GET without Express', () => {
  for (const c of CASES) {
    it(`answers ${c.name} exactly as Express does`, async () => {
      const headers = c.headers?.() ?? {};
      const fast = await send(withFastPath, c.method ?? 'GET', c.path, headers);
      const slow = await send(expressOnly, c.method ?? 'GET', c.path, headers);
      expect(fast).toEqual(slow);
    });
  }

  it('answers the plain reads itself and hands every other request to Express', async () => {
    const fellBack: string[] = [];
    const fast = featureReadFastPath({ service: createFeatureService(db.pool), authenticator, allowedOrigins: allowedOrigins([APP_ORIGIN]) });
    const base = await serve(
      createServer((req, res) =>
        fast(req, res, () => {
          fellBack.push(req.url ?? '');
          res.writeHead(599).end();
        }),
      ),
    );
    for (const c of CASES) {
      const answer = await send(base, c.method ?? 'GET', c.path, c.headers?.() ?? {});
      expect(answer.status, c.name).toBe(c.fastStatus === 'express' ? 599 : c.fastStatus);
    }
    expect(fellBack).toHaveLength(CASES.filter((c) => c.fastStatus === 'express').length);
  });

  it('sends the CORS and security headers of the /api routes on a fast answer', async () => {
    const answer = await send(withFastPath, 'GET', '/api/features/fast-1', { origin: APP_ORIGIN });
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
});
