import { describe, expect, it } from 'vitest';
import { TestBrowser } from './browser.js';
import { contractViolations, openLoginForm, startIdentityStack, useIdentityStack, type IdentityStack } from './harness.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

const MISSING = lacks('the identity tests on the Kratos/Hydra doubles', requirements.contracts());

/** The login app's own protections: CSRF, rate limits, failed logins, headers, readiness. */

let stack: IdentityStack;
useIdentityStack(MISSING, (started) => (stack = started), { loginLimit: { perIp: 8, perAccount: 3, windowMs: 60_000 } });

describe.skipIf(MISSING)('self-service login page', () => {
  it('renders an accessible form: labelled inputs, autocomplete hints, no script, a language', async () => {
    const page = await openLoginForm(stack, new TestBrowser());
    expect(page.body).toMatch(/<html lang="en">/);
    expect(page.body).toContain('<label for="identifier">E-mail</label>');
    expect(page.body).toContain('autocomplete="current-password"');
    expect(page.body).not.toContain('<script');
    expect(page.body).toContain(`href="${stack.kratos.public.url}/self-service/recovery/browser"`);
    expect(page.headers.get('content-security-policy')).toContain("default-src 'none'");
    expect(page.headers.get('x-frame-options')).toBe('DENY');
  });

  it('wrong credentials re-render the form with the Kratos message (400) and keep the e-mail, escaped', async () => {
    const browser = new TestBrowser();
    const page = await openLoginForm(stack, browser);
    const failed = await browser.submit(page, '/self-service/login', { identifier: '"><script>x</script>@example.org', password: 'nope' });
    expect(failed.status).toBe(400);
    expect(failed.body).toContain('role="alert"');
    expect(failed.body).toContain('The provided credentials are invalid');
    expect(failed.body).toContain('&quot;&gt;&lt;script&gt;x&lt;/script&gt;@example.org');
    expect(failed.body).not.toContain('<script>x</script>');
  });

  it('a correct password sets the Kratos session cookie in the browser and returns to return_to', async () => {
    const user = stack.kratos.addIdentity({ email: 'ok@example.org', name: 'Ok', password: 'right password' });
    const browser = new TestBrowser();
    browser.stopAt = ['http://127.0.0.1:9/'];
    const page = await openLoginForm(stack, browser);
    const done = await browser.submit(page, '/self-service/login', { identifier: user.email, password: user.password });
    expect(done.url).toBe('http://127.0.0.1:9/app');
    expect(browser.cookies.get('ory_kratos_session')).toBeTruthy();
  });

  it('a login post without the CSRF token is refused with 403 and never reaches Kratos', async () => {
    const browser = new TestBrowser();
    const page = await openLoginForm(stack, browser);
    const before = stack.kratos.public.count('updateLoginFlow');
    const refused = await browser.submit(page, '/self-service/login', { identifier: 'a@example.org', password: 'x', _csrf: '' });
    expect(refused.status).toBe(403);
    expect(stack.kratos.public.count('updateLoginFlow')).toBe(before);
  });

  it('limits failed attempts per account (429), across browsers', async () => {
    stack.kratos.addIdentity({ email: 'victim@example.org', name: 'V', password: 'the real one' });
    const statuses: number[] = [];
    for (let i = 0; i < 4; i += 1) {
      const browser = new TestBrowser();
      const page = await openLoginForm(stack, browser);
      statuses.push((await browser.submit(page, '/self-service/login', { identifier: 'Victim@example.org', password: `guess ${i}` })).status);
    }
    expect(statuses).toEqual([400, 400, 400, 429]);
    const other = new TestBrowser();
    const page = await openLoginForm(stack, other);
    const blocked = await other.submit(page, '/self-service/login', { identifier: 'victim@example.org', password: 'the real one' });
    expect(blocked.status).toBe(429);
    expect(blocked.body).toContain('Too many sign-in attempts');
  });

  it('limits attempts per IP address (429) whatever the account', async () => {
    const strict = await startIdentityStack({ loginLimit: { perIp: 3, perAccount: 100, windowMs: 60_000 } });
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 5; i += 1) {
        const browser = new TestBrowser();
        const page = await openLoginForm(strict, browser);
        statuses.push((await browser.submit(page, '/self-service/login', { identifier: `someone${i}@example.org`, password: 'x' })).status);
      }
      expect(statuses).toEqual([400, 400, 400, 429, 429]);
      expect(contractViolations(strict)).toEqual([]);
    } finally {
      await strict.close();
    }
  });

  it('a malformed post is a 4xx, never a 5xx', async () => {
    const browser = new TestBrowser();
    await openLoginForm(stack, browser);
    const response = await browser.request('POST', `${stack.appUrl}/consent`, { consent_challenge: '', decision: 'maybe' });
    expect(response.status).toBeGreaterThanOrEqual(400);
    expect(response.status).toBeLessThan(500);
    const huge = await browser.request('POST', `${stack.appUrl}/logout`, { logout_challenge: 'x'.repeat(20_000) });
    expect(huge.status).toBe(413);
  });
});

