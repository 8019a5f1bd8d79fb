import { describe, expect, it } from 'vitest';
import { parseForms, TestBrowser, type PageResult } from './browser.js';
import { openLoginForm, useIdentityStack, type IdentityStack } from './harness.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

const MISSING = lacks('the passkey login tests on the Kratos double', requirements.contracts());

/**
 * Passkey login through the login app (not only the official UI): the app renders Kratos' passkey
 * nodes (challenge, answer field, trigger, webauthn.js) and forwards the browser's answer to Kratos,
 * against the contract-checked Kratos double.
 */

let stack: IdentityStack;
let userId: string;
const CREDENTIAL = 'cred-7f3a9c';

useIdentityStack(MISSING, (started) => {
  stack = started;
  userId = stack.kratos.addIdentity({ email: 'key@example.org', name: 'Key Holder', password: 'unused password 1' }).id;
  stack.kratos.addPasskey(userId, CREDENTIAL);
});

/** What Kratos' webauthn.js posts after navigator.credentials.get(): the passkey form with the answer filled in. */
function passkeyAnswer(page: PageResult, credentialId: string, challenge: string): Record<string, string> {
  const form = parseForms(page.body).find((f) => 'passkey_login' in f.fields);
  if (!form) throw new Error(`no passkey form:\n${page.body}`);
  const clientDataJSON = Buffer.from(JSON.stringify({ type: 'webauthn.get', challenge, origin: 'https://auth.example.org' })).toString('base64url');
  return { ...form.fields, passkey_login: JSON.stringify({ id: credentialId, rawId: credentialId, type: 'public-key', response: { clientDataJSON, authenticatorData: '', signature: '' } }) };
}

describe.skipIf(MISSING)('passkey login on the login app', () => {
  it('renders the passkey button, Kratos\' webauthn.js and the challenge, and lets only those scripts run', async () => {
    const page = await openLoginForm(stack, new TestBrowser());
    expect(page.body).toMatch(/<button type="button" class="secondary" data-ory-trigger="oryPasskeyLogin">Sign in with passkey<\/button>/);
    expect(page.body).toContain(`<script src="${stack.kratos.public.url}/.well-known/ory/webauthn.js" integrity="sha512-double"`);
    expect(page.body).toContain('<script src="/assets/ory-triggers.js"></script>');
    const form = parseForms(page.body).find((f) => 'passkey_login' in f.fields);
    expect(form?.action).toBe('/self-service/login');
    expect(form?.fields).toMatchObject({ method: 'passkey', passkey_login: '' });
    expect(JSON.parse(form?.fields.passkey_challenge ?? '{}')).toMatchObject({ publicKey: { rpId: 'example.org' } });
    const csp = page.headers.get('content-security-policy') ?? '';
    expect(csp).toContain(`script-src 'self' ${new URL(stack.kratos.public.url).origin}`);
    expect(csp).not.toContain('unsafe-inline');
    // No inline handler: the trigger is bound by the app's own script.
    expect(page.body).not.toMatch(/\sonclick=/);
  });

  it('serves the trigger binder as a script of its own', async () => {
    const response = await fetch(`${stack.appUrl}/assets/ory-triggers.js`);
    expect(response.headers.get('content-type')).toMatch(/^application\/javascript/);
    expect(await response.text()).toContain("addEventListener('click'");
  });

  it('a passkey answer for the flow\'s challenge signs the key\'s owner in and returns to return_to', async () => {
    const browser = new TestBrowser();
    browser.stopAt = ['http://127.0.0.1:9/'];
    const page = await openLoginForm(stack, browser);
    const flowId = new URL(page.url).searchParams.get('flow') as string;
    const done = await browser.go(new URL('/self-service/login', page.url).toString(), 'POST', passkeyAnswer(page, CREDENTIAL, stack.kratos.passkeyChallenge(flowId)));
    expect(done.url).toBe('http://127.0.0.1:9/app');
    const token = browser.cookies.get('ory_kratos_session');
    expect(token).toBeTruthy();
    expect([...stack.kratos.sessions.values()].find((s) => s.token === token)?.identityId).toBe(userId);
  });

  it('an answer for another challenge or an unknown key is refused, and the form is shown again', async () => {
    const browser = new TestBrowser();
    const page = await openLoginForm(stack, browser);
    const flowId = new URL(page.url).searchParams.get('flow') as string;
    const replayed = await browser.go(new URL('/self-service/login', page.url).toString(), 'POST', passkeyAnswer(page, CREDENTIAL, 'a-challenge-from-elsewhere'));
    expect(replayed.status).toBe(400);
    expect(browser.cookies.get('ory_kratos_session')).toBeUndefined();
    const unknown = await browser.go(new URL('/self-service/login', page.url).toString(), 'POST', passkeyAnswer(page, 'cred-unknown', stack.kratos.passkeyChallenge(flowId)));
    expect(unknown.status).toBe(400);
    expect(unknown.body).toContain('data-ory-trigger="oryPasskeyLogin"');
  });

  it('a passkey post without the app\'s CSRF token is refused before it reaches Kratos', async () => {
    const browser = new TestBrowser();
    const page = await openLoginForm(stack, browser);
    const flowId = new URL(page.url).searchParams.get('flow') as string;
    const { _csrf: _dropped, ...withoutCsrf } = passkeyAnswer(page, CREDENTIAL, stack.kratos.passkeyChallenge(flowId));
    const before = stack.kratos.public.count('updateLoginFlow');
    const refused = await browser.go(new URL('/self-service/login', page.url).toString(), 'POST', withoutCsrf);
    expect(refused.status).toBe(403);
    expect(stack.kratos.public.count('updateLoginFlow')).toBe(before);
  });
});
