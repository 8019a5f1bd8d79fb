import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest, type IncomingHttpHeaders, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { createApp } from '../src/app.js';
import { createAuthenticator } from '../src/auth/index.js';
import { createApiServer } from '../src/http/server.js';
import { closeGracefully, listen } from '../../shared/http-server.js';

/**
 * What caches and browsers see of /ogcapi: each representation of an item (GeoJSON, HTML) has its own
 * ETag, answers chosen by Accept say so in Vary, and a page on an allowed origin may send Content-Crs
 * and read it back (CORS).
 */
const APP_ORIGIN = 'https://app.example.org';
const ITEM = '/ogcapi/collections/features/items/c1';

let db: TestDatabase;
let server: Server;
let base: string;
let dataDir: string;

beforeAll(async () => {
  db = await createTestDatabase();
  dataDir = mkdtempSync(join(tmpdir(), 'ogcapi-caching-'));
  const authenticator = await createAuthenticator({ production: false, dataDir });
  server = createApiServer(createApp({ db: db.pool, config: { rateLimit: { writesPerMinute: 0 }, cors: { origins: [APP_ORIGIN] } }, authenticator, logger: pino({ level: 'silent' }) }));
  base = `http://127.0.0.1:${await listen(server, 0, '127.0.0.1')}`;
  await db.pool.query(`INSERT INTO features.features (id, name, kategorie, geom) VALUES ('c1', 'Eins', 'denkmal', ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326))`);
});
afterAll(async () => {
  if (server) await closeGracefully(server, 1_000);
  await db?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

/**
 * node:http rather than fetch: fetch adds Cache-Control: no-cache to a request carrying If-None-Match,
 * which no cache revalidating an entry sends, and which makes any server answer in full.
 */
function send(method: string, path: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}${path}`, { method, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end();
  });
}
const get = (path: string, headers: Record<string, string> = {}) => send('GET', path, headers);
const list = (value: string | string[] | undefined) => String(value ?? '').split(',').map((v) => v.trim().toLowerCase()).filter(Boolean);

describe('CORS for writes in another CRS', () => {
  it('a preflight asking for Content-Crs is allowed for an allowed origin', async () => {
    const response = await send('OPTIONS', '/ogcapi/collections/features/items', {
      origin: APP_ORIGIN,
      'access-control-request-method': 'POST',
      'access-control-request-headers': 'content-type,content-crs,authorization',
    });
    expect(response.status).toBe(204);
    expect(response.headers['access-control-allow-origin']).toBe(APP_ORIGIN);
    expect(list(response.headers['access-control-allow-headers'])).toEqual(expect.arrayContaining(['content-crs', 'content-type', 'authorization']));
  });

  it('a page on an allowed origin may read the Content-Crs of an answer', async () => {
    const response = await get(`${ITEM}?crs=EPSG:25833`, { origin: APP_ORIGIN });
    expect(response.headers['content-crs']).toBe('<http://www.opengis.net/def/crs/EPSG/0/25833>');
    expect(list(response.headers['access-control-expose-headers'])).toContain('content-crs');
  });
});
