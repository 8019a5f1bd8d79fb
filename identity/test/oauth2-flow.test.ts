import { describe, expect, it } from 'vitest';
import * as oidc from 'openid-client';
import { TestBrowser } from './browser.js';
import { useIdentityStack, type IdentityStack } from './harness.js';
import type { TestIdentity } from '../../services/shared/testing/ory/kratos-double.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

const MISSING = lacks('the identity tests on the Kratos/Hydra doubles', requirements.contracts());

/**
 * The authorization code flow with PKCE, driven by openid-client through Hydra (double), our login and
 * consent app, and Kratos (double) — every call between them checked against Ory's OpenAPI specs.
 */

const CALLBACK = 'http://127.0.0.1:9/callback';
let stack: IdentityStack;
useIdentityStack(MISSING, (started) => (stack = started));

let userCounter = 0;
function newUser(extra: { secondFactor?: boolean; role?: string } = {}) {
  userCounter += 1;
  return stack.kratos.addIdentity({ email: `user${userCounter}@example.org`, name: `User ${userCounter}`, password: `correct horse ${userCounter}`, role: extra.role ?? 'reviewer', ...extra });
}

async function relyingParty(options: { firstParty?: boolean; public?: boolean } = {}) {
  const clientId = `client-${Math.random().toString(36).slice(2, 8)}`;
  const client = stack.hydra.addClient({
    client_id: clientId,
    client_name: 'Map Editor',
    redirect_uris: [CALLBACK],
    post_logout_redirect_uris: ['http://127.0.0.1:9/bye'],
    skip_consent: options.firstParty ?? false,
    ...(options.public ? { token_endpoint_auth_method: 'none' } : {}),
  });
  const config = await oidc.discovery(
    new URL(stack.hydra.issuer),
    clientId,
    options.public ? {} : undefined,
    options.public ? oidc.None() : oidc.ClientSecretBasic(client.client_secret as string),
    { execute: [oidc.allowInsecureRequests] },
  );
  return { config, clientId };
}

async function authorize(rp: { config: oidc.Configuration }, browser: TestBrowser, extra: Record<string, string> = {}) {
  const verifier = oidc.randomPKCECodeVerifier();
  const state = oidc.randomState();
  const nonce = oidc.randomNonce();
  const url = oidc.buildAuthorizationUrl(rp.config, {
    redirect_uri: CALLBACK,
    scope: 'openid profile email offline_access',
    code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    state,
    nonce,
    ...extra,
  });
  browser.stopAt = [CALLBACK];
  const start = await browser.go(url.toString());
  return { start, verifier, state, nonce };
}

async function finish(rp: { config: oidc.Configuration }, callbackUrl: string, flow: { verifier: string; state: string; nonce: string }, maxAge?: number) {
  return oidc.authorizationCodeGrant(rp.config, new URL(callbackUrl), {
    pkceCodeVerifier: flow.verifier,
    expectedState: flow.state,
    expectedNonce: flow.nonce,
    idTokenExpected: true,
    ...(maxAge === undefined ? {} : { maxAge }),
  });
}

async function signIn(page: Awaited<ReturnType<TestBrowser['go']>>, browser: TestBrowser, email: string, password: string) {
  expect(page.url).toContain('/self-service/login?flow=');
  return browser.submit(page, '/self-service/login', { identifier: email, password });
}

/** A new browser starts an authorization at `rp` and signs in as `user` on the password form: the page after the form. */
async function signInWithPassword(rp: { config: oidc.Configuration }, user: TestIdentity) {
  const browser = new TestBrowser();
  const flow = await authorize(rp, browser);
  const page = await signIn(flow.start, browser, user.email, user.password);
  return { browser, flow, page };
}

/** A browser that already has a Kratos session of `user`, as after signing in on another subdomain. */
function signedInBrowser(user: TestIdentity, options?: Parameters<IdentityStack['kratos']['createSession']>[1]) {
  const session = stack.kratos.createSession(user.id, options);
  const browser = new TestBrowser();
  browser.cookies.set('ory_kratos_session', session.token);
  return { session, browser };
}