describe.skipIf(MISSING)('consent form', () => {
  it('a consent post with a forged CSRF token is refused with 403', async () => {
    const browser = new TestBrowser();
    await openLoginForm(stack, browser);
    const response = await browser.request('POST', `${stack.appUrl}/consent`, { _csrf: 'forged', consent_challenge: 'abc', decision: 'allow' });
    expect(response.status).toBe(403);
  });
});

describe.skipIf(MISSING)('cookies', () => {
  it('over https the app sets __Host- cookies that are Secure, HttpOnly and SameSite=Lax', async () => {
    const secure = await startIdentityStack({ secureCookies: true });
    try {
      const response = await fetch(`${secure.appUrl}/self-service/login?flow=unknown`, { redirect: 'manual' });
      const cookies = response.headers.getSetCookie();
      expect(cookies.length).toBeGreaterThan(0);
      for (const cookie of cookies) {
        expect(cookie).toMatch(/^__Host-/);
        expect(cookie).toMatch(/; Secure/i);
        expect(cookie).toMatch(/; HttpOnly/i);
        expect(cookie).toMatch(/; SameSite=Lax/i);
      }
      expect(contractViolations(secure)).toEqual([]);
    } finally {
      await secure.close();
    }
  });
});

describe.skipIf(MISSING)('GET /health/ready', () => {
  it('is 200 when Kratos and Hydra are ready', async () => {
    const response = await fetch(`${stack.appUrl}/health/ready`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ status: 'ok', checks: { self: 'ok', kratos: 'ok', hydra: 'ok' } });
  });

  it('is 503 naming the dependency that is not ready', async () => {
    stack.kratos.ready = false;
    try {
      const response = await fetch(`${stack.appUrl}/health/ready`);
      expect(response.status).toBe(503);
      expect(await response.json()).toEqual({ status: 'unavailable', checks: { self: 'ok', kratos: 'unavailable', hydra: 'ok' } });
    } finally {
      stack.kratos.ready = true;
    }
  });

  it('is 503 when Hydra cannot be reached at all', async () => {
    await stack.hydra.admin.close();
    const response = await fetch(`${stack.appUrl}/health/ready`);
    expect(response.status).toBe(503);
    expect(((await response.json()) as { checks: { hydra: string } }).checks.hydra).toBe('unavailable');
  });

  it('a login while Hydra is unreachable shows a 502 page that leaks nothing, and logs the cause without cookies', async () => {
    // Hydra's admin port was closed by the previous test.
    const response = await fetch(`${stack.appUrl}/login?login_challenge=abc`, { headers: { cookie: 'ory_kratos_session=very-secret-session' } });
    expect(response.status).toBe(502);
    const body = await response.text();
    expect(body).toContain('Sign-in unavailable');
    expect(body).not.toMatch(/ECONNREFUSED|at \w+ \(|axios/i);
    const logged = stack.logLines.join('');
    expect(logged).toContain('identity request failed');
    expect(logged).not.toContain('very-secret-session');
  });

  it('when Kratos is unreachable the logged error carries no session cookie', async () => {
    const fresh = await startIdentityStack();
    try {
      fresh.hydra.addClient({ client_id: 'c1', redirect_uris: ['http://127.0.0.1:9/cb'] });
      const auth = await fetch(`${fresh.hydra.public.url}/oauth2/auth?client_id=c1&response_type=code&scope=openid&state=abcdefgh&redirect_uri=${encodeURIComponent('http://127.0.0.1:9/cb')}`, { redirect: 'manual' });
      const loginUrl = auth.headers.get('location') as string;
      await fresh.kratos.public.close();
      const response = await fetch(loginUrl, { headers: { cookie: 'ory_kratos_session=another-secret-session' } });
      expect(response.status).toBe(502);
      const logged = fresh.logLines.join('');
      expect(logged).toContain('"path":"/sessions/whoami"');
      expect(logged).not.toContain('another-secret-session');
    } finally {
      await fresh.close();
    }
  });

  it('hands a second-factor (aal2) login flow to the accounts UI, which renders TOTP and WebAuthn', async () => {
    const withAccounts = await startIdentityStack({ accountsUrl: 'http://127.0.0.1:9/accounts' });
    try {
      const user = withAccounts.kratos.addIdentity({ email: 'two@example.org', name: 'Two', password: 'x', secondFactor: true });
      const browser = new TestBrowser();
      browser.cookies.set('ory_kratos_session', withAccounts.kratos.createSession(user.id).token);
      browser.stopAt = ['http://127.0.0.1:9/accounts'];
      const page = await browser.go(`${withAccounts.kratos.public.url}/self-service/login/browser?aal=aal2&return_to=${encodeURIComponent('http://127.0.0.1:9/app')}`);
      expect(page.url).toMatch(/^http:\/\/127\.0\.0\.1:9\/accounts\/login\?flow=[0-9a-f-]{36}$/);
      expect(contractViolations(withAccounts)).toEqual([]);
    } finally {
      await withAccounts.close();
    }
  });
});
