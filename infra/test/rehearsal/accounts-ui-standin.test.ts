import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser } from 'playwright-core';
import { KratosDouble } from '../../../services/shared/testing/ory/kratos-double.js';
import { freePort } from '../../../services/shared/testing/ports.js';
import { lacks, requirements } from '../../../test/helpers/requirements.js';
import { startAccountsUi } from '../../rehearsal/accounts-ui-standin.js';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const MISSING = lacks('the accounts UI stand-in test', requirements.chromium(), requirements.contracts());

/** The stand-in and the Kratos double as the rehearsal wires them, without the proxy in between. */
describe.skipIf(MISSING)('the accounts UI stand-in serves registration from the Kratos flow', () => {
  let kratos: KratosDouble;
  let ui: Awaited<ReturnType<typeof startAccountsUi>>;
  let browser: Browser;

  beforeAll(async () => {
    const port = await freePort();
    const uiUrl = `http://127.0.0.1:${port}`;
    kratos = await new KratosDouble({
      loginUiUrl: `${uiUrl}/login`,
      registrationUiUrl: `${uiUrl}/registration`,
      defaultBrowserReturnUrl: `${uiUrl}/health/alive`,
      allowedReturnUrls: [uiUrl],
    }).start();
    ui = await startAccountsUi({ KRATOS_PUBLIC_URL: kratos.public.url, KRATOS_BROWSER_URL: kratos.public.url }, port);
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await ui?.close();
    await kratos?.close();
  });

  it('a person fills the form rendered from the flow nodes and is registered and signed in', async () => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(`${ui.url}/registration`);
      expect(new URL(page.url()).searchParams.get('flow')).toMatch(/^[0-9a-f-]{36}$/);
      await page.getByLabel('E-Mail').fill('nora@example.org');
      await page.getByLabel('Password').fill('a-long-enough-secret');
      await page.getByLabel('Name').fill('Nora Newcomer');
      await page.getByRole('button', { name: 'Sign up' }).click();
      await page.waitForURL(`${ui.url}/health/alive`);
      const identity = [...kratos.identities.values()].find((i) => i.email === 'nora@example.org');
      expect(identity).toMatchObject({ name: 'Nora Newcomer' });
      const cookies = await context.cookies(kratos.public.url);
      expect(cookies.map((c) => c.name)).toContain('ory_kratos_session');
      expect(kratos.violations).toEqual([]);
    } finally {
      await context.close();
    }
  });

  it('shows Kratos’ message for an e-mail that is taken and keeps what the person typed', async () => {
    kratos.addIdentity({ email: 'taken@example.org', name: 'First', password: 'first-secret-1' });
    const before = kratos.identities.size;
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(`${ui.url}/registration`);
      await page.getByLabel('E-Mail').fill('taken@example.org');
      await page.getByLabel('Password').fill('another-long-secret');
      await page.getByLabel('Name').fill('Second <b>Person</b>');
      await page.getByRole('button', { name: 'Sign up' }).click();
      expect(await page.getByRole('alert').textContent()).toMatch(/exists already/);
      expect(await page.getByLabel('Name').inputValue()).toBe('Second <b>Person</b>');
      expect(kratos.identities.size).toBe(before);
      expect(kratos.violations).toEqual([]);
    } finally {
      await context.close();
    }
  });

  it('starts a new flow when the browser comes with a flow it holds no CSRF cookie for', async () => {
    const response = await fetch(`${ui.url}/registration?flow=00000000-0000-4000-8000-000000000000`, { redirect: 'manual' });
    expect(response.status).toBe(303);
    expect(response.headers.get('location')).toBe(`${kratos.public.url}/self-service/registration/browser`);
    expect(kratos.violations).toEqual([]);
  });
});
