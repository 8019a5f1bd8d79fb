import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTokenIntrospector } from '../../services/shared/ory/introspection.js';
import { createOryClients, type OryClients } from '../../services/shared/ory/clients.js';
import { createSessionResolver } from '../../services/shared/ory/session-resolver.js';
import { TestClock } from '../../services/shared/testing/ory/clock.js';
import { HydraDouble } from '../../services/shared/testing/ory/hydra-double.js';
import { KratosDouble } from '../../services/shared/testing/ory/kratos-double.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

const MISSING = lacks('the identity tests on the Kratos/Hydra doubles', requirements.contracts());

/**
 * The pieces the API will use: session cookie → caller (whoami, cached briefly) and opaque access token →
 * caller (introspection, cached at most until expiry). Run against the contract-checked doubles.
 */

let clock: TestClock;
let kratos: KratosDouble;
let hydra: HydraDouble;
let ory: OryClients;

beforeAll(async () => {
  if (MISSING) return;
  clock = new TestClock();
  kratos = await new KratosDouble({ clock, loginUiUrl: 'http://x/login', allowedReturnUrls: [] }).start();
  hydra = await new HydraDouble({ clock, loginUrl: 'http://x/login', consentUrl: 'http://x/consent', logoutUrl: 'http://x/logout', postLogoutRedirect: 'http://x/', accessTokenLifespanSeconds: 120 }).start();
  ory = createOryClients({ kratosPublicUrl: kratos.public.url, kratosAdminUrl: kratos.admin.url, hydraAdminUrl: hydra.admin.url });
});
afterAll(async () => {
  if (MISSING) return;
  await Promise.all([kratos.close(), hydra.close()]);
});
afterEach(() => {
  if (MISSING) return;
  expect([...kratos.violations, ...hydra.violations]).toEqual([]);
});

describe.skipIf(MISSING)('session resolver', () => {
  it('resolves the Kratos cookie to id, email, name and the role from metadata_public', async () => {
    const resolver = createSessionResolver({ frontend: ory.frontend, now: clock.now });
    const user = kratos.addIdentity({ email: 'r@example.org', name: 'Rita', password: 'x', role: 'admin' });
    const session = kratos.createSession(user.id);
    const result = await resolver.resolve({ cookie: `a=b; ory_kratos_session=${session.token}` });
    expect(result).toMatchObject({ id: user.id, email: 'r@example.org', name: 'Rita', role: 'admin', via: 'session', sessionId: session.id });
  });

  it('a user without a role in metadata_public is a guest', async () => {
    const resolver = createSessionResolver({ frontend: ory.frontend, now: clock.now });
    const user = kratos.addIdentity({ email: 'n@example.org', name: 'N', password: 'x' });
    const result = await resolver.resolve({ cookie: `ory_kratos_session=${kratos.createSession(user.id).token}` });
    expect(result).toMatchObject({ role: 'guest' });
  });

  it('asks Kratos once per cookie within the TTL, also for concurrent requests, and again after it', async () => {
    const resolver = createSessionResolver({ frontend: ory.frontend, ttlMs: 10_000, now: clock.now });
    const user = kratos.addIdentity({ email: 'c@example.org', name: 'C', password: 'x', role: 'reviewer' });
    const cookie = `ory_kratos_session=${kratos.createSession(user.id).token}`;
    const before = kratos.public.count('toSession');
    await Promise.all(Array.from({ length: 10 }, () => resolver.resolve({ cookie })));
    await resolver.resolve({ cookie });
    expect(kratos.public.count('toSession') - before).toBe(1);
    clock.advance(11);
    await resolver.resolve({ cookie });
    expect(kratos.public.count('toSession') - before).toBe(2);
  });

  it('keeps at most maxEntries cookies, dropping the one cached longest ago first', async () => {
    const resolver = createSessionResolver({ frontend: ory.frontend, ttlMs: 10_000, maxEntries: 2, now: clock.now });
    const user = kratos.addIdentity({ email: 'm@example.org', name: 'M', password: 'x', role: 'reviewer' });
    const cookies = Array.from({ length: 3 }, () => `ory_kratos_session=${kratos.createSession(user.id).token}`);
    const asked = async (cookie: string): Promise<number> => {
      const before = kratos.public.count('toSession');
      await resolver.resolve({ cookie });
      return kratos.public.count('toSession') - before;
    };
    for (const cookie of cookies) expect(await asked(cookie)).toBe(1);
    // Reading the second cookie does not make it newer: the second is dropped next, not the third.
    expect(await asked(cookies[1]!)).toBe(0);
    expect(await asked(cookies[0]!)).toBe(1); // dropped for the third; cached again, dropping the second
    expect(await asked(cookies[2]!)).toBe(0);
    expect(await asked(cookies[1]!)).toBe(1);
  });

  it('an ended session stops working once the short cache runs out', async () => {
    const resolver = createSessionResolver({ frontend: ory.frontend, ttlMs: 5_000, now: clock.now });
    const user = kratos.addIdentity({ email: 'l@example.org', name: 'L', password: 'x', role: 'admin' });
    const session = kratos.createSession(user.id);
    const cookie = `ory_kratos_session=${session.token}`;
    expect(await resolver.resolve({ cookie })).toMatchObject({ role: 'admin' });
    await ory.identity.disableSession({ id: session.id });
    clock.advance(6);
    expect(await resolver.resolve({ cookie })).toBe('anonymous');
  });

  it('never caches a session past its own expiry', async () => {
    const resolver = createSessionResolver({ frontend: ory.frontend, ttlMs: 3_600_000, now: clock.now });
    const user = kratos.addIdentity({ email: 'x@example.org', name: 'X', password: 'x', role: 'admin' });
    const session = kratos.createSession(user.id);
    session.expiresAt = clock.now() + 2_000;
    const cookie = `ory_kratos_session=${session.token}`;
    expect(await resolver.resolve({ cookie })).toMatchObject({ role: 'admin' });
    clock.advance(3);
    expect(await resolver.resolve({ cookie })).toBe('anonymous');
  });

  it('reports a pending second factor and does not cache it', async () => {
    const resolver = createSessionResolver({ frontend: ory.frontend, now: clock.now });
    const user = kratos.addIdentity({ email: 'm@example.org', name: 'M', password: 'x', role: 'admin', secondFactor: true });
    const session = kratos.createSession(user.id, { aal: 'aal1' });
    const cookie = `ory_kratos_session=${session.token}`;
    expect(await resolver.resolve({ cookie })).toBe('second-factor-required');
    session.aal = 'aal2';
    expect(await resolver.resolve({ cookie })).toMatchObject({ role: 'admin' });
  });

  it('without a Kratos cookie it is anonymous without asking Kratos', async () => {
    const resolver = createSessionResolver({ frontend: ory.frontend, now: clock.now });
    const before = kratos.public.count('toSession');
    expect(await resolver.resolve({ cookie: 'theme=dark' })).toBe('anonymous');
    expect(await resolver.resolve({})).toBe('anonymous');
    expect(kratos.public.count('toSession')).toBe(before);
  });
});

