import { Secret, TOTP } from 'otpauth';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { contractViolations, startIdentityStack, type IdentityStack } from '../../identity/test/harness.js';
import { binary, lacks, requirements } from '../helpers/requirements.js';
import { jsonnetMapper } from '../doubles/ory/jsonnet-mapper.js';
import { OidcStandIn } from '../doubles/ory/oidc-provider.js';
import type { KratosOidcProvider } from '../../services/shared/testing/ory/kratos-double.js';
import { launchChromium, missingForBrowserTests, startWebStack, type WebStack } from '../../services/web/test/harness.js';

/**
 * Issue 31 through the whole platform in Chromium: the web app (built Astro server), the feature API
 * (its own process, trusting Kratos session cookies), the login app, the Kratos double (as kratos.yml:
 * whoami at aal1, the oidc method) and a real OpenID provider (oidc-provider) on loopback.
 *
 * - A person signs in with the city's provider for the first time: a new account, whose address the
 *   provider did not verify. The site says so and links to verification; the API refuses the person's
 *   first feature until the address is verified.
 * - A reviewer signed in with the password only opens a submitted feature: the site sends her through
 *   Kratos' step-up login (the TOTP code, generated here with otpauth) and back, and she approves.
 */
const MISSING = lacks('the identity journey through the web app', requirements.chromium(), requirements.contracts(), binary('jsonnet', 'apt-get install jsonnet: Kratos\' claims mappers are Jsonnet'));
const WEB_MISSING = missingForBrowserTests();
if (!MISSING && WEB_MISSING) console.warn(`skipped: the identity journey through the web app: ${WEB_MISSING}`);