describe.skipIf(MISSING)('authorization code flow', () => {
  it('signs a new browser in through Kratos, asks for consent and issues tokens with email, name and role', async () => {
    const user = newUser({ role: 'reviewer' });
    const rp = await relyingParty();
    const browser = new TestBrowser();
    const flow = await authorize(rp, browser);

    const loginPage = flow.start;
    expect(loginPage.status).toBe(200);
    expect(loginPage.body).toContain('<label for="identifier">');
    const consentPage = await signIn(loginPage, browser, user.email, user.password);
    expect(consentPage.url).toContain('/consent?consent_challenge=');
    expect(consentPage.body).toContain('Map Editor');
    expect(consentPage.body).toContain('Your e-mail address');

    const callback = await browser.submit(consentPage, '/consent', {}, { name: 'decision', value: 'allow' });
    expect(callback.url.startsWith(CALLBACK)).toBe(true);

    const tokens = await finish(rp, callback.url, flow);
    const claims = tokens.claims();
    expect(claims).toMatchObject({ sub: user.id, email: user.email, name: user.name, role: 'reviewer' });
    expect(tokens.refresh_token).toBeTruthy();

    const userinfo = await oidc.fetchUserInfo(rp.config, tokens.access_token, user.id);
    expect(userinfo).toMatchObject({ email: user.email, role: 'reviewer' });

    const introspected = (await stack.ory.oauth2.introspectOAuth2Token({ token: tokens.access_token })).data;
    expect(introspected).toMatchObject({ active: true, sub: user.id, ext: { role: 'reviewer', email: user.email, name: user.name } });

    const refreshed = await oidc.refreshTokenGrant(rp.config, tokens.refresh_token as string);
    expect(refreshed.access_token).not.toBe(tokens.access_token);
  });

  it('verifies the ID token signature against the published JWKS', async () => {
    const user = newUser();
    const rp = await relyingParty({ firstParty: true });
    oidc.enableNonRepudiationChecks(rp.config);
    const { flow, page: callback } = await signInWithPassword(rp, user);
    const tokens = await finish(rp, callback.url, flow);
    expect(tokens.claims()?.sub).toBe(user.id);
  });

  it('skips the consent screen for a first-party client', async () => {
    const user = newUser();
    const rp = await relyingParty({ firstParty: true });
    const { flow, page: callback } = await signInWithPassword(rp, user);
    expect(callback.url.startsWith(CALLBACK)).toBe(true);
    expect(callback.hops.some((h) => h.url.includes('/consent?'))).toBe(true);
    await finish(rp, callback.url, flow);
  });

  it('completes a public client with PKCE and refuses one without it', async () => {
    const user = newUser();
    const rp = await relyingParty({ public: true, firstParty: true });
    const { browser, flow, page: callback } = await signInWithPassword(rp, user);
    const tokens = await finish(rp, callback.url, flow);
    expect(tokens.access_token).toBeTruthy();

    const withoutPkce = oidc.buildAuthorizationUrl(rp.config, { redirect_uri: CALLBACK, scope: 'openid', state: 's' });
    browser.stopAt = [CALLBACK];
    const refused = await browser.go(withoutPkce.toString());
    expect(new URL(refused.url).searchParams.get('error')).toBe('invalid_request');
  });

  it('denying consent returns access_denied to the client', async () => {
    const user = newUser();
    const rp = await relyingParty();
    const { browser, page: consentPage } = await signInWithPassword(rp, user);
    const callback = await browser.submit(consentPage, '/consent', {}, { name: 'decision', value: 'deny' });
    expect(new URL(callback.url).searchParams.get('error')).toBe('access_denied');
  });
});

describe.skipIf(MISSING)('skip and remember', () => {
  it('a second authorization in the same browser skips login and consent without asking Kratos again', async () => {
    const user = newUser();
    const rp = await relyingParty();
    const { browser, flow: first, page: consentPage } = await signInWithPassword(rp, user);
    const callback = await browser.submit(consentPage, '/consent', {}, { name: 'decision', value: 'allow' });
    await finish(rp, callback.url, first);

    const whoamiBefore = stack.kratos.public.count('toSession');
    const second = await authorize(rp, browser);
    expect(second.start.url.startsWith(CALLBACK)).toBe(true);
    expect(stack.kratos.public.count('toSession')).toBe(whoamiBefore);
    const tokens = await finish(rp, second.start.url, second);
    expect(tokens.claims()?.sub).toBe(user.id);
  });

  it('a browser with a Kratos session from another subdomain is signed in without a form', async () => {
    const user = newUser();
    const { browser } = signedInBrowser(user);
    const rp = await relyingParty({ firstParty: true });
    const flow = await authorize(rp, browser);
    expect(flow.start.url.startsWith(CALLBACK)).toBe(true);
    const tokens = await finish(rp, flow.start.url, flow);
    expect(tokens.claims()?.sub).toBe(user.id);
  });
});

