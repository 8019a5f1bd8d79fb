import { mkdtempSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../src/app.js';
import { createAuthenticator } from '../src/auth/index.js';
import { loadOrCreateDevKeys } from '../src/auth/dev-keys.js';
import { serveApp } from '../src/http/server.js';
import { closeGracefully, listen } from '../../shared/http-server.js';
import type { Authenticator } from '../../shared/principal.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { sendRaw } from '../../../test/helpers/raw-http.js';
import { describeRequest, loadRecording, normalise, recordedAnswer, type Answer } from '../../../test/fixtures/express-answers/recorded.js';

/**
 * POST /api/features answers every kind of create exactly as the Express app did before the move to
 * Fastify, error cases and the change limit included: status, headers and body, byte for byte after
 * the normalisation of test/fixtures/express-answers/README.md. (A hand-written fast path used to
 * answer the plain creates in front of Express and was held to Express' answers; now one
 * implementation is held to the recorded ones.) One database for all servers, as for the recording:
 * every case creates its own id, so it runs on the embedded PGlite too.
 */

const APP_ORIGIN = 'https://app.example.org';
const recording = loadRecording('feature-create');
let db: TestDatabase;
let dataDir: string;
let authenticator: Authenticator;
const servers: Server[] = [];
/** Secrets of this run, and the placeholders the recording shows for them. */
const tokens = { writer: '', guest: '', forged: '' };
const placeholders = () => ({
  [tokens.writer]: '<token: fast-writer, contributor>',
  [tokens.guest]: '<token: fast-guest, guest>',
  [tokens.forged]: '<forged token: fast-writer, signature ending AAAA>',
});

/**
 * The app as the recording's Express app was configured, on a server of its own that starts with no
 * change counted, as each Express server did (it counted in its memory). Today's counters are in the
 * database (http.rate_limits, migration 029), shared by every server on it, so they are emptied here.
 */
async function serve(writesPerMinute: number, as: Authenticator = authenticator): Promise<string> {
  await db.pool.query('DELETE FROM http.rate_limits');
  const server = await serveApp(createApp({ db: db.pool, config: { rateLimit: { writesPerMinute }, cors: { origins: [APP_ORIGIN] } }, authenticator: as, logger: pino({ level: 'silent' }, pino.destination({ sync: true })) }));
  servers.push(server);
  return `http://127.0.0.1:${await listen(server, 0, '127.0.0.1')}`;
}

beforeAll(async () => {
  db = await createTestDatabase();
  dataDir = mkdtempSync(join(tmpdir(), 'hot-create-'));
  authenticator = await createAuthenticator({ production: false, dataDir });
  const keys = await loadOrCreateDevKeys(dataDir);
  tokens.writer = await keys.sign({ sub: 'fast-writer', role: 'contributor' });
  tokens.guest = await keys.sign({ sub: 'fast-guest', role: 'guest' });
  tokens.forged = `${tokens.writer.slice(0, -4)}AAAA`;
});

afterAll(async () => {
  for (const server of servers) await closeGracefully(server, 1_000);
  await db?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

/**
 * The change limit's headers were renamed on purpose with the move: express-rate-limit sent draft 7
 * (`RateLimit: limit=L, remaining=R, reset=S` and `RateLimit-Policy: L;w=60`), @fastify/rate-limit
 * sends draft 6 (`RateLimit-Limit`, `-Remaining`, `-Reset`). The recorded answer is expected with its
 * values in the new names: the same limit, the same remaining budget, the reset masked as before.
 * RateLimit-Policy has no draft-6 counterpart (the window is documented, 60 s).
 */
function withDraft6RateLimit(answer: Answer): Answer {
  const { ratelimit, 'ratelimit-policy': _policy, ...headers } = answer.headers;
  if (ratelimit === undefined) return answer;
  const values = /^limit=(\d+), remaining=(\d+), reset=<s>$/.exec(String(ratelimit));
  if (!values) throw new Error(`a recorded RateLimit header of another form: ${String(ratelimit)}`);
  return { ...answer, headers: { ...headers, 'ratelimit-limit': values[1], 'ratelimit-remaining': values[2], 'ratelimit-reset': '<s>' } };
}

/** Sends a case to `base` and expects the recorded answer (its rate-limit headers in today's names). */
async function expectAsRecorded(name: string, base: string, sent: { method: string; path: string; headers: Record<string, string>; body: string | Buffer }): Promise<void> {
  expect(describeRequest(sent, placeholders()), 'the request the answer was recorded for').toEqual(recording.cases[name]?.request);
  expect(normalise(await sendRaw(base, sent))).toEqual(withDraft6RateLimit(recordedAnswer(recording, name, db.kind)));
}

const feature = (id: string, properties: Record<string, unknown> = {}, geometry: unknown = { type: 'Point', coordinates: [13.4, 52.5] }) =>
  JSON.stringify({ type: 'Feature', id, geometry, properties: { name: `Neu ${id}`, kategorie: 'denkmal', ...properties } });

const JSON_TYPE = { 'content-type': 'application/json' };
const bearer = () => ({ authorization: `Bearer ${tokens.writer}` });
const create = (headers: Record<string, string>, body: string | Buffer, path = '/api/features') => ({ method: 'POST', path, headers, body });

const CASES: Array<{ name: string; path?: string; headers: () => Record<string, string>; body: () => string | Buffer }> = [
  { name: 'a valid create', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => feature('c-plain', { telefon: '+49 30 123' }) },
  { name: 'a create from an allowed origin', headers: () => ({ ...bearer(), ...JSON_TYPE, origin: APP_ORIGIN }), body: () => feature('c-origin') },
  { name: 'a create from a foreign origin', headers: () => ({ ...bearer(), ...JSON_TYPE, origin: 'https://evil.example.net' }), body: () => feature('c-foreign') },
  {
    name: 'a geo+json body with charset=utf-8 and non-ASCII text',
    headers: () => ({ ...bearer(), 'content-type': 'application/geo+json; charset=UTF-8' }),
    body: () => feature('c-umlaut', { name: 'Grüße an den Friedhof', adresse: 'Straße 1' }),
  },
  { name: 'a body with a byte order mark', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => `\ufeff${feature('c-bom')}` },
  {
    name: 'a polygon whose coordinates are rounded',
    headers: () => ({ ...bearer(), ...JSON_TYPE }),
    body: () => feature('c-poly', {}, { type: 'Polygon', coordinates: [[[13.0000000001, 52], [13.1, 52], [13.1, 52.1], [13, 52.1], [13.0000000001, 52]]] }),
  },
  { name: 'malformed JSON', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => '{"type":' },
  { name: 'a JSON string instead of an object', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => '"Feature"' },
  { name: 'a body of spaces only', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => '   ' },
  { name: 'a lone surrogate in a name', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => feature('c-surrogate', { name: 'a\\ud800b' }).replace('a\\\\ud800b', 'a\\ud800b') },
  {
    name: 'a feature failing the schema in several fields',
    headers: () => ({ ...bearer(), ...JSON_TYPE }),
    body: () => JSON.stringify({ type: 'Feature', geometry: { type: 'Point', coordinates: [200, 52] }, properties: { name: '', kategorie: 'x', telefon: '-', extra: 1 } }),
  },
  {
    name: 'a self-intersecting polygon (refused by PostGIS)',
    headers: () => ({ ...bearer(), ...JSON_TYPE }),
    body: () => feature('c-bowtie', {}, { type: 'Polygon', coordinates: [[[13, 52], [13.1, 52.1], [13.1, 52], [13, 52.1], [13, 52]]] }),
  },
  { name: 'an id that exists already', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => feature('c-plain') },
  { name: 'an anonymous create', headers: () => JSON_TYPE, body: () => feature('c-anon') },
  { name: 'a forged token', headers: () => ({ authorization: `Bearer ${tokens.forged}`, ...JSON_TYPE }), body: () => feature('c-forged') },
  { name: 'a caller who may not create', headers: () => ({ authorization: `Bearer ${tokens.guest}`, ...JSON_TYPE }), body: () => feature('c-guest') },
  { name: 'a text/plain body', headers: () => ({ ...bearer(), 'content-type': 'text/plain' }), body: () => feature('c-text') },
  { name: 'a latin1 charset', headers: () => ({ ...bearer(), 'content-type': 'application/json; charset=latin1' }), body: () => feature('c-latin1') },
  { name: 'an Idempotency-Key', headers: () => ({ ...bearer(), ...JSON_TYPE, 'idempotency-key': 'k-1' }), body: () => feature('c-idem') },
  { name: 'a gzip-encoded body', headers: () => ({ ...bearer(), ...JSON_TYPE, 'content-encoding': 'gzip' }), body: () => gzipSync(feature('c-gzip')) },
  { name: 'a body over 1 MiB', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => feature('c-big', { name: 'x'.repeat(1024 * 1024) }) },
  { name: 'an empty body', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => '' },
  { name: 'a query string', path: '/api/features?x=1', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => feature('c-query') },
  { name: 'a trailing slash', path: '/api/features/', headers: () => ({ ...bearer(), ...JSON_TYPE }), body: () => feature('c-slash') },
];
const AFTER_A_CLIENT_LEFT = 'the create after a client left halfway through its body';
const LIMITED = Array.from({ length: 5 }, (_, i) => `create ${i + 1} of 5 under a limit of 3`);
const SHARED = Array.from({ length: 4 }, (_, i) => `create ${i + 1} of 4 under a limit of 3, every second one with an Idempotency-Key`);
const BY_SESSION = 'a create by a session cookie from a foreign origin';

it('has a recorded Express answer for each case, and no recorded case goes unchecked', () => {
  expect([...CASES.map((c) => c.name), AFTER_A_CLIENT_LEFT, ...LIMITED, ...SHARED, BY_SESSION]).toEqual(Object.keys(recording.cases));
});

// One server for the cases in this order: each counts against the same budget of 1 000 changes.
describe('the create answers as the Express app did', () => {
  let base: string;
  beforeAll(async () => {
    base = await serve(1_000);
  });

  for (const c of CASES) {
    it(`answers ${c.name} as Express did`, async () => {
      await expectAsRecorded(c.name, base, create(c.headers(), c.body(), c.path));
    });
  }

  it('creates nothing for a client that leaves halfway through its body, and answers the next one as Express did', async () => {
    const body = feature('c-left');
    await new Promise<void>((resolve, reject) => {
      const socket = connect(Number(new URL(base).port), '127.0.0.1', () => {
        socket.write(`POST /api/features HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${tokens.writer}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 20)}`);
        setTimeout(() => socket.destroy(), 200);
      });
      socket.on('close', () => resolve());
      socket.on('error', reject);
    });
    await expectAsRecorded(AFTER_A_CLIENT_LEFT, base, create({ ...bearer(), ...JSON_TYPE }, feature('c-after-left')));
    const rows = await db.pool.query(`SELECT id FROM features.features WHERE id IN ('c-left', 'c-after-left') ORDER BY id`);
    expect(rows.rows).toEqual([{ id: 'c-after-left' }]);
  });
});

describe('the change limit on creates, as the Express app counted', () => {
  it('allows three creates a minute and refuses the fourth and fifth', async () => {
    const base = await serve(3);
    for (const [i, name] of LIMITED.entries()) await expectAsRecorded(name, base, create({ ...bearer(), ...JSON_TYPE }, feature(`r-${i}`)));
  });

  it('counts a create with an Idempotency-Key against the same budget as one without', async () => {
    const base = await serve(3);
    for (const [i, name] of SHARED.entries()) {
      const headers = { ...bearer(), ...JSON_TYPE, ...(i % 2 === 1 ? { 'idempotency-key': `shared-${i}` } : {}) };
      await expectAsRecorded(name, base, create(headers, feature(`s-${i}`)));
    }
  });
});

describe('a create authenticated by a session cookie', () => {
  it('is refused from a foreign origin (the CSRF Origin check) as Express refused it, and creates nothing', async () => {
    const viaSession: Authenticator = { authenticate: async () => ({ id: 'cookie-user', role: 'contributor', via: 'session' }) };
    const base = await serve(1_000, viaSession);
    await expectAsRecorded(BY_SESSION, base, create({ ...JSON_TYPE, origin: 'https://evil.example.net' }, feature('c-session')));
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM features.features WHERE id = 'c-session'`)).rows[0]).toEqual({ n: 0 });
  });
});
