import { Secret, TOTP } from 'otpauth';
import { describe, expect, it } from 'vitest';
import { TestBrowser, type PageResult } from './browser.js';
import { openLoginForm, useIdentityStack, type IdentityStack } from './harness.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

const MISSING = lacks('the identity tests on the Kratos/Hydra doubles', requirements.contracts());

/**
 * The login app's own part of the step-up and of social sign-in, over HTTP: the TOTP form of an aal2
 * flow (rendered here, with the CSRF check; Kratos checks the code and raises the session to aal2) and
 * the refusal of malformed method posts before Kratos is asked.
 */
const RETURN = 'http://127.0.0.1:9/app';
let stack: IdentityStack;
useIdentityStack(MISSING, (started) => (stack = started), {}, { whoamiRequiredAal: 'aal1' });

async function signedInWithPassword(email: string, password: string): Promise<TestBrowser> {
  const browser = new TestBrowser();
  browser.stopAt = ['http://127.0.0.1:9/'];
  const page = await openLoginForm(stack, browser, RETURN);
  const done = await browser.submit(page, '/self-service/login', { identifier: email, password });
  expect(done.url).toBe(RETURN);
  return browser;
}

describe.skipIf(MISSING)('the second factor on the login page', () => {
  it('renders the TOTP step of an aal2 flow itself: a labelled one-time-code field, no script; a wrong code stays with Kratos\' message; the right one returns at aal2', async () => {
    const secret = new Secret({ size: 20 });
    const rita = stack.kratos.addIdentity({ email: 'rita@example.org', name: 'Rita', password: 'ritas long password', role: 'reviewer', totpSecret: secret.base32 });
    const browser = await signedInWithPassword(rita.email, rita.password);
    const session = [...stack.kratos.sessions.values()].find((s) => s.identityId === rita.id)!;
    expect(session.aal).toBe('aal1');

    const page: PageResult = await browser.go(`${stack.kratos.public.url}/self-service/login/browser?aal=aal2&return_to=${encodeURIComponent(RETURN)}`);
    expect(page.url).toContain('/self-service/login?flow=');
    expect(page.body).toContain('<label for="totp_code">Authentication code</label>');
    expect(page.body).toContain('autocomplete="one-time-code"');
    expect(page.body).not.toContain('<script');
    const totp = new TOTP({ secret, digits: 6, period: 30 });
    const right = totp.generate({ timestamp: stack.clock.now() });
    const wrong = right === '123456' ? '654321' : '123456';

    const failed = await browser.submit(page, '/self-service/login', { totp_code: wrong });
    expect(failed.status).toBe(400);
    expect(failed.body).toContain('role="alert"');
    expect(failed.body).toContain('The provided authentication code is invalid');
    expect(session.aal).toBe('aal1');

    const done = await browser.submit(failed, '/self-service/login', { totp_code: right });
    expect(done.url).toBe(RETURN);
    expect(session.aal).toBe('aal2');
    expect(session.methods.map((m) => m.method)).toEqual(['password', 'totp']);
  });

  it('refuses a code that is no code, and a provider id that is not one, before asking Kratos (400)', async () => {
    const browser = new TestBrowser();
    const page = await browser.go(`${stack.kratos.public.url}/self-service/login/browser?return_to=${encodeURIComponent(RETURN)}`);
    const before = stack.kratos.public.count('updateLoginFlow');
    const flow = new URL(page.url).searchParams.get('flow')!;
    const csrf = /name="_csrf" value="([^"]+)"/.exec(page.body)![1]!;
    const kratosCsrf = /name="csrf_token" value="([^"]+)"/.exec(page.body)![1]!;
    const post = (fields: Record<string, string>) => browser.request('POST', `${stack.appUrl}/self-service/login`, { _csrf: csrf, flow, csrf_token: kratosCsrf, ...fields });
    expect((await post({ method: 'totp', totp_code: 'abc' })).status).toBe(400);
    expect((await post({ method: 'oidc', provider: '../../evil' })).status).toBe(400);
    expect(stack.kratos.public.count('updateLoginFlow')).toBe(before);
  });
});
