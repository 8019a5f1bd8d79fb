import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../src/app.js';
import { createAuthenticator } from '../src/auth/index.js';
import { loadOrCreateDevKeys } from '../src/auth/dev-keys.js';
import { featureCreateFastPath } from '../src/features/create-fast-path.js';
import { createFeatureService } from '../src/features/service.js';
import { allowedOrigins } from '../src/http/cors.js';
import { createApiServer } from '../src/http/server.js';
import { closeGracefully, listen } from '../../shared/http-server.js';
import type { Authenticator } from '../../shared/principal.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { sendRaw, type RawAnswer } from '../../../test/helpers/raw-http.js';
import { lacks } from '../../../test/helpers/requirements.js';

/**
 * The create answered without Express (features/create-fast-path.ts) must be indistinguishable from
 * Express' answer, error cases and the rate limit included, and must leave every unusual request to
 * Express. Each side has its own database, so the same request makes the same feature on each; only
 * the creation timestamps (same length, different instants) are masked before comparing.
 */

const APP_ORIGIN = 'https://app.example.org';
const LIMIT = 1_000;
const databases: TestDatabase[] = [];

// Each side of the comparison needs its own database, so the same request makes the same feature on
// each; the embedded PGlite is one database per process.
const MISSING = lacks(
  'the byte-for-byte comparison of the create without Express',
  process.env.TEST_DATABASE_URL ? { ok: true } : { ok: false, reason: 'TEST_DATABASE_URL is not set (a PostgreSQL + PostGIS server, for one database per side)' },
);
const servers: Server[] = [];
let dataDir: string;
let authenticator: Authenticator;
let token: string;
let guestToken: string;
let withFastPath: string;
let expressOnly: string;

async function serve(server: Server): Promise<string> {
  servers.push(server);
  return `http://127.0.0.1:${await listen(server, 0, '127.0.0.1')}`;
}

async function apiServer(fastPaths: boolean, writesPerMinute: number): Promise<string> {
  const db = await createTestDatabase();
  databases.push(db);
  const app = createApp({ db: db.pool, config: { rateLimit: { writesPerMinute }, cors: { origins: [APP_ORIGIN] } }, authenticator, logger: pino({ level: 'silent' }), fastPaths });
  return serve(createApiServer(app));
}

beforeAll(async () => {
  if (MISSING) return;
  dataDir = mkdtempSync(join(tmpdir(), 'create-fast-path-'));
  authenticator = await createAuthenticator({ production: false, dataDir });
  const keys = await loadOrCreateDevKeys(dataDir);
  token = await keys.sign({ sub: 'fast-writer', role: 'contributor' });
  guestToken = await keys.sign({ sub: 'fast-guest', role: 'guest' });
  withFastPath = await apiServer(true, LIMIT);
  expressOnly = await apiServer(false, LIMIT);
});

