import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as oidc from 'openid-client';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { contractViolations, startIdentityStack, type IdentityStack } from './harness.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';


/**
 * The sign-in as a person does it: a real Chromium follows Hydra's redirects to our login page, types
 * the e-mail and password, presses "Sign in", allows the consent screen, and lands on the client's
 * callback with a code that openid-client exchanges for tokens. This proves what the HTTP-level tests
 * cannot: the pages work in a browser (form posts, CSRF cookies across the redirect chain, the CSP).
 * Kratos and Hydra are the contract-checked doubles.
 */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const MISSING = lacks('the browser sign-in test', requirements.chromium(), requirements.contracts());

const CALLBACK = 'http://127.0.0.1:9/callback';

describe.skipIf(MISSING)('signing in with a real browser', () => {
  let stack: IdentityStack;
  let browser: Browser;

  beforeAll(async () => {
    stack = await startIdentityStack();
    // Flags as for any headless Chromium on a closed network: no background connections, no sandbox as root.
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await stack?.close();
  });

  it('a reviewer signs in through the login and consent pages and the client gets tokens with its role', async () => {
    const user = stack.kratos.addIdentity({ email: 'rita@example.org', name: 'Rita Reviewer', password: 'correct horse battery', role: 'reviewer' });
    const client = stack.hydra.addClient({ client_id: 'map-editor', client_name: 'Map Editor', redirect_uris: [CALLBACK], skip_consent: false });
    const config = await oidc.discovery(new URL(stack.hydra.issuer), 'map-editor', undefined, oidc.ClientSecretBasic(client.client_secret as string), {
      execute: [oidc.allowInsecureRequests],
    });
    const verifier = oidc.randomPKCECodeVerifier();
    const state = oidc.randomState();
    const authorizeUrl = oidc.buildAuthorizationUrl(config, {
      redirect_uri: CALLBACK,
      scope: 'openid profile email',
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      state,
    });

    const page = await browser.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));
    page.on('console', (message) => {
      if (message.type() === 'error') pageErrors.push(message.text());
    });
    // The client's callback is not a server here: the browser's arrival there is the result.
    let callbackUrl = '';
    await page.route(`${CALLBACK}**`, async (route) => {
      callbackUrl = route.request().url();
      await route.fulfill({ status: 200, contentType: 'text/plain', body: 'signed in' });
    });

    await page.goto(authorizeUrl.toString());
    await page.getByLabel('E-mail').fill(user.email);
    await page.getByLabel('Password').fill(user.password);
    await page.screenshot({ path: join(tmpdir(), 'identity-login-page.png') });
    await page.getByRole('button', { name: 'Sign in' }).click();

    await page.waitForURL(/\/consent\?consent_challenge=/);
    expect(await page.textContent('body')).toContain('Map Editor');
    await page.getByRole('button', { name: 'Allow' }).click();
    await page.waitForURL(`${CALLBACK}**`);

    const tokens = await oidc.authorizationCodeGrant(config, new URL(callbackUrl), { pkceCodeVerifier: verifier, expectedState: state, idTokenExpected: true });
    expect(tokens.claims()).toMatchObject({ sub: user.id, email: user.email, name: user.name, role: 'reviewer' });
    expect(pageErrors).toEqual([]);
    expect(contractViolations(stack)).toEqual([]);
    await page.close();
  });

  it('a wrong password keeps the person on the login page with a message, and no tokens are issued', async () => {
    const user = stack.kratos.addIdentity({ email: 'carl@example.org', name: 'Carl', password: 'the right one', role: 'contributor' });
    stack.hydra.addClient({ client_id: 'map-viewer', client_name: 'Map Viewer', redirect_uris: [CALLBACK], skip_consent: true });
    const config = await oidc.discovery(new URL(stack.hydra.issuer), 'map-viewer', undefined, undefined, { execute: [oidc.allowInsecureRequests] });
    const page = await browser.newPage();
    let reachedCallback = false;
    await page.route(`${CALLBACK}**`, async (route) => {
      reachedCallback = true;
      await route.fulfill({ status: 200, body: 'unexpected' });
    });
    await page.goto(oidc.buildAuthorizationUrl(config, { redirect_uri: CALLBACK, scope: 'openid', state: oidc.randomState() }).toString());
    await page.getByLabel('E-mail').fill(user.email);
    await page.getByLabel('Password').fill('not the password');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForLoadState('load');
    expect(page.url()).toContain('/self-service/login');
    await expect(page.getByLabel('Password').isVisible()).resolves.toBe(true);
    // Kratos' own message (id 4000006), shown in the page's alert region where screen readers announce it.
    await expect(page.getByRole('alert').textContent()).resolves.toContain('The provided credentials are invalid');
    expect(reachedCallback).toBe(false);
    expect(contractViolations(stack)).toEqual([]);
    await page.close();
  });
});
