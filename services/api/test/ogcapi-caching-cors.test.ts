import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest, type IncomingHttpHeaders, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { createApp } from '../src/app.js';
import { createAuthenticator } from '../src/auth/index.js';
import { serveApp } from '../src/http/server.js';
import { closeGracefully, listen } from '../../shared/http-server.js';

/**
 * What caches and browsers see of /ogcapi: each representation of an item (GeoJSON, HTML) has its own
 * ETag, answers chosen by Accept say so in Vary, and a page on an allowed origin may send Content-Crs
 * and read it back (CORS).
 */
const APP_ORIGIN = 'https://app.example.org';
const ITEM = '/ogcapi/collections/features/items/c1';
const HTML = 'text/html,application/xhtml+xml,*/*;q=0.8';
const GEOJSON = 'application/geo+json';

let db: TestDatabase;
let server: Server;
let base: string;
let dataDir: string;

beforeAll(async () => {
  db = await createTestDatabase();
  dataDir = mkdtempSync(join(tmpdir(), 'ogcapi-caching-'));
  const authenticator = await createAuthenticator({ production: false, dataDir });
  server = await serveApp(createApp({ db: db.pool, config: { rateLimit: { writesPerMinute: 0 }, cors: { origins: [APP_ORIGIN] } }, authenticator, logger: pino({ level: 'silent' }, pino.destination({ sync: true })) }));
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
const varyOf = (answer: Answer) => list(answer.headers.vary);

describe('an item in GeoJSON and in HTML', () => {
  it('has one ETag per representation', async () => {
    const json = await get(ITEM, { accept: GEOJSON });
    const html = await get(ITEM, { accept: HTML });
    expect(json.headers['content-type']).toMatch(/^application\/geo\+json/);
    expect(html.headers['content-type']).toMatch(/^text\/html/);
    expect(json.headers.etag).toBeTruthy();
    expect(html.headers.etag).toBeTruthy();
    expect(html.headers.etag).not.toBe(json.headers.etag);
  });

  it('answers a browser revalidating with the GeoJSON ETag with the HTML page, not 304', async () => {
    const jsonTag = (await get(ITEM, { accept: GEOJSON })).headers.etag!;
    const html = await get(ITEM, { accept: HTML, 'if-none-match': jsonTag });
    expect(html.status).toBe(200);
    expect(html.text).toMatch(/^<!doctype html>/);
  });

  it('answers a GeoJSON client revalidating with the HTML ETag with the GeoJSON, not 304', async () => {
    const htmlTag = (await get(ITEM, { accept: HTML })).headers.etag!;
    const json = await get(ITEM, { accept: GEOJSON, 'if-none-match': htmlTag });
    expect(json.status).toBe(200);
    expect(JSON.parse(json.text).id).toBe('c1');
  });

  it('answers 304 to each representation revalidated with its own ETag', async () => {
    for (const accept of [GEOJSON, HTML]) {
      const tag = (await get(ITEM, { accept })).headers.etag!;
      expect((await get(ITEM, { accept, 'if-none-match': tag })).status, accept).toBe(304);
    }
  });

  it('sends Vary: Accept (and Origin) where Accept chooses the representation, and not where f= does', async () => {
    for (const path of [ITEM, '/ogcapi/collections/features/items', '/ogcapi/', '/ogcapi/collections', '/ogcapi/conformance', '/ogcapi/api']) {
      const negotiated = await get(path, { accept: HTML });
      expect(varyOf(negotiated), path).toEqual(expect.arrayContaining(['accept', 'origin']));
      const chosen = await get(`${path}?f=json`, { accept: HTML });
      expect(varyOf(chosen), path).toContain('origin');
      expect(varyOf(chosen), path).not.toContain('accept');
    }
  });

  it('still takes the GeoJSON ETag as If-Match for a change', async () => {
    const { rows } = await db.pool.query<{ version: number }>("SELECT version FROM features.features WHERE id = 'c1'");
    expect((await get(ITEM, { accept: GEOJSON })).headers.etag).toBe(`"${rows[0]!.version}"`);
  });
});

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
