/**
 * The feature API under test: the real app on a real HTTP server (127.0.0.1, port 0) against a test
 * database, authenticating against a real JWKS issuer (test-issuer.ts).
 *
 *   const api = await startTestApi(db);
 *   const token = await api.tokenFor('contributor', 'alice');
 *   await api.request('POST', '/api/features', { token, body: feature });
 *
 * Or, for a whole test file, useTestApi(): the database and the API opened in beforeAll, closed in afterAll.
 */
import { pino } from 'pino';
import { afterAll, beforeAll } from 'vitest';
import { createApp } from '../../services/api/src/app.js';
import { createAuthenticator } from '../../services/api/src/auth/index.js';
import { serveApp } from '../../services/api/src/http/server.js';
import type { Role } from '../../services/shared/principal.js';
import type { ApiConfig } from '../../services/api/src/config.js';
import { closeGracefully, listen } from '../../services/shared/http-server.js';
import { migrateQueue } from '../../services/api/src/qc/queue.js';
import { createTestDatabase, type TestDatabase } from './db.js';
import { startTestIssuer, type TestIssuer } from './test-issuer.js';
import { assertDocumented, fetchResponseChecker } from '../../services/api/test/openapi-responses.js';

export interface TestResponse {
  status: number;
  headers: Headers;
  text: string;
  /** The parsed body, or undefined when it is not JSON. */
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any -- tests inspect arbitrary bodies
}

/** A feature as the API returns it (for typing test assertions). */
export interface FeatureJson {
  type: 'Feature';
  id: string;
  geometry: { type: string; coordinates: unknown };
  properties: Record<string, unknown>;
}

export interface RequestOptions {
  token?: string;
  body?: unknown;
  /** Sent as is (for malformed JSON or other media types). */
  rawBody?: string | Buffer;
  headers?: Record<string, string>;
}

export interface TestApi {
  url: string;
  issuer: TestIssuer;
  tokenFor(role: Role | string, sub: string): Promise<string>;
  request(method: string, path: string, options?: RequestOptions): Promise<TestResponse>;
  close(): Promise<void>;
}

export interface TestApiOptions {
  config?: Partial<Pick<ApiConfig, 'rateLimit' | 'qc'>>;
}

export async function startTestApi(db: TestDatabase, options: TestApiOptions = {}): Promise<TestApi> {
  const issuer = await startTestIssuer();
  const authenticator = await readyAuthenticator(issuer);
  const config = { rateLimit: { writesPerMinute: 0 }, ...options.config };
  // A synchronous stream: pino's default one registers a process 'exit' listener that goes only when the
  // stream is garbage-collected, so the shared fork's guard (test/helpers/shared-fork-guard.ts) saw it or not by GC timing.
  const server = await serveApp(createApp({ db: db.pool, config, authenticator, logger: pino({ level: 'silent' }, pino.destination({ sync: true })) }));
  const port = await listen(server, 0, '127.0.0.1');
  const url = `http://127.0.0.1:${port}`;
  // Every response of the suite is checked against the OpenAPI document the API serves.
  const checker = await fetchResponseChecker(url);
  return {
    url,
    issuer,
    // A sign-in with a second factor (acr aal2), as reviewers and admins need for approvals, deletions and
    // user administration (services/api/src/auth/assurance.ts); tests of the aal1 refusal sign their own.
    tokenFor: (role, sub) => issuer.sign({ sub, role, acr: 'aal2' }),
    async request(method, path, { token, body, rawBody, headers = {} } = {}) {
      const init: RequestInit = { method, headers: { ...headers } };
      const h = init.headers as Record<string, string>;
      if (token) h.authorization = `Bearer ${token}`;
      if (body !== undefined) {
        init.body = JSON.stringify(body);
        h['content-type'] ??= 'application/json';
      } else if (rawBody !== undefined) {
        init.body = rawBody;
      }
      const response = await fetch(`${url}${path}`, init);
      const text = await response.text();
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        json = undefined;
      }
      assertDocumented(checker, { method, path, status: response.status, contentType: response.headers.get('content-type'), text });
      return { status: response.status, headers: response.headers, text, json };
    },
    async close() {
      await closeGracefully(server, 1_000);
      await issuer.close();
    },
  };
}

/**
 * The database-plus-API setup of a test file, as one call at its top level: registers a beforeAll that
 * opens a fresh migrated database (with graphile-worker's schema too when `queue` is set, for files
 * whose requests queue QC jobs) and starts the API on it, and an afterAll that closes both. The file's
 * own hooks, registered after this call, run after the start and before the close (vitest runs
 * beforeAll hooks in order and afterAll hooks in reverse).
 *
 *   const { db, api } = useTestApi();
 *   beforeAll(async () => { token = await api.tokenFor('contributor', 'alice'); });
 *
 * `db` and `api` stand for the ones started: usable in tests and hooks, not at the top level.
 */
export function useTestApi(options: TestApiOptions & { queue?: boolean } = {}): { db: TestDatabase; api: TestApi } {
  let db: TestDatabase | undefined;
  let api: TestApi | undefined;
  beforeAll(async () => {
    db = await createTestDatabase();
    if (options.queue) await migrateQueue(db.pool);
    api = await startTestApi(db, options);
  });
  afterAll(async () => {
    await api?.close();
    await db?.close();
  });
  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('useTestApi: the database and the API exist from its beforeAll on (use them in tests and hooks)');
    return value;
  };
  return {
    db: {
      get kind() { return started(db).kind; },
      get url() { return started(db).url; },
      get pool() { return started(db).pool; },
      reset: (resetOptions) => started(db).reset(resetOptions),
      close: () => started(db).close(),
    },
    api: {
      get url() { return started(api).url; },
      get issuer() { return started(api).issuer; },
      tokenFor: (role, sub) => started(api).tokenFor(role, sub),
      request: (method, path, requestOptions) => started(api).request(method, path, requestOptions),
      close: () => started(api).close(),
    },
  };
}

/**
 * An authenticator that has already fetched the issuer's key set. The first fetch happens here, in
 * the setup hook, and is retried: on a starved machine it can exceed jose's 5 s timeout, after which
 * jose would not refetch for 30 s and every authenticated test of the file would fail for a reason
 * that is not the one under test.
 */
async function readyAuthenticator(issuer: TestIssuer) {
  for (let attempt = 1; ; attempt++) {
    const authenticator = await createAuthenticator({ issuer: issuer.issuer, jwksUrl: issuer.jwksUrl, production: false, dataDir: '/nonexistent' });
    try {
      const token = await issuer.sign({ sub: 'warm-up', role: 'guest' });
      await authenticator.authenticate({ headers: { authorization: `Bearer ${token}` } });
      return authenticator;
    } catch (error) {
      if (attempt === 3) throw error;
    }
  }
}

/** A valid feature body; override parts with the spread of your choice. */
export function aFeature(overrides: { properties?: Record<string, unknown>; geometry?: unknown; id?: string } = {}) {
  return {
    type: 'Feature',
    ...(overrides.id !== undefined ? { id: overrides.id } : {}),
    geometry: overrides.geometry ?? { type: 'Point', coordinates: [13.4, 52.5] },
    properties: { name: 'Alter Friedhof', kategorie: 'friedhof', ...overrides.properties },
  };
}
