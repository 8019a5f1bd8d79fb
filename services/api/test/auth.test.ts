import { execFile } from 'node:child_process';
import type { Server } from 'node:http';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Fastify from 'fastify';
import { SignJWT, UnsecuredJWT, generateKeyPair } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listen, closeGracefully } from '../../shared/http-server.js';
import { startTestIssuer, type TestIssuer } from '../../../test/helpers/test-issuer.js';
import { AppError } from '../../shared/errors.js';
import { createAuthenticator } from '../src/auth/index.js';
import { createJwtAuthenticator } from '../src/auth/jwt.js';
import { principalOf, requirePermission, resolveCaller } from '../src/auth/middleware.js';
import { ANONYMOUS, type Authenticator } from '../../shared/principal.js';

const run = promisify(execFile);
const bearer = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });

/** The refusal of an authenticate() answer: always a rejected promise (Authenticator's contract), never a value or a throw. */
async function rejection(answer: unknown): Promise<AppError> {
  expect(answer).toBeInstanceOf(Promise);
  const error = await (answer as Promise<unknown>).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(AppError);
  return error as AppError;
}

describe('JWT authentication against a JWKS', () => {
  let issuer: TestIssuer;
  let auth: Authenticator;

  beforeAll(async () => {
    issuer = await startTestIssuer();
    auth = createJwtAuthenticator({ jwksUrl: issuer.jwksUrl, issuer: issuer.issuer, audience: 'feature-api' });
  });
  afterAll(() => issuer.close());

  it('a request without credentials is the anonymous guest', async () => {
    expect(await auth.authenticate({ headers: {} })).toEqual({ id: null, role: 'guest', via: 'anonymous' });
  });

  it('answers at once, without a promise, when nothing is waited for: no credentials, or a token verified before', async () => {
    expect(auth.authenticate({ headers: {} })).toEqual(ANONYMOUS);
    const token = await issuer.sign({ sub: 'dora', role: 'contributor' }, { audience: 'feature-api' });
    const first = auth.authenticate(bearer(token));
    expect(first).toBeInstanceOf(Promise);
    expect(await first).toMatchObject({ id: 'dora', role: 'contributor' });
    const again = auth.authenticate(bearer(token));
    expect(again).not.toBeInstanceOf(Promise);
    expect(again).toEqual(await first);
  });

  it('takes the role from the claim `role` and the user id from `sub`', async () => {
    const token = await issuer.sign({ sub: 'alice', role: 'reviewer', email: 'alice@example.org' }, { audience: 'feature-api' });
    expect(await auth.authenticate(bearer(token))).toEqual({ id: 'alice', role: 'reviewer', via: 'jwt', email: 'alice@example.org' });
  });

  it('takes the role from `ext.role`, where Ory Hydra puts session claims', async () => {
    const token = await issuer.sign({ sub: 'bob', ext: { role: 'admin', name: 'Bob' } }, { audience: 'feature-api' });
    expect(await auth.authenticate(bearer(token))).toMatchObject({ id: 'bob', role: 'admin', name: 'Bob' });
  });

  it('gives a token without a known role the least privilege: guest', async () => {
    const none = await issuer.sign({ sub: 'carol' }, { audience: 'feature-api' });
    const bogus = await issuer.sign({ sub: 'carol', role: 'superuser' }, { audience: 'feature-api' });
    expect((await auth.authenticate(bearer(none))).role).toBe('guest');
    expect((await auth.authenticate(bearer(bogus))).role).toBe('guest');
  });

  it('refuses an expired token with 401 and a Bearer challenge', async () => {
    const token = await issuer.sign({ sub: 'alice', role: 'admin' }, { audience: 'feature-api', expiresIn: Math.floor(Date.now() / 1000) - 60 });
    const error = await rejection(auth.authenticate(bearer(token)));
    expect(error.statusCode).toBe(401);
    expect(error.headers?.['WWW-Authenticate']).toMatch(/^Bearer .*error="invalid_token"/);
    expect(error.message).toMatch(/expired/);
  });

  it('refuses a token of another issuer or for another audience', async () => {
    const otherIssuer = await issuer.sign({ sub: 'alice', role: 'admin' }, { audience: 'feature-api', issuer: 'https://evil.example/' });
    const otherAudience = await issuer.sign({ sub: 'alice', role: 'admin' }, { audience: 'another-api' });
    expect((await rejection(auth.authenticate(bearer(otherIssuer)))).statusCode).toBe(401);
    expect((await rejection(auth.authenticate(bearer(otherAudience)))).statusCode).toBe(401);
  });

  it('refuses a token signed by a key the issuer does not publish, even with a published kid', async () => {
    const { privateKey } = await generateKeyPair('RS256');
    const published = JSON.parse(Buffer.from((await issuer.sign({ sub: 'x' })).split('.')[0]!, 'base64url').toString()) as { kid: string };
    const forged = await new SignJWT({ sub: 'mallory', role: 'admin' })
      .setProtectedHeader({ alg: 'RS256', kid: published.kid })
      .setIssuer(issuer.issuer)
      .setAudience('feature-api')
      .setExpirationTime('5m')
      .sign(privateKey);
    const error = await rejection(auth.authenticate(bearer(forged)));
    expect(error.statusCode).toBe(401);
    expect(error.message).toMatch(/signature/);
  });

  it('refuses unsigned (alg none) and symmetric (HS256) tokens', async () => {
    const unsigned = new UnsecuredJWT({ sub: 'mallory', role: 'admin' }).setIssuer(issuer.issuer).setAudience('feature-api').setExpirationTime('5m').encode();
    const hs = await new SignJWT({ sub: 'mallory', role: 'admin' })
      .setProtectedHeader({ alg: 'HS256' })
      .setIssuer(issuer.issuer)
      .setAudience('feature-api')
      .setExpirationTime('5m')
      .sign(new TextEncoder().encode('a-guessable-shared-secret-of-32-bytes!'));
    expect((await rejection(auth.authenticate(bearer(unsigned)))).statusCode).toBe(401);
    expect((await rejection(auth.authenticate(bearer(hs)))).statusCode).toBe(401);
  });

  it('refuses a malformed Authorization header', async () => {
    for (const header of ['Basic YWxpY2U6c2VjcmV0', 'Bearer', 'Bearer a b', 'bearer "quoted"', 'Bearer not.a.jwt']) {
      expect((await rejection(auth.authenticate({ headers: { authorization: header } }))).statusCode).toBe(401);
    }
  });

  it('accepts tokens signed with a rotated key, fetching the key set again only when a kid is unknown', async () => {
    const before = issuer.jwksFetches;
    const old = await issuer.sign({ sub: 'alice', role: 'contributor' }, { audience: 'feature-api' });
    await auth.authenticate(bearer(old));
    await auth.authenticate(bearer(old));
    expect(issuer.jwksFetches - before).toBeLessThanOrEqual(1);
    await issuer.rotate();
    const fresh = await issuer.sign({ sub: 'alice', role: 'contributor' }, { audience: 'feature-api' });
    // A fresh authenticator, as jose's cooldown (30 s) would delay the refetch in a long-running one.
    const restarted = createJwtAuthenticator({ jwksUrl: issuer.jwksUrl, issuer: issuer.issuer, audience: 'feature-api' });
    expect((await restarted.authenticate(bearer(fresh))).id).toBe('alice');
    expect((await restarted.authenticate(bearer(old))).id).toBe('alice');
    issuer.retireOldKeys();
    const afterRetire = createJwtAuthenticator({ jwksUrl: issuer.jwksUrl, issuer: issuer.issuer, audience: 'feature-api' });
    expect((await rejection(afterRetire.authenticate(bearer(old)))).statusCode).toBe(401);
  });

  it('does not answer a remembered token from memory past its exp', async () => {
    const strict = createJwtAuthenticator({ jwksUrl: issuer.jwksUrl, issuer: issuer.issuer, clockToleranceSeconds: 0 });
    const shortLived = await issuer.sign({ sub: 'alice', role: 'contributor' }, { expiresIn: Math.floor(Date.now() / 1000) + 2 });
    expect((await strict.authenticate(bearer(shortLived))).id).toBe('alice');
    expect((await strict.authenticate(bearer(shortLived))).id).toBe('alice');
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    expect((await rejection(strict.authenticate(bearer(shortLived)))).statusCode).toBe(401);
  });

  it('forgets remembered tokens when the key set is fetched again, so a withdrawn key stops working then', async () => {
    const rotating = await startTestIssuer();
    try {
      const auth2 = createJwtAuthenticator({ jwksUrl: rotating.jwksUrl, issuer: rotating.issuer, keyRefetchCooldownMs: 0 });
      const old = await rotating.sign({ sub: 'alice', role: 'contributor' });
      expect((await auth2.authenticate(bearer(old))).id).toBe('alice');
      expect((await auth2.authenticate(bearer(old))).id).toBe('alice'); // from memory
      await rotating.rotate();
      rotating.retireOldKeys();
      // A token with the new kid makes jose fetch the key set again: the old key is gone from it.
      const fresh = await rotating.sign({ sub: 'bob', role: 'contributor' });
      expect((await auth2.authenticate(bearer(fresh))).id).toBe('bob');
      expect((await rejection(auth2.authenticate(bearer(old)))).statusCode).toBe(401);
    } finally {
      await rotating.close();
    }
  });

  it('verifies a remembered token again once its key set is older than the key cache age', async () => {
    const rotating = await startTestIssuer();
    try {
      const auth2 = createJwtAuthenticator({ jwksUrl: rotating.jwksUrl, issuer: rotating.issuer, keyCacheMaxAgeMs: 300, keyRefetchCooldownMs: 0 });
      const old = await rotating.sign({ sub: 'alice', role: 'contributor' });
      expect((await auth2.authenticate(bearer(old))).id).toBe('alice');
      await rotating.rotate();
      rotating.retireOldKeys();
      await new Promise((resolve) => setTimeout(resolve, 400));
      expect((await rejection(auth2.authenticate(bearer(old)))).statusCode).toBe(401);
    } finally {
      await rotating.close();
    }
  });

  it('answers 503, not 401, when the issuer cannot be reached', async () => {
    const unreachable = createJwtAuthenticator({ jwksUrl: 'http://127.0.0.1:9/jwks.json', issuer: issuer.issuer });
    const token = await issuer.sign({ sub: 'alice', role: 'admin' });
    expect((await rejection(unreachable.authenticate(bearer(token)))).statusCode).toBe(503);
  });
});

