/**
 * The feature API with Ory in front, for the identity-*.test.ts files: the real app on 127.0.0.1:0 over a
 * real test database, authenticating by JWT (a real JWKS issuer), by Kratos session cookie and by opaque
 * Hydra access token — Kratos and Hydra being the contract-checked doubles of identity/test/doubles, which
 * check every request and response against the vendored v26.2.0 OpenAPI specs.
 *
 * The Kratos double models the public whoami and the admin getIdentity; the admin patchIdentity the API
 * uses for role changes is added here (the contract server checks its JSON Patch body against the spec).
 */
import { serveApp } from '../src/http/server.js';
import { assertDocumented, fetchResponseChecker } from './openapi-responses.js';
import { randomUUID } from 'node:crypto';
import { Configuration as HydraConfiguration, OAuth2Api } from '@ory/hydra-client';
import { issueOpaqueToken } from '../../../test/doubles/ory/code-flow.js';
import { Configuration as KratosConfiguration, FrontendApi, IdentityApi } from '@ory/kratos-client';
import { pino, type Logger } from 'pino';
import { createTokenIntrospector } from '../../shared/ory/introspection.js';
import { createSessionResolver } from '../../shared/ory/session-resolver.js';
import { TestClock } from '../../shared/testing/ory/clock.js';
import type { DoubleRequest, DoubleResponse } from '../../shared/testing/ory/contract-server.js';
import { HydraDouble } from '../../shared/testing/ory/hydra-double.js';
import { KratosDouble, type TestIdentity } from '../../shared/testing/ory/kratos-double.js';
import { createApp } from '../src/app.js';
import { createCompositeAuthenticator } from '../src/auth/composite.js';
import { createAuthenticator } from '../src/auth/index.js';
import type { Role } from '../../shared/principal.js';
import { closeGracefully, listen } from '../../shared/http-server.js';
import type { TestDatabase } from '../../../test/helpers/db.js';
import { startTestIssuer, type TestIssuer } from '../../../test/helpers/test-issuer.js';

export const APP_ORIGIN = 'https://app.example.org';
export const ACCESS_TOKEN_SECONDS = 120;

export interface IdentityRequestOptions {
  bearer?: string;
  /** The Kratos session token; sent as the ory_kratos_session cookie (with an unrelated cookie beside it). */
  session?: string;
  origin?: string;
  body?: unknown;
  headers?: Record<string, string>;
}

export interface IdentityResponse {
  status: number;
  headers: Headers;
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any -- tests inspect arbitrary bodies
}

export interface IdentityApiHarness {
  url: string;
  clock: TestClock;
  kratos: KratosDouble;
  hydra: HydraDouble;
  issuer: TestIssuer;
  /** patchIdentity answers with this status (an Ory error body) while set; `once` clears it after one call. */
  failPatch: { status: number; once?: boolean } | undefined;
  /** The patchIdentity bodies Kratos received. */
  patches: unknown[];
  request(method: string, path: string, options?: IdentityRequestOptions): Promise<IdentityResponse>;
  /** An identity in Kratos with a live session; returns the identity and its session cookie value. */
  signedIn(role: Role | undefined, options?: { name?: string; email?: string; aal?: 'aal1' | 'aal2'; verified?: boolean }): { identity: TestIdentity; session: string; sessionId: string };
  /** An opaque Hydra access token for `subject`, issued through the authorization code flow. */
  opaqueToken(subject: string, accessTokenSession: Record<string, unknown>): Promise<string>;
  jwt(role: Role | string, sub: string, extra?: Record<string, unknown>): Promise<string>;
  close(): Promise<void>;
}

/**
 * The contract-checked Kratos and Hydra doubles as the API sees them: only whoami, identity admin and
 * introspection are used, so the browser-facing URLs point nowhere.
 */
export async function startOryDoubles(clock: TestClock, accessTokenLifespanSeconds: number): Promise<{ kratos: KratosDouble; hydra: HydraDouble }> {
  const kratos = await new KratosDouble({ clock, loginUiUrl: 'http://auth.invalid/login', allowedReturnUrls: [] }).start();
  const hydra = await new HydraDouble({
    clock,
    loginUrl: 'http://auth.invalid/login',
    consentUrl: 'http://auth.invalid/consent',
    logoutUrl: 'http://auth.invalid/logout',
    postLogoutRedirect: 'http://auth.invalid/',
    accessTokenLifespanSeconds,
  }).start();
  return { kratos, hydra };
}

