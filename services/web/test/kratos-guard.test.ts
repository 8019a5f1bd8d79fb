/**
 * The site's guard of protected routes against Kratos, over real HTTP: the built site (its standalone
 * server, development sign-in off as in production) asks the Kratos double's whoami with the
 * visitor's cookie. A session → the page; no session → /login with the return URL; a session that
 * still needs its second factor (whoami 403) → the second-factor login of LOGIN_URL; Kratos
 * unreachable → 503, never the page. The double answers per the vendored Kratos OpenAPI document.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KratosDouble, SESSION_COOKIE } from '../../shared/testing/ory/kratos-double.js';
import { freePort } from '../../shared/testing/ports.js';
import { lacks, requirements } from '../../../test/helpers/requirements.js';
import { ensureWebBuild, startWebServer, type WebServerProcess } from '../launch.js';

const MISSING = lacks('the site’s Kratos guard tests', requirements.contracts());
const LOGIN_URL = 'https://auth.example.org/self-service/login/browser';
const PUBLIC_BASE_URL = 'https://main.sites.example.org';

describe.skipIf(MISSING)('the site’s guard of protected routes with Kratos', () => {
  let kratos: KratosDouble;
  let web: WebServerProcess;
  let unreachable: WebServerProcess;

  beforeAll(async () => {
    ensureWebBuild();
    kratos = await new KratosDouble({ loginUiUrl: LOGIN_URL, allowedReturnUrls: [PUBLIC_BASE_URL] }).start();
    // Kratos unreachable: a port nothing listens on.
    const closedPort = await freePort();
    const env = { NODE_ENV: 'production', API_PUBLIC_URL: 'http://127.0.0.1:9', LOGIN_URL, PUBLIC_BASE_URL };
    [web, unreachable] = await Promise.all([
      startWebServer({ port: await freePort(), env: { ...env, KRATOS_PUBLIC_URL: kratos.public.url } }),
      startWebServer({ port: await freePort(), env: { ...env, KRATOS_PUBLIC_URL: `http://127.0.0.1:${closedPort}` } }),
    ]);
  }, 300_000);
  afterAll(async () => {
    await web?.close();
    await unreachable?.close();
    await kratos?.close();
  });

  const get = (server: WebServerProcess, path: string, cookie?: string) =>
    fetch(`${server.url}${path}`, { redirect: 'manual', headers: { 'accept-language': 'de', ...(cookie ? { cookie } : {}) } });

  it('lets a visitor with a Kratos session cookie in: the editor is served, and names the signed-in person', async () => {
    const erika = kratos.addIdentity({ email: 'erika@example.org', name: 'Erika Mustermann', role: 'contributor', password: 'unused-here' });
    const session = kratos.createSession(erika.id);
    const response = await get(web, '/features/new', `theme=dark; ${SESSION_COOKIE}=${session.token}`);
    expect(response.status).toBe(200);
    const html = await response.text();
    expect(html).toContain('Erika Mustermann');
    expect(html).toMatch(/<button[^>]*>\s*Speichern\s*<\/button>/);
  });

  it('sends a visitor without a session to /login with the path and query to return to', async () => {
    for (const path of ['/features/new', '/features/42/edit?from=list', '/qc']) {
      const response = await get(web, path);
      expect(response.status, path).toBe(303);
      const location = new URL(response.headers.get('location')!, web.url);
      expect(location.pathname).toBe('/login');
      expect(location.searchParams.get('return_to')).toBe(path);
    }
    // An unknown or ended session is no session.
    const ended = kratos.createSession(kratos.addIdentity({ email: 'ex@example.org', name: 'Ex', role: 'contributor', password: 'x' }).id);
    ended.active = false;
    const response = await get(web, '/features/new', `${SESSION_COOKIE}=${ended.token}`);
    expect(response.status).toBe(303);
    expect(new URL(response.headers.get('location')!, web.url).pathname).toBe('/login');
  });

  it('sends a session that still needs its second factor (whoami 403) to the second-factor login, returning to the page', async () => {
    const max = kratos.addIdentity({ email: 'max@example.org', name: 'Max', role: 'reviewer', password: 'x', secondFactor: true });
    const firstFactorOnly = kratos.createSession(max.id, { aal: 'aal1' });
    const response = await get(web, '/features/7/edit', `${SESSION_COOKIE}=${firstFactorOnly.token}`);
    expect(response.status).toBe(303);
    const location = new URL(response.headers.get('location')!);
    expect(`${location.origin}${location.pathname}`).toBe(LOGIN_URL);
    expect(location.searchParams.get('aal')).toBe('aal2');
    // The return URL is built from PUBLIC_BASE_URL, never from the request's Host header.
    expect(location.searchParams.get('return_to')).toBe(`${PUBLIC_BASE_URL}/features/7/edit`);

    const completed = kratos.createSession(max.id, { aal: 'aal2' });
    const allowed = await get(web, '/features/new', `${SESSION_COOKIE}=${completed.token}`);
    expect(allowed.status).toBe(200);
    expect(await allowed.text()).toContain('Max');
  });

  it('sends a reviewer signed in without a second factor through Kratos\' step-up login before the review view, and back to it', async () => {
    const rita = kratos.addIdentity({ email: 'rita@example.org', name: 'Rita', role: 'reviewer', password: 'x' });
    const passwordOnly = kratos.createSession(rita.id, { aal: 'aal1' });
    for (const path of ['/qc/42', '/qc/decisions']) {
      const response = await get(web, path, `${SESSION_COOKIE}=${passwordOnly.token}`);
      expect(response.status, path).toBe(303);
      const location = new URL(response.headers.get('location')!);
      expect(`${location.origin}${location.pathname}`).toBe(LOGIN_URL);
      expect(location.searchParams.get('aal')).toBe('aal2');
      expect(location.searchParams.get('return_to')).toBe(`${PUBLIC_BASE_URL}${path}`);
    }
    // The queue and the contributor's own list need no second factor.
    for (const path of ['/qc/mine']) {
      const response = await get(web, path, `${SESSION_COOKIE}=${passwordOnly.token}`);
      expect(response.headers.get('location') ?? '', path).not.toContain('aal=aal2');
    }
  });

  it('tells an account whose e-mail is not verified that it may only look around, with a link to Kratos\' verification', async () => {
    const nora = kratos.addIdentity({ email: 'nora@example.org', name: 'Nora Neu', role: 'contributor', password: 'x', verified: false });
    const session = kratos.createSession(nora.id);
    const response = await get(web, '/features/new', `${SESSION_COOKIE}=${session.token}`);
    expect(response.status).toBe(200);
    const html = await response.text();
    expect(html).toContain('Ihre E-Mail-Adresse ist noch nicht bestätigt');
    const href = /<p id="unverified-notice"[^>]*>[\s\S]*?<a href="([^"]+)"/.exec(html)?.[1]?.replace(/&amp;/g, '&');
    expect(href).toBe(`https://auth.example.org/self-service/verification/browser?return_to=${encodeURIComponent(`${PUBLIC_BASE_URL}/features/new`)}`);
    // A verified account sees no such notice.
    const erika = kratos.createSession(kratos.addIdentity({ email: 'erika2@example.org', name: 'Erika', role: 'contributor', password: 'x' }).id);
    expect(await (await get(web, '/features/new', `${SESSION_COOKIE}=${erika.token}`)).text()).not.toContain('unverified-notice');
  });

  it('answers 503 on a protected route when Kratos cannot be reached, never serving the page', async () => {
    const response = await get(unreachable, '/features/new', `${SESSION_COOKIE}=whatever`);
    expect(response.status).toBe(503);
    expect(await response.text()).not.toContain('Speichern');
    // Public pages stay up for anonymous visitors.
    expect((await get(unreachable, '/login')).status).toBe(200);
  });

  it('signs a Kratos session out with "Abmelden": /logout hands the browser Kratos\' logout URL, which ends the session and returns to the map', async () => {
    const erika = kratos.createSession(kratos.addIdentity({ email: 'erika-out@example.org', name: 'Erika', role: 'contributor', password: 'x' }).id);
    const cookie = `${SESSION_COOKIE}=${erika.token}`;
    expect((await get(web, '/features/new', cookie)).status).toBe(200);
    const page = await get(web, '/features/new', cookie);
    expect(await page.text()).toContain('href="/logout"');

    const logout = await get(web, '/logout', cookie);
    expect(logout.status).toBe(303);
    const kratosLogout = new URL(logout.headers.get('location')!);
    expect(`${kratosLogout.origin}${kratosLogout.pathname}`).toBe(`${kratos.public.url}/self-service/logout`);
    expect(kratosLogout.searchParams.get('return_to')).toBe(`${PUBLIC_BASE_URL}/`);
    // The session lives until the browser opens that URL (the token is Kratos' CSRF guard).
    expect((await get(web, '/features/new', cookie)).status).toBe(200);
    const ended = await fetch(kratosLogout, { redirect: 'manual', headers: { cookie } });
    expect(ended.status).toBe(303);
    expect(ended.headers.get('location')).toBe(`${PUBLIC_BASE_URL}/`);
    expect(ended.headers.get('set-cookie')).toMatch(new RegExp(`^${SESSION_COOKIE}=;.*Max-Age=0`));
    // Even with the old cookie the site now sees a guest: the editor sends it to sign in.
    const after = await get(web, '/features/new', cookie);
    expect(after.status).toBe(303);
    expect(new URL(after.headers.get('location')!, web.url).pathname).toBe('/login');
    // Signing out again (the session is gone) just returns to the map.
    const again = await get(web, '/logout', cookie);
    expect(again.status).toBe(303);
    expect(again.headers.get('location')).toBe('/');
  });

  it('answers 503 to "Abmelden" when Kratos cannot be reached, rather than pretending the session ended', async () => {
    const response = await get(unreachable, '/logout', `${SESSION_COOKIE}=whatever`);
    expect(response.status).toBe(503);
    expect(await response.text()).toContain('Abmelden ist gerade nicht möglich');
  });

  it('every whoami the site made matched the Kratos contract', () => {
    expect(kratos.violations).toEqual([]);
  });
});