describe.skipIf(MISSING)('fresh authentication', () => {
  it('prompt=login makes a signed-in user enter the password again, then proceeds', async () => {
    const user = newUser();
    const { session, browser } = signedInBrowser(user, { authenticatedSecondsAgo: 30 });
    const rp = await relyingParty({ firstParty: true });
    const flow = await authorize(rp, browser, { prompt: 'login' });
    expect(flow.start.url).toContain('/self-service/login?flow=');
    expect(flow.start.hops.some((h) => h.url.includes('refresh=true'))).toBe(true);
    expect(flow.start.body).toContain('Confirm it is you');
    const before = session.authenticatedAt;
    const callback = await signIn(flow.start, browser, user.email, user.password);
    expect(callback.url.startsWith(CALLBACK)).toBe(true);
    expect(session.authenticatedAt).toBeGreaterThan(before);
    await finish(rp, callback.url, flow);
  });

  it('a tampered fresh_after marker does not count as a re-login', async () => {
    const user = newUser();
    const { browser } = signedInBrowser(user, { authenticatedSecondsAgo: 30 });
    const rp = await relyingParty({ firstParty: true });
    browser.stopAt = [CALLBACK, `${stack.kratos.public.url}/self-service/login/browser`];
    const url = oidc.buildAuthorizationUrl(rp.config, { redirect_uri: CALLBACK, scope: 'openid', prompt: 'login', state: 'x', code_challenge: await oidc.calculatePKCECodeChallenge(oidc.randomPKCECodeVerifier()), code_challenge_method: 'S256' });
    const toKratos = await browser.go(url.toString());
    const returnTo = new URL(new URL(toKratos.url).searchParams.get('return_to') as string);
    returnTo.searchParams.set('fresh_after', '0.forged');
    const again = await browser.go(returnTo.toString());
    expect(again.url).toContain('/self-service/login/browser');
    expect(again.url).toContain('refresh=true');
  });

  it('max_age older than the session forces a re-login; the ID token carries auth_time', async () => {
    const user = newUser();
    const { browser } = signedInBrowser(user, { authenticatedSecondsAgo: 7200 });
    const rp = await relyingParty({ firstParty: true });
    const flow = await authorize(rp, browser, { max_age: '600' });
    expect(flow.start.body).toContain('Confirm it is you');
    const callback = await signIn(flow.start, browser, user.email, user.password);
    const tokens = await finish(rp, callback.url, flow, 600);
    expect(typeof tokens.claims()?.auth_time).toBe('number');
  });

  it('max_age within the session age signs in without a form', async () => {
    const user = newUser();
    const { browser } = signedInBrowser(user, { authenticatedSecondsAgo: 60 });
    const rp = await relyingParty({ firstParty: true });
    const flow = await authorize(rp, browser, { max_age: '600' });
    expect(flow.start.url.startsWith(CALLBACK)).toBe(true);
  });

  it('a user with a second factor but an aal1 session is sent to the aal2 login', async () => {
    const user = newUser({ secondFactor: true });
    const { browser } = signedInBrowser(user, { aal: 'aal1' });
    const rp = await relyingParty({ firstParty: true });
    const flow = await authorize(rp, browser);
    expect(flow.start.hops.some((h) => h.url.includes('/self-service/login/browser') && h.url.includes('aal=aal2'))).toBe(true);
    // No accounts UI in this stack: a clear page instead of a password form that cannot do aal2.
    expect(flow.start.status).toBe(501);
    expect(flow.start.body).toContain('IDENTITY_ACCOUNTS_URL');
  });
});