export async function startIdentityApi(
  db: TestDatabase,
  options: { sessionTtlMs?: number; introspectionMaxMs?: number; kratosAdminUrl?: string; via?: 'composite' | 'config'; pool?: TestDatabase['pool']; logger?: Logger } = {},
): Promise<IdentityApiHarness> {
  const clock = new TestClock();
  const { kratos, hydra } = await startOryDoubles(clock, ACCESS_TOKEN_SECONDS);
  const issuer = await startTestIssuer();

  const harness = { failPatch: undefined, patches: [] } as unknown as IdentityApiHarness;
  kratos.admin.on('patchIdentity', (request) => patchIdentity(kratos, harness, request));

  const baseOptions = { timeout: 5_000, maxRedirects: 0 };
  const jwt = await createAuthenticator({ issuer: issuer.issuer, jwksUrl: issuer.jwksUrl, production: false, dataDir: '/nonexistent' });
  // The same key fetch retry as test/helpers/api.ts: warm the JWKS cache in setup, not in a test.
  await jwt.authenticate({ headers: { authorization: `Bearer ${await issuer.sign({ sub: 'warm-up', role: 'guest' })}` } });
  const authenticator =
    options.via === 'config'
      ? await createAuthenticator({
          issuer: issuer.issuer,
          jwksUrl: issuer.jwksUrl,
          production: false,
          dataDir: '/nonexistent',
          identity: { kratosPublicUrl: kratos.public.url, hydraAdminUrl: hydra.admin.url, sessionCacheMs: options.sessionTtlMs ?? 15_000 },
        })
      : createCompositeAuthenticator({
          jwt,
          sessions: createSessionResolver({ frontend: new FrontendApi(new KratosConfiguration({ basePath: kratos.public.url, baseOptions })), ttlMs: options.sessionTtlMs ?? 15_000, now: clock.now }),
          introspector: createTokenIntrospector({
            oauth2: new OAuth2Api(new HydraConfiguration({ basePath: hydra.admin.url, baseOptions })),
            maxCacheMs: options.introspectionMaxMs ?? 3_600_000,
            now: clock.now,
          }),
        });
  const identityAdmin = new IdentityApi(new KratosConfiguration({ basePath: options.kratosAdminUrl ?? kratos.admin.url, baseOptions }));
  const server = await serveApp(
    createApp({
      db: options.pool ?? db.pool,
      config: { rateLimit: { writesPerMinute: 0 }, cors: { origins: [APP_ORIGIN] } },
      authenticator,
      identityAdmin,
      logger: options.logger ?? pino({ level: 'silent' }, pino.destination({ sync: true })),
    }),
  );
  const port = await listen(server, 0, '127.0.0.1');
  const url = `http://127.0.0.1:${port}`;
  // Every response is checked against the OpenAPI document the API serves.
  const checker = await fetchResponseChecker(url);

  return Object.assign(harness, {
    url,
    clock,
    kratos,
    hydra,
    issuer,
    async request(method: string, path: string, { bearer, session, origin, body, headers = {} }: IdentityRequestOptions = {}) {
      const h: Record<string, string> = { ...headers };
      if (bearer) h.authorization = `Bearer ${bearer}`;
      if (session) h.cookie = `theme=dark; ory_kratos_session=${session}`;
      if (origin) h.origin = origin;
      if (body !== undefined) h['content-type'] = 'application/json';
      const response = await fetch(`${url}${path}`, { method, headers: h, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
      const text = await response.text();
      assertDocumented(checker, { method, path, status: response.status, contentType: response.headers.get('content-type'), text });
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        json = undefined;
      }
      return { status: response.status, headers: response.headers, json };
    },
    /** A Kratos session; signed in with a second factor (aal2) unless `aal` says otherwise, as reviewers and admins need. */
    signedIn(role: Role | undefined, who: { name?: string; email?: string; aal?: 'aal1' | 'aal2'; verified?: boolean } = {}) {
      const suffix = randomUUID().slice(0, 8);
      const identity = kratos.addIdentity({ email: who.email ?? `u-${suffix}@example.org`, name: who.name ?? `User ${suffix}`, password: 'irrelevant', ...(role ? { role } : {}), ...(who.verified === false ? { verified: false } : {}) });
      const stored = kratos.createSession(identity.id, { aal: who.aal ?? 'aal2' });
      return { identity, session: stored.token, sessionId: stored.id };
    },
    opaqueToken: (subject: string, accessTokenSession: Record<string, unknown>) => issueOpaqueToken(hydra, subject, accessTokenSession),
    jwt: (role: Role | string, sub: string, extra: Record<string, unknown> = {}) => issuer.sign({ sub, role, acr: 'aal2', ...extra }),
    async close() {
      await closeGracefully(server, 1_000);
      await Promise.all([kratos.close(), hydra.close(), issuer.close()]);
    },
  });
}

/** Kratos' PATCH /admin/identities/{id}, for the operations the API sends (add/replace of /metadata_public). */
function patchIdentity(kratos: KratosDouble, harness: IdentityApiHarness, request: DoubleRequest): DoubleResponse {
  harness.patches.push(request.body);
  if (harness.failPatch) {
    const { status } = harness.failPatch;
    if (harness.failPatch.once) harness.failPatch = undefined;
    return { status, body: { error: { code: status, status: 'Internal Server Error', message: 'the database is unavailable', reason: 'double told to fail' } } };
  }
  const identity = kratos.identities.get(request.pathParams.id as string);
  if (!identity) return { status: 404, body: { error: { code: 404, status: 'Not Found', message: 'Unable to locate the resource' } } };
  for (const op of request.body as Array<{ op: string; path: string; value?: unknown }>) {
    if ((op.op !== 'add' && op.op !== 'replace') || op.path !== '/metadata_public') {
      return { status: 400, body: { error: { code: 400, status: 'Bad Request', message: `the double does not model ${op.op} ${op.path}` } } };
    }
    const role = (op.value as { role?: unknown } | null)?.role;
    if (typeof role === 'string') identity.role = role;
    else delete identity.role;
  }
  return { status: 200, body: kratos.identityJson(identity) };
}