afterAll(async () => {
  for (const server of servers) await closeGracefully(server, 1_000);
  for (const db of databases) await db.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

const send = (base: string, method: string, path: string, headers: Record<string, string>, body?: string | Buffer): Promise<RawAnswer> => sendRaw(base, { method, path, headers, body });

/**
 * Creation times differ between the two databases, and the seconds until the rate-limit window resets
 * between the two servers (each window opened at its own first request, a few ms apart, so the rounded
 * seconds may differ by one); everything else must not.
 */
const maskTimes = (answer: RawAnswer): RawAnswer => {
  const reset = /reset=(\d+)$/.exec(String(answer.headers.ratelimit ?? ''));
  if (reset) expect(Number(reset[1])).toBeLessThanOrEqual(60);
  return {
    ...answer,
    headers: reset ? { ...answer.headers, ratelimit: String(answer.headers.ratelimit).replace(/reset=\d+$/, 'reset=<s>') } : answer.headers,
    body: answer.body.replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z/g, '<time>'),
  };
};

const feature = (id: string, properties: Record<string, unknown> = {}, geometry: unknown = { type: 'Point', coordinates: [13.4, 52.5] }) =>
  JSON.stringify({ type: 'Feature', id, geometry, properties: { name: `Neu ${id}`, kategorie: 'denkmal', ...properties } });

const JSON_TYPE = { 'content-type': 'application/json' };
const bearer = () => ({ authorization: `Bearer ${token}` });

interface Case {
  name: string;
  path?: string;
  headers: () => Record<string, string>;
  body: () => string | Buffer;
  /** Who answers on the fast server: this path (with the status), or Express. */
  fast: number | 'express';
}

const CASES: Case[] = [
  { name: 'a valid create', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => feature('c-plain', { telefon: '+49 30 123' }), fast: 201 },
  { name: 'a create from an allowed origin', headers: () => ({ ...bearer(), ...JSON_TYPE, origin: APP_ORIGIN }), body: () => feature('c-origin'), fast: 201 },
  { name: 'a create from a foreign origin', headers: () => ({ ...bearer(), ...JSON_TYPE, origin: 'https://evil.example.net' }), body: () => feature('c-foreign'), fast: 201 },
  {
    name: 'a geo+json body with charset=utf-8 and non-ASCII text',
    headers: () => ({ ...bearer(), 'content-type': 'application/geo+json; charset=UTF-8' }),
    body: () => feature('c-umlaut', { name: 'Grüße an den Friedhof', adresse: 'Straße 1' }),
    fast: 201,
  },
  { name: 'a body with a byte order mark', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => `\ufeff${feature('c-bom')}`, fast: 201 },
  {
    name: 'a polygon whose coordinates are rounded',
    headers: () => ({ ...bearer(), ...JSON_TYPE }),
    body: () => feature('c-poly', {}, { type: 'Polygon', coordinates: [[[13.0000000001, 52], [13.1, 52], [13.1, 52.1], [13, 52.1], [13.0000000001, 52]]] }),
    fast: 201,
  },
  { name: 'malformed JSON', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => '{"type":', fast: 400 },
  { name: 'a JSON string instead of an object', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => '"Feature"', fast: 400 },
  { name: 'a body of spaces only', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => '   ', fast: 400 },
  { name: 'a lone surrogate in a name', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => feature('c-surrogate', { name: 'a\\ud800b' }).replace('a\\\\ud800b', 'a\\ud800b'), fast: 400 },
  {
    name: 'a feature failing the schema in several fields',
    headers: () => ({ ...bearer(), ...JSON_TYPE }),
    body: () => JSON.stringify({ type: 'Feature', geometry: { type: 'Point', coordinates: [200, 52] }, properties: { name: '', kategorie: 'x', telefon: '-', extra: 1 } }),
    fast: 400,
  },
  {
    name: 'a self-intersecting polygon (refused by PostGIS)',
    headers: () => ({ ...bearer(), ...JSON_TYPE }),
    body: () => feature('c-bowtie', {}, { type: 'Polygon', coordinates: [[[13, 52], [13.1, 52.1], [13.1, 52], [13, 52.1], [13, 52]]] }),
    fast: 400,
  },
  { name: 'an id that exists already', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => feature('c-plain'), fast: 409 },
  { name: 'an anonymous create', headers: () => JSON_TYPE, body: () => feature('c-anon'), fast: 'express' },
  { name: 'a forged token', headers: () => ({ authorization: `Bearer ${token.slice(0, -4)}AAAA`, ...JSON_TYPE }), body: () => feature('c-forged'), fast: 'express' },
  { name: 'a caller who may not create', headers: () => ({ authorization: `Bearer ${guestToken}`, ...JSON_TYPE }), body: () => feature('c-guest'), fast: 'express' },
  { name: 'a text/plain body', headers: () => ({ ...bearer(), 'content-type': 'text/plain' }), body: () => feature('c-text'), fast: 'express' },
  { name: 'a latin1 charset', headers: () => ({ ...bearer(), 'content-type': 'application/json; charset=latin1' }), body: () => feature('c-latin1'), fast: 'express' },
  { name: 'an Idempotency-Key', headers: () => ({ ...bearer(), ...JSON_TYPE, 'idempotency-key': 'k-1' }), body: () => feature('c-idem'), fast: 'express' },
  { name: 'a gzip-encoded body', headers: () => ({ ...bearer(), ...JSON_TYPE, 'content-encoding': 'gzip' }), body: () => gzipSync(feature('c-gzip')), fast: 'express' },
  { name: 'a body over 1 MiB', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => feature('c-big', { name: 'x'.repeat(1024 * 1024) }), fast: 'express' },
  { name: 'an empty body', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => '', fast: 'express' },
  { name: 'a query string', path: '/api/features?x=1', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => feature('c-query'), fast: 'express' },
  { name: 'a trailing slash', path: '/api/features/', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => feature('c-slash'), fast: 'express' },
];

describe.skipIf(MISSING)('the create without Express', () => {
  for (const c of CASES) {
    it(`answers ${c.name} exactly as Express does`, async () => {
      const path = c.path ?? '/api/features';
      const fast = await send(withFastPath, 'POST', path, c.headers(), c.body());
      const slow = await send(expressOnly, 'POST', path, c.headers(), c.body());
      expect(maskTimes(fast)).toEqual(maskTimes(slow));
      if (c.fast !== 'express') expect(fast.status).toBe(c.fast);
    });
  }

  it('answers the plain creates itself and hands every other request to Express', async () => {
    const db = await createTestDatabase();
    databases.push(db);
    const fellBack: string[] = [];
    const fast = featureCreateFastPath({
      service: createFeatureService(db.pool),
      authenticator,
      record: async () => undefined,
      allowedOrigins: allowedOrigins([APP_ORIGIN]),
      logger: pino({ level: 'silent' }),
    });
    const base = await serve(
      createServer((req, res) =>
        fast(req, res, () => {
          fellBack.push(req.url ?? '');
          req.resume();
          res.writeHead(599).end();
        }),
      ),
    );
    for (const c of CASES) {
      const answer = await send(base, 'POST', c.path ?? '/api/features', c.headers(), c.body());
      expect(answer.status, c.name).toBe(c.fast === 'express' ? 599 : c.fast);
    }
    expect(fellBack).toHaveLength(CASES.filter((c) => c.fast === 'express').length);
  });

  it('leaves a change authenticated by a session cookie to Express, for its CSRF Origin check', async () => {
    const db = await createTestDatabase();
    databases.push(db);
    const viaSession: Authenticator = { authenticate: async () => ({ id: 'cookie-user', role: 'contributor', via: 'session' }) };
    let fellBack = 0;
    const fast = featureCreateFastPath({ service: createFeatureService(db.pool), authenticator: viaSession, record: async () => undefined, allowedOrigins: new Set(), logger: pino({ level: 'silent' }) });
    const base = await serve(createServer((req, res) => fast(req, res, () => (fellBack++, req.resume(), res.writeHead(599).end()))));
    const answer = await send(base, 'POST', '/api/features', { ...JSON_TYPE, origin: 'https://evil.example.net' }, feature('c-session'));
    expect(answer.status).toBe(599);
    expect(fellBack).toBe(1);
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM features.features`)).rows[0]).toEqual({ n: 0 });
  });

  it('creates nothing for a client that leaves halfway through its body, and answers the next one', async () => {
    const body = feature('c-left');
    const { port } = new URL(withFastPath);
    await new Promise<void>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1', () => {
        socket.write(`POST /api/features HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 20)}`);
        setTimeout(() => socket.destroy(), 200);
      });
      socket.on('close', () => resolve());
      socket.on('error', reject);
    });
    const next = await send(withFastPath, 'POST', '/api/features', { ...bearer(), ...JSON_TYPE }, feature('c-after-left'));
    expect(next.status).toBe(201);
    const rows = await databases[0]!.pool.query(`SELECT id FROM features.features WHERE id IN ('c-left', 'c-after-left') ORDER BY id`);
    expect(rows.rows).toEqual([{ id: 'c-after-left' }]);
  });
});

describe.skipIf(MISSING)('the rate limit on the create without Express', () => {
  it('counts and refuses creates exactly as Express does', async () => {
    const fastBase = await apiServer(true, 3);
    const slowBase = await apiServer(false, 3);
    for (let i = 0; i < 5; i++) {
      const body = feature(`r-${i}`);
      const fast = await send(fastBase, 'POST', '/api/features', { ...bearer(), ...JSON_TYPE }, body);
      const slow = await send(slowBase, 'POST', '/api/features', { ...bearer(), ...JSON_TYPE }, body);
      expect(maskTimes(fast)).toEqual(maskTimes(slow));
      expect(fast.status).toBe(i < 3 ? 201 : 429);
    }
  });

  it('shares one budget with the changes Express answers', async () => {
    const base = await apiServer(true, 3);
    const statuses: number[] = [];
    // Alternating a fast create and one through Express (an Idempotency-Key takes that route).
    for (let i = 0; i < 4; i++) {
      const headers = { ...bearer(), ...JSON_TYPE, ...(i % 2 === 1 ? { 'idempotency-key': `shared-${i}` } : {}) };
      const answer = await send(base, 'POST', '/api/features', headers, feature(`s-${i}`));
      statuses.push(answer.status);
      expect(answer.headers['ratelimit'], `request ${i}`).toMatch(new RegExp(`remaining=${Math.max(0, 2 - i)}`));
    }
    expect(statuses).toEqual([201, 201, 201, 429]);
  });
});