describe.skipIf(MISSING || WEB_MISSING)('signing in, verifying and stepping up through the web app', () => {
  let identity: IdentityStack;
  let provider: OidcStandIn;
  let web: WebStack;
  let browser: Browser;
  const contexts: BrowserContext[] = [];
  const providers: KratosOidcProvider[] = [];
  const allowedReturnUrls: string[] = [];

  beforeAll(async () => {
    identity = await startIdentityStack({}, { whoamiRequiredAal: 'aal1', oidcProviders: providers, allowedReturnUrls });
    provider = await new OidcStandIn({ clientId: 'kratos', clientSecret: 'stand-in-secret', redirectUris: () => [identity.kratos.callbackUrl('city')] }).start();
    providers.push({ id: 'city', label: 'City Keycloak', issuerUrl: provider.issuer, clientId: 'kratos', clientSecret: 'stand-in-secret', scope: ['openid', 'email', 'profile'], mapClaims: jsonnetMapper('generic') });
    const kratosUrl = identity.kratos.public.url;
    web = await startWebStack({
      // whoami answers cached as in production (15 s): a verification or a step-up must count at once anyway.
      apiEnv: { KRATOS_PUBLIC_URL: kratosUrl, SESSION_CACHE_SECONDS: '15' },
      // LOGOUT_URL as the stack sets it for its own sites (infra/routes.ts siteSettings): Hydra's end-session endpoint.
      webEnv: { KRATOS_PUBLIC_URL: kratosUrl, LOGIN_URL: `${kratosUrl}/self-service/login/browser`, LOGOUT_URL: `${identity.hydra.public.url}/oauth2/sessions/logout` },
    });
    allowedReturnUrls.push(web.webUrl);
    browser = await launchChromium();
  }, 300_000);
  afterAll(async () => {
    for (const context of contexts) await context.close().catch(() => undefined);
    await browser?.close();
    await web?.close();
    await provider?.close();
    await identity?.close();
  });
  afterEach(() => {
    expect(contractViolations(identity)).toEqual([]);
  });

  async function freshPage(): Promise<Page> {
    const context = await browser.newContext({ locale: 'de-DE', viewport: { width: 1100, height: 900 } });
    contexts.push(context);
    return context.newPage();
  }

  /** A fresh browser signed in on the web app with the city account's password form (Kratos, the login app, back). */
  async function signInWithPassword(person: { email: string; password: string }): Promise<Page> {
    const page = await freshPage();
    await page.goto(`${web.webUrl}/login`);
    await page.getByRole('link', { name: 'Mit dem Konto der Stadt anmelden' }).click();
    await page.getByLabel('E-mail').fill(person.email);
    await page.getByLabel('Password').fill(person.password);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.waitForURL(`${web.webUrl}/**`);
    return page;
  }

  /** A feature through the API from the page, with the browser's own session cookie (as the editor sends it). */
  const createFromPage = (page: Page, name: string) =>
    page.evaluate(
      async ([api, featureName]) => {
        const response = await fetch(`${api}/api/features`, {
          method: 'POST',
          credentials: 'include',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ type: 'Feature', geometry: { type: 'Point', coordinates: [13.4, 52.52] }, properties: { name: featureName, kategorie: 'denkmal' } }),
        });
        return { status: response.status, body: (await response.json()) as { code?: string } };
      },
      [web.apiUrl, name] as const,
    );

  it('a first social sign-in makes a new, unverified account: the site says so, and the API refuses its first feature until it verifies', async () => {
    provider.addAccount({ sub: 'nora', email: 'nora@city.example', email_verified: false, name: 'Nora Neu' });
    const page = await freshPage();
    await page.goto(`${web.webUrl}/login`);
    await page.getByRole('link', { name: 'Mit dem Konto der Stadt anmelden' }).click();
    await page.getByRole('button', { name: 'Sign in with City Keycloak' }).click();
    await page.waitForURL(`${provider.issuer}/**`);
    await page.locator('input[name="login"]').fill('nora');
    await page.locator('input[name="password"]').fill('anything');
    await page.getByRole('button', { name: 'Sign-in' }).click();
    await page.getByRole('button', { name: 'Continue' }).click();
    await page.waitForURL(`${web.webUrl}/**`);

    const account = [...identity.kratos.identities.values()].find((i) => i.email === 'nora@city.example')!;
    expect(account).toMatchObject({ name: 'Nora Neu', verified: false });
    // A new account is a guest until an admin grants a role; Nora is made a contributor for the test.
    account.role = 'contributor';
    await page.goto(`${web.webUrl}/`);
    const notice = page.getByRole('status').filter({ hasText: 'Ihre E-Mail-Adresse ist noch nicht bestätigt' });
    await expect.poll(() => notice.count()).toBe(1);
    expect(await notice.getByRole('link', { name: 'Adresse jetzt bestätigen' }).getAttribute('href')).toContain(`${identity.kratos.public.url}/self-service/verification/browser?return_to=`);

    const refused = await createFromPage(page, 'Erstes Denkmal');
    expect(refused).toMatchObject({ status: 403, body: { code: 'EMAIL_NOT_VERIFIED' } });

    // Nora enters the code Kratos mailed her (the accounts UI, not part of this test): the address is verified.
    account.verified = true;
    const created = await createFromPage(page, 'Erstes Denkmal');
    expect(created.status).toBe(201);
    await page.reload();
    expect(await page.getByRole('status').filter({ hasText: 'noch nicht bestätigt' }).count()).toBe(0);
  });

  it('a reviewer signed in with a password only is sent to the second factor before the review view, and approves after the TOTP code', async () => {
    const secret = new Secret({ size: 20 });
    const rita = identity.kratos.addIdentity({ email: 'rita@city.example', name: 'Rita Reviewer', password: 'ritas long password', role: 'reviewer', totpSecret: secret.base32 });
    const contributor = await web.token('contributor', 'alice');
    const { status, body } = await web.api<{ id: string }>('POST', '/api/features', { token: contributor, body: { type: 'Feature', geometry: { type: 'Point', coordinates: [13.41, 52.52] }, properties: { name: 'Brunnen am Markt', kategorie: 'denkmal' } } });
    expect(status).toBe(201);
    expect((await web.api('POST', '/api/qc/submit', { token: contributor, body: { featureId: body.id } })).status).toBe(200);

    const page = await signInWithPassword(rita);

    // The review view: first the second factor (Kratos' aal2 login, rendered by the login app).
    await page.goto(`${web.webUrl}/qc/${encodeURIComponent(body.id)}`);
    await page.waitForURL(/\/self-service\/login\?flow=/);
    const totp = new TOTP({ secret, digits: 6, period: 30 });
    await page.getByLabel('Authentication code').fill(totp.generate({ timestamp: identity.clock.now() }));
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.waitForURL(`${web.webUrl}/qc/${encodeURIComponent(body.id)}`);
    expect([...identity.kratos.sessions.values()].find((s) => s.identityId === rita.id)?.aal).toBe('aal2');

    await expect.poll(() => page.getByRole('status').filter({ hasText: 'Sie prüfen dieses Objekt' }).count()).toBe(1);
    await page.getByRole('button', { name: 'Freigeben' }).click();
    await expect.poll(() => page.getByRole('status').filter({ hasText: 'Freigegeben.' }).count()).toBe(1);
    const reviews = await web.api<{ status: string; transitions: Array<{ action: string; actor: string }> }>('GET', `/api/features/${encodeURIComponent(body.id)}/reviews`, { token: contributor });
    expect(reviews.body.status).toBe('approved');
    expect(reviews.body.transitions.at(-1)).toMatchObject({ action: 'approve', actor: rita.id });
  });
  it('"Abmelden" on the web app signs out everywhere: the platform\'s logout page asks, then the Kratos session ends and the app treats the person as a guest', async () => {
    const olaf = identity.kratos.addIdentity({ email: 'olaf@city.example', name: 'Olaf Out', password: 'olafs long password', role: 'contributor' });
    const page = await signInWithPassword(olaf);
    await page.goto(`${web.webUrl}/features/new`);
    expect(new URL(page.url()).pathname).toBe('/features/new');
    const session = [...identity.kratos.sessions.values()].find((s) => s.identityId === olaf.id && s.active);
    expect(session).toBeDefined();

    await page.getByRole('link', { name: 'Abmelden' }).click();
    // Hydra's logout sends the browser to the login app, which asks first.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL((url) => !url.pathname.startsWith('/logout') && !url.pathname.startsWith('/oauth2/'));
    expect(session!.active).toBe(false);
    await page.goto(`${web.webUrl}/features/new`);
    expect(new URL(page.url()).pathname).toBe('/login');
    await expect.poll(() => page.getByRole('link', { name: 'Abmelden' }).count()).toBe(0);
  });
});