describe('the middleware over HTTP', () => {
  let issuer: TestIssuer;
  let base: string;
  let server: Server;

  beforeAll(async () => {
    issuer = await startTestIssuer();
    const app = Fastify();
    app.decorateRequest('principal', undefined);
    const caller = resolveCaller(createJwtAuthenticator({ jwksUrl: issuer.jwksUrl, issuer: issuer.issuer }));
    app.addHook('onRequest', async (request) => caller(request));
    app.get('/who', async (request) => principalOf(request));
    app.post('/things', { onRequest: requirePermission('create', 'create things') }, async (_request, reply) => reply.code(201).send({ ok: true }));
    app.setErrorHandler((error: AppError, _request, reply) => reply.code(error.statusCode ?? 500).headers(error.headers ?? {}).send({ code: error.code }));
    await app.ready();
    server = app.server;
    base = `http://127.0.0.1:${await listen(server, 0, '127.0.0.1')}`;
  });
  afterAll(async () => {
    await closeGracefully(server, 100);
    await issuer.close();
  });

  it('asks an anonymous caller to authenticate (401 + WWW-Authenticate: Bearer) and forbids a guest token (403)', async () => {
    const anonymous = await fetch(`${base}/things`, { method: 'POST' });
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toMatch(/^Bearer/);
    const guest = await fetch(`${base}/things`, { method: 'POST', headers: { authorization: `Bearer ${await issuer.sign({ sub: 'g', role: 'guest' })}` } });
    expect(guest.status).toBe(403);
    const contributor = await fetch(`${base}/things`, { method: 'POST', headers: { authorization: `Bearer ${await issuer.sign({ sub: 'c', role: 'contributor' })}` } });
    expect(contributor.status).toBe(201);
  });

  it('resolves the caller once and hands it to the route', async () => {
    const res = await fetch(`${base}/who`, { headers: { authorization: `Bearer ${await issuer.sign({ sub: 'alice', role: 'reviewer' })}` } });
    expect(await res.json()).toEqual({ id: 'alice', role: 'reviewer', via: 'jwt' });
  });
});