describe.skipIf(MISSING)('expired and reused challenges', () => {
  it('a login challenge used twice (back button) is followed via redirect_to, not shown as an error', async () => {
    const user = newUser();
    const { browser } = signedInBrowser(user);
    const rp = await relyingParty({ firstParty: true });
    const flow = await authorize(rp, browser);
    const loginHop = flow.start.hops.find((h) => h.url.includes('/login?login_challenge='));
    expect(loginHop).toBeDefined();

    const replay = await browser.go((loginHop as { url: string }).url);
    // 410 from Hydra → the original authorization URL → a new challenge → Hydra remembers → callback.
    expect(replay.url.startsWith(CALLBACK)).toBe(true);
    expect(replay.hops[1]?.url).toContain('/oauth2/auth?');
  });

  it('a consent challenge used twice is followed via redirect_to', async () => {
    const user = newUser();
    const rp = await relyingParty();
    const { browser, page: consentPage } = await signInWithPassword(rp, user);
    await browser.submit(consentPage, '/consent', {}, { name: 'decision', value: 'allow' });
    const again = await browser.submit(consentPage, '/consent', {}, { name: 'decision', value: 'allow' });
    expect(again.hops[1]?.url).toContain('/oauth2/auth?');
    expect(again.status).not.toBe(500);
  });

  it('an unknown challenge shows a page, not a 500', async () => {
    const browser = new TestBrowser();
    const page = await browser.go(`${stack.appUrl}/login?login_challenge=does-not-exist`);
    expect(page.status).toBe(404);
    expect(page.body).toContain('unknown or has expired');
  });

  it('a missing challenge is a 400 page', async () => {
    const page = await new TestBrowser().go(`${stack.appUrl}/consent`);
    expect(page.status).toBe(400);
  });
});

describe.skipIf(MISSING)('logout', () => {
  it('RP-initiated logout ends the Kratos session and Hydra forgets the login', async () => {
    const user = newUser();
    const rp = await relyingParty({ firstParty: true });
    const { browser, flow, page: callback } = await signInWithPassword(rp, user);
    const tokens = await finish(rp, callback.url, flow);
    const kratosCookie = browser.cookies.get('ory_kratos_session') as string;
    expect((await stack.ory.frontend.toSession({ cookie: `ory_kratos_session=${kratosCookie}` })).status).toBe(200);

    const endSession = oidc.buildEndSessionUrl(rp.config, { id_token_hint: tokens.id_token as string, post_logout_redirect_uri: 'http://127.0.0.1:9/bye', state: 'st' });
    browser.stopAt = ['http://127.0.0.1:9/bye'];
    const done = await browser.go(endSession.toString());
    expect(done.url).toBe('http://127.0.0.1:9/bye?state=st');
    expect(stack.kratos.admin.count('disableSession')).toBeGreaterThan(0);
    await expect(stack.ory.frontend.toSession({ cookie: `ory_kratos_session=${kratosCookie}` })).rejects.toMatchObject({ response: { status: 401 } });

    const introspected = (await stack.ory.oauth2.introspectOAuth2Token({ token: tokens.access_token })).data;
    expect(introspected.active).toBe(false);
    const next = await authorize(rp, browser);
    expect(next.start.url).toContain('/self-service/login?flow=');
  });

  it('a logout without id_token_hint asks for confirmation with a CSRF-protected form', async () => {
    const user = newUser();
    const { session, browser } = signedInBrowser(user);
    const confirm = await browser.go(`${stack.hydra.public.url}/oauth2/sessions/logout`);
    expect(confirm.url).toContain('/logout?logout_challenge=');
    expect(confirm.body).toContain('Sign out');
    expect(session.active).toBe(true);

    browser.stopAt = ['http://127.0.0.1:9/'];
    const forged = await browser.submit(confirm, '/logout', { _csrf: 'forged' }, { name: 'decision', value: 'yes' });
    expect(forged.status).toBe(403);
    expect(session.active).toBe(true);

    const done = await browser.submit(confirm, '/logout', {}, { name: 'decision', value: 'yes' });
    expect(done.url.startsWith('http://127.0.0.1:9/after-logout')).toBe(true);
    expect(session.active).toBe(false);
  });
});
