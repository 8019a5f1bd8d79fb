import * as oidc from 'openid-client';
import { Secret, TOTP } from 'otpauth';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { contractViolations, startIdentityStack, type IdentityStack } from './harness.js';
import { binary, lacks, requirements } from '../../test/helpers/requirements.js';
import { jsonnetMapper } from '../../test/doubles/ory/jsonnet-mapper.js';
import { OidcStandIn } from '../../test/doubles/ory/oidc-provider.js';
import type { KratosOidcProvider } from '../../services/shared/testing/ory/kratos-double.js';

/**
 * Social sign-in and the second factor as a person does them, in Chromium: a client of Hydra sends the
 * browser to our login page, which shows the city's provider (from the flow's UI nodes); the provider is
 * a real OpenID provider (oidc-provider on loopback) whose own pages take the person's login; Kratos (the
 * double) registers the person from the mapped claims the first time and signs the same identity in the
 * second time; an e-mail that already belongs to an account is linked only after signing in to that
 * account. A client that asks for `acr_values=aal2` gets the TOTP step-up and a token stating aal2.
 */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const MISSING = lacks('the social sign-in browser tests', requirements.chromium(), requirements.contracts(), binary('jsonnet', 'apt-get install jsonnet: Kratos\' claims mappers are Jsonnet'));
const CALLBACK = 'http://127.0.0.1:9/callback';
const PROVIDER_ID = 'city';

