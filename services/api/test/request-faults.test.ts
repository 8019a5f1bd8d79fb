/**
 * A fault inside one request (here: the features table gone from under the API) is a 500 problem+json
 * for that request alone, logged with the request's id, which the answer carries as X-Request-Id; the
 * process stays up and answers the next request. Both the Express routes and the create fast path.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { aFeature } from '../../../test/helpers/api.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { startTestIssuer, type TestIssuer } from '../../../test/helpers/test-issuer.js';
import { closeGracefully, listen } from '../../shared/http-server.js';
import { createApp } from '../src/app.js';
import { createAuthenticator } from '../src/auth/index.js';
import { serveApp } from '../src/http/server.js';

let db: TestDatabase;
let issuer: TestIssuer;
let server: Awaited<ReturnType<typeof serveApp>>;
let url: string;
const logLines: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  db = await createTestDatabase();
  issuer = await startTestIssuer();
  const authenticator = await createAuthenticator({ issuer: issuer.issuer, jwksUrl: issuer.jwksUrl, production: false, dataDir: '/nonexistent' });
  const logger = pino(
    { level: 'info' },
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split('\n').filter(Boolean)) logLines.push(JSON.parse(line) as Record<string, unknown>);
        done();
      },
    }),
  );
  server = await serveApp(createApp({ db: db.pool, config: { rateLimit: { writesPerMinute: 0 } }, authenticator, logger }));
  url = `http://127.0.0.1:${await listen(server, 0, '127.0.0.1')}`;
});
afterAll(async () => {
  if (server) await closeGracefully(server, 1_000);
  await issuer?.close();
  await db?.close();
});

it('a request that fails inside is a 500 problem+json logged with its id, and the next request is served', async () => {
  const token = await issuer.sign({ sub: 'faulty', role: 'admin' });
  await db.pool.query('ALTER TABLE features.features RENAME TO features_gone');
  try {
    // The list (an Express route), and a plain create (the fast path).
    const failures = [
      await fetch(`${url}/api/features`),
      await fetch(`${url}/api/features`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(aFeature()) }),
    ];
    for (const response of failures) {
      const text = await response.text();
      expect(response.status, text).toBe(500);
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(text).not.toMatch(/features_gone|features\.features|relation|SQLSTATE|\.ts:\d+/);
      const id = response.headers.get('x-request-id');
      expect(id).toMatch(/^[0-9a-f-]{36}$/);
      const logged = logLines.find((line) => line.reqId === id);
      expect(logged, JSON.stringify(logLines.slice(-3))).toMatchObject({ msg: 'request failed', level: 50 });
    }
  } finally {
    await db.pool.query('ALTER TABLE features.features_gone RENAME TO features');
  }
  expect((await fetch(`${url}/healthz`)).status).toBe(200);
  const created = await fetch(`${url}/api/features`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(aFeature()) });
  expect(created.status).toBe(201);
});

it("a proxy's X-Request-Id is kept; anything else gets a new one", async () => {
  expect((await fetch(`${url}/healthz`, { headers: { 'x-request-id': 'caddy-7f3a.1' } })).headers.get('x-request-id')).toBe('caddy-7f3a.1');
  const replaced = (await fetch(`${url}/healthz`, { headers: { 'x-request-id': 'a b\u00ff'.repeat(3) } })).headers.get('x-request-id');
  expect(replaced).toMatch(/^[0-9a-f-]{36}$/);
});