async function issueToken(role: string | undefined) {
  // Drive the admin API the way the consent app does, then redeem the code at the token endpoint.
  const client = hydra.addClient({ client_id: `c-${Math.random().toString(36).slice(2)}`, redirect_uris: ['http://127.0.0.1:9/cb'], token_endpoint_auth_method: 'client_secret_post' });
  const auth = await fetch(`${hydra.public.url}/oauth2/auth?client_id=${client.client_id}&response_type=code&scope=openid&state=abcdefgh&redirect_uri=${encodeURIComponent('http://127.0.0.1:9/cb')}`, { redirect: 'manual' });
  const loginChallenge = new URL(auth.headers.get('location') as string).searchParams.get('login_challenge') as string;
  const afterLogin = (await ory.oauth2.acceptOAuth2LoginRequest({ loginChallenge, acceptOAuth2LoginRequest: { subject: 'user-1' } })).data.redirect_to;
  const toConsent = await fetch(afterLogin, { redirect: 'manual' });
  const consentChallenge = new URL(toConsent.headers.get('location') as string).searchParams.get('consent_challenge') as string;
  const afterConsent = (await ory.oauth2.acceptOAuth2ConsentRequest({ consentChallenge, acceptOAuth2ConsentRequest: { grant_scope: ['openid'], session: { access_token: role ? { role, email: 'u@example.org' } : {} } } })).data.redirect_to;
  const toCallback = await fetch(afterConsent, { redirect: 'manual' });
  const code = new URL(toCallback.headers.get('location') as string).searchParams.get('code') as string;
  const token = await fetch(`${hydra.public.url}/oauth2/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: 'http://127.0.0.1:9/cb', client_id: client.client_id, client_secret: client.client_secret as string }),
  });
  return ((await token.json()) as { access_token: string }).access_token;
}

describe.skipIf(MISSING)('token introspection', () => {
  it('resolves an active token to its subject and the role from the token session (ext)', async () => {
    const introspector = createTokenIntrospector({ oauth2: ory.oauth2, now: clock.now });
    const token = await issueToken('reviewer');
    const result = await introspector.introspect(token);
    expect(result).toMatchObject({ active: true, principal: { id: 'user-1', role: 'reviewer', via: 'introspection', email: 'u@example.org', scopes: ['openid'] } });
  });

  it('a token without a role claim is a guest; an unknown token is inactive', async () => {
    const introspector = createTokenIntrospector({ oauth2: ory.oauth2, now: clock.now });
    expect(await introspector.introspect(await issueToken(undefined))).toMatchObject({ active: true, principal: { role: 'guest' } });
    expect(await introspector.introspect('ory_at_not-a-token')).toEqual({ active: false });
  });

  it('caches an active token but never past its expiry', async () => {
    const introspector = createTokenIntrospector({ oauth2: ory.oauth2, now: clock.now, maxCacheMs: 3_600_000 });
    const token = await issueToken('admin');
    const before = hydra.admin.count('introspectOAuth2Token');
    await Promise.all([introspector.introspect(token), introspector.introspect(token), introspector.introspect(token)]);
    clock.advance(60);
    expect(await introspector.introspect(token)).toMatchObject({ active: true });
    expect(hydra.admin.count('introspectOAuth2Token') - before).toBe(1);
    clock.advance(61); // the token lives 120 s
    expect(await introspector.introspect(token)).toEqual({ active: false });
    expect(hydra.admin.count('introspectOAuth2Token') - before).toBe(2);
  });

  it('sees a revocation once maxCacheMs has passed', async () => {
    const introspector = createTokenIntrospector({ oauth2: ory.oauth2, now: clock.now, maxCacheMs: 10_000 });
    const token = await issueToken('admin');
    expect(await introspector.introspect(token)).toMatchObject({ active: true });
    hydra.revoke(token);
    expect(await introspector.introspect(token)).toMatchObject({ active: true });
    clock.advance(11);
    expect(await introspector.introspect(token)).toEqual({ active: false });
  });
});