describe.skipIf(MISSING)('social sign-in and the second factor in a browser', () => {
  let stack: IdentityStack;
  let provider: OidcStandIn;
  let browser: Browser;
  const providers: KratosOidcProvider[] = [];

  beforeAll(async () => {
    // As identity/config/kratos.yml: whoami at aal1 (the API asks for aal2 where it matters), oidc on.
    stack = await startIdentityStack({}, { whoamiRequiredAal: 'aal1', oidcProviders: providers });
    provider = await new OidcStandIn({ clientId: 'kratos-at-city', clientSecret: 'stand-in-client-secret', redirectUris: () => [stack.kratos.callbackUrl(PROVIDER_ID)] }).start();
    providers.push({ id: PROVIDER_ID, label: 'City Keycloak', issuerUrl: provider.issuer, clientId: 'kratos-at-city', clientSecret: 'stand-in-client-secret', scope: ['openid', 'email', 'profile', 'role'], mapClaims: jsonnetMapper('generic') });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await provider?.close();
    await stack?.close();
  });
  afterEach(() => {
    expect(contractViolations(stack)).toEqual([]);
  });

  /** A first-party client of Hydra, its authorization URL, and the code exchange once the browser is back. */
  async function client(extra: Record<string, string> = {}) {
    const clientId = `app-${providers.length}-${Math.random().toString(36).slice(2, 8)}`;
    const registered = stack.hydra.addClient({ client_id: clientId, client_name: 'Map Editor', redirect_uris: [CALLBACK], skip_consent: true });
    const config = await oidc.discovery(new URL(stack.hydra.issuer), clientId, undefined, oidc.ClientSecretBasic(registered.client_secret as string), { execute: [oidc.allowInsecureRequests] });
    const verifier = oidc.randomPKCECodeVerifier();
    const state = oidc.randomState();
    const url = oidc.buildAuthorizationUrl(config, { redirect_uri: CALLBACK, scope: 'openid profile email', code_challenge: await oidc.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256', state, ...extra });
    return { url: url.toString(), exchange: (callback: string) => oidc.authorizationCodeGrant(config, new URL(callback), { pkceCodeVerifier: verifier, expectedState: state, idTokenExpected: true }) };
  }

  /** A fresh browser profile whose arrival at the client's callback is the result. */
  async function freshPage(): Promise<{ page: Page; callback: () => Promise<string> }> {
    const context = await browser.newContext();
    const page = await context.newPage();
    let resolve: (url: string) => void;
    const arrived = new Promise<string>((r) => (resolve = r));
    await page.route(`${CALLBACK}**`, async (route) => {
      resolve(route.request().url());
      await route.fulfill({ status: 200, contentType: 'text/plain', body: 'signed in' });
    });
    return { page, callback: () => arrived };
  }

  /** On the provider's own pages (oidc-provider's development interactions): the login, then its consent. */
  async function signInAtProvider(page: Page, login: string): Promise<void> {
    await page.waitForURL(`${provider.issuer}/**`);
    await page.locator('input[name="login"]').fill(login);
    await page.locator('input[name="password"]').fill('whatever the provider checks');
    await page.getByRole('button', { name: 'Sign-in' }).click();
    await page.getByRole('button', { name: 'Continue' }).click();
  }

  it('first sign-in registers the person with the mapped e-mail and name; the second is the same identity; no provider claim becomes a role', async () => {
    provider.addAccount({ sub: 'erika', email: 'erika@city.example', email_verified: true, name: 'Erika Muster', extra: { role: 'admin', groups: ['admins'] } });
    const before = stack.kratos.identities.size;

    const first = await client();
    const one = await freshPage();
    await one.page.goto(first.url);
    // The login page lists the provider the operator configured, from Kratos' UI nodes.
    await one.page.getByRole('button', { name: 'Sign in with City Keycloak' }).click();
    await signInAtProvider(one.page, 'erika');
    const firstTokens = await first.exchange(await one.callback());
    const claims = firstTokens.claims()!;
    expect(claims).toMatchObject({ email: 'erika@city.example', name: 'Erika Muster', email_verified: true, role: 'guest' });
    expect(stack.kratos.identities.size).toBe(before + 1);
    const identity = stack.kratos.identities.get(claims.sub)!;
    expect(identity).toMatchObject({ email: 'erika@city.example', verified: true, oidc: [{ provider: PROVIDER_ID, subject: 'erika' }] });
    expect(identity.role).toBeUndefined();

    const second = await client();
    const two = await freshPage();
    await two.page.goto(second.url);
    await two.page.getByRole('button', { name: 'Sign in with City Keycloak' }).click();
    await signInAtProvider(two.page, 'erika');
    const secondTokens = await second.exchange(await two.callback());
    expect(secondTokens.claims()!.sub).toBe(claims.sub);
    expect(stack.kratos.identities.size).toBe(before + 1);
    await Promise.all([one.page.context().close(), two.page.context().close()]);
  });

  it('an address the provider did not verify makes an unverified account; the token says so', async () => {
    provider.addAccount({ sub: 'neu', email: 'neu@city.example', email_verified: false, name: 'Nora Neu' });
    const flow = await client();
    const tab = await freshPage();
    await tab.page.goto(flow.url);
    await tab.page.getByRole('button', { name: 'Sign in with City Keycloak' }).click();
    await signInAtProvider(tab.page, 'neu');
    const tokens = await flow.exchange(await tab.callback());
    expect(tokens.claims()).toMatchObject({ email: 'neu@city.example', email_verified: false });
    const introspected = await stack.ory.oauth2.introspectOAuth2Token({ token: tokens.access_token });
    expect(introspected.data.ext).toMatchObject({ email_verified: false, acr: 'aal1', amr: ['oidc'] });
    await tab.page.context().close();
  });

  it('a provider account with the e-mail of an existing account is linked only after signing in to that account', async () => {
    const lena = stack.kratos.addIdentity({ email: 'lena@city.example', name: 'Lena', password: 'lenas own password', role: 'contributor' });
    provider.addAccount({ sub: 'lena-at-city', email: 'lena@city.example', email_verified: true, name: 'Lena from the provider' });
    const before = stack.kratos.identities.size;

    const flow = await client();
    const tab = await freshPage();
    await tab.page.goto(flow.url);
    await tab.page.getByRole('button', { name: 'Sign in with City Keycloak' }).click();
    await signInAtProvider(tab.page, 'lena-at-city');
    // Back on our login page: Kratos' notice, the account's e-mail filled in, no silent merge yet.
    await tab.page.waitForURL(/\/self-service\/login\?flow=/);
    await expect(tab.page.getByRole('status').textContent()).resolves.toContain('already used by another account');
    await expect(tab.page.getByLabel('E-mail').inputValue()).resolves.toBe('lena@city.example');
    expect(stack.kratos.identities.get(lena.id)!.oidc).toBeUndefined();
    await tab.page.getByLabel('Password').fill(lena.password);
    await tab.page.getByRole('button', { name: 'Sign in', exact: true }).click();
    const tokens = await flow.exchange(await tab.callback());
    expect(tokens.claims()).toMatchObject({ sub: lena.id, role: 'contributor' });
    expect(stack.kratos.identities.get(lena.id)!.oidc).toEqual([{ provider: PROVIDER_ID, subject: 'lena-at-city' }]);
    expect(stack.kratos.identities.size).toBe(before);

    // From now on the provider signs Lena in directly.
    const again = await client();
    const next = await freshPage();
    await next.page.goto(again.url);
    await next.page.getByRole('button', { name: 'Sign in with City Keycloak' }).click();
    await signInAtProvider(next.page, 'lena-at-city');
    expect((await again.exchange(await next.callback())).claims()!.sub).toBe(lena.id);
    await Promise.all([tab.page.context().close(), next.page.context().close()]);
  });

  it('a client asking for acr_values=aal2 sends a password-only session through the TOTP step-up; the token states aal2', async () => {
    const secret = new Secret({ size: 20 });
    const rita = stack.kratos.addIdentity({ email: 'rita@city.example', name: 'Rita Reviewer', password: 'ritas long password', role: 'reviewer', totpSecret: secret.base32 });
    const totp = new TOTP({ secret, digits: 6, period: 30 });

    // Signed in with the password only: the token says aal1.
    const plain = await client();
    const tab = await freshPage();
    await tab.page.goto(plain.url);
    await tab.page.getByLabel('E-mail').fill(rita.email);
    await tab.page.getByLabel('Password').fill(rita.password);
    await tab.page.getByRole('button', { name: 'Sign in', exact: true }).click();
    const aal1 = await plain.exchange(await tab.callback());
    expect((await stack.ory.oauth2.introspectOAuth2Token({ token: aal1.access_token })).data.ext).toMatchObject({ acr: 'aal1', amr: ['password'] });

    // The step-up: same browser, the client asks for aal2; Kratos' aal2 flow asks for the code.
    const stepUp = await client({ acr_values: 'aal2' });
    let arrived: (url: string) => void;
    const back = new Promise<string>((r) => (arrived = r));
    await tab.page.unroute(`${CALLBACK}**`);
    await tab.page.route(`${CALLBACK}**`, async (route) => {
      arrived(route.request().url());
      await route.fulfill({ status: 200, contentType: 'text/plain', body: 'stepped up' });
    });
    await tab.page.goto(stepUp.url);
    await tab.page.getByLabel('Authentication code').fill('000000' === totp.generate({ timestamp: stack.clock.now() }) ? '111111' : '000000');
    await tab.page.getByRole('button', { name: 'Confirm' }).click();
    await expect(tab.page.getByRole('alert').textContent()).resolves.toContain('authentication code is invalid');
    await tab.page.getByLabel('Authentication code').fill(totp.generate({ timestamp: stack.clock.now() }));
    await tab.page.getByRole('button', { name: 'Confirm' }).click();
    const aal2 = await stepUp.exchange(await back);
    expect((await stack.ory.oauth2.introspectOAuth2Token({ token: aal2.access_token })).data.ext).toMatchObject({ acr: 'aal2', amr: ['password', 'totp'] });
    await tab.page.context().close();
  });
});