describe('the development key and `npm run token`', () => {
  let dataDir: string;
  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'fmp-devkey-'));
  });
  afterAll(() => rm(dataDir, { recursive: true, force: true }));

  it('prints a token that an API started without AUTH_JWKS_URL accepts, with the requested role and subject', async () => {
    const env = { ...process.env, DATA_DIR: dataDir, NODE_ENV: 'development', AUTH_JWKS_URL: '' };
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'services/api/src/auth/token-cli.ts', '--role', 'reviewer', '--sub', 'alice'], { env });
    const auth = await createAuthenticator({ production: false, dataDir });
    expect(await auth.authenticate(bearer(stdout.trim()))).toMatchObject({ id: 'alice', role: 'reviewer', via: 'jwt' });
    expect((await stat(join(dataDir, 'dev-signing-key.json'))).mode & 0o077).toBe(0);
  });

  it('exits 2 with a message for an unknown role, and refuses production', async () => {
    const env = { ...process.env, DATA_DIR: dataDir };
    const bad = await run(process.execPath, ['--import', 'tsx', 'services/api/src/auth/token-cli.ts', '--role', 'root', '--sub', 'x'], { env }).catch((e: { code: number; stderr: string }) => e);
    expect(bad).toMatchObject({ code: 2 });
    expect((bad as { stderr: string }).stderr).toMatch(/--role must be one of/);
    const prod = await run(process.execPath, ['--import', 'tsx', 'services/api/src/auth/token-cli.ts', '--sub', 'x'], { env: { ...env, NODE_ENV: 'production' } }).catch((e: { code: number }) => e);
    expect(prod).toMatchObject({ code: 2 });
  });

  it('refuses to build a development authenticator in production', async () => {
    await expect(createAuthenticator({ production: true, dataDir })).rejects.toThrow(/AUTH_JWKS_URL/);
  });
});
