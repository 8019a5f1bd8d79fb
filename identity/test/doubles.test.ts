import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Configuration, OAuth2Api } from '@ory/hydra-client';
import { ContractServer } from '../../services/shared/testing/ory/contract-server.js';
import { hydraSpec, HydraDouble } from '../../services/shared/testing/ory/hydra-double.js';
import { KratosDouble, type KratosOidcProvider } from '../../services/shared/testing/ory/kratos-double.js';
import { OidcStandIn } from '../../test/doubles/ory/oidc-provider.js';
import { OpenApiContract } from '../../services/shared/testing/ory/openapi-contract.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

const MISSING = lacks('the identity tests on the Kratos/Hydra doubles', requirements.contracts());

/**
 * The doubles are only worth something if they refuse what the real services refuse. These tests send
 * off-contract requests on purpose and check that each is refused and recorded as a violation.
 */

let kratos: KratosDouble;
let hydra: HydraDouble;
beforeAll(async () => {
  if (MISSING) return;
  kratos = await new KratosDouble({ loginUiUrl: 'http://127.0.0.1:9/login', allowedReturnUrls: ['http://127.0.0.1:9'] }).start();
  hydra = await new HydraDouble({ loginUrl: 'http://x/login', consentUrl: 'http://x/consent', logoutUrl: 'http://x/logout', postLogoutRedirect: 'http://x/' }).start();
});
afterAll(async () => {
  if (MISSING) return;
  await Promise.all([kratos.close(), hydra.close()]);
});

function drain(server: ContractServer): string[] {
  return server.violations.splice(0);
}

describe.skipIf(MISSING)('Kratos double', () => {
  it('does not serve admin endpoints on the public port (404) — like the real port split', async () => {
    const response = await fetch(`${kratos.public.url}/admin/identities/x`);
    expect(response.status).toBe(404);
    expect(drain(kratos.public)).toEqual([expect.stringContaining('no GET /admin/identities/x on this port')]);
  });

  it('refuses an unknown query parameter on whoami', async () => {
    const response = await fetch(`${kratos.public.url}/sessions/whoami?tokenise_as=jwt`);
    expect(response.status).toBe(400);
    expect(drain(kratos.public)).toEqual([expect.stringContaining('query parameter tokenise_as is not defined for toSession')]);
  });

  it('refuses a login flow update without the required flow parameter or with a body off the schema', async () => {
    const noFlow = await fetch(`${kratos.public.url}/self-service/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ method: 'password', identifier: 'a', password: 'b' }) });
    expect(noFlow.status).toBe(400);
    expect(drain(kratos.public)).toEqual([expect.stringContaining('query parameter flow is required')]);
    const badBody = await fetch(`${kratos.public.url}/self-service/login?flow=x`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ method: 'password', identifier: 'a' }) });
    expect(badBody.status).toBe(400);
    expect(drain(kratos.public).join()).toContain("must have required property 'password'");
    const unknownMethod = await fetch(`${kratos.public.url}/self-service/login?flow=x`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ method: 'carrier-pigeon' }) });
    expect(unknownMethod.status).toBe(400);
    expect(drain(kratos.public).join()).toContain('must be equal to one of the allowed values');
  });

  it('refuses a wrong method on a known path (405)', async () => {
    const response = await fetch(`${kratos.public.url}/sessions/whoami`, { method: 'POST' });
    expect(response.status).toBe(405);
    expect(drain(kratos.public)).toHaveLength(1);
  });
});

describe.skipIf(MISSING)('Hydra double', () => {
  it('refuses accepting a login without the subject', async () => {
    const response = await fetch(`${hydra.admin.url}/admin/oauth2/auth/requests/login/accept?login_challenge=x`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ remember: true }) });
    expect(response.status).toBe(400);
    expect(drain(hydra.admin).join()).toContain("must have required property 'subject'");
  });

  it('refuses a consent accept whose grant_scope is a string instead of a list', async () => {
    const response = await fetch(`${hydra.admin.url}/admin/oauth2/auth/requests/consent/accept?consent_challenge=x`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ grant_scope: 'openid email' }) });
    expect(response.status).toBe(400);
    expect(drain(hydra.admin).join()).toContain('body/grant_scope must be array');
  });

  it('refuses an introspection sent as JSON (the endpoint takes a form)', async () => {
    const response = await fetch(`${hydra.admin.url}/admin/oauth2/introspect`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: 'x' }) });
    expect(response.status).toBe(400);
    expect(drain(hydra.admin).join()).toContain('content type application/json is not accepted');
  });

  it('the SDK call shapes pass: a client created through @ory/hydra-client is on contract', async () => {
    const api = new OAuth2Api(new Configuration({ basePath: hydra.admin.url }));
    const { data } = await api.createOAuth2Client({ oAuth2Client: { client_id: 'sdk-check', redirect_uris: ['https://app.example.org/cb'], grant_types: ['authorization_code'] } });
    expect(data.client_secret).toBeTruthy();
    expect(hydra.violations).toEqual([]);
  });

  it('a handler that answers off contract is caught and turned into a 500', async () => {
    const contract = new OpenApiContract(hydraSpec(), 'hydra-api-selftest');
    const server = new ContractServer('broken', contract, () => true, () => ({}));
    server.on('getOAuth2LoginRequest', () => ({ status: 200, body: { challenge: 'x' } }));
    await server.start();
    try {
      const response = await fetch(`${server.url}/admin/oauth2/auth/requests/login?login_challenge=x`);
      expect(response.status).toBe(500);
      expect(server.violations.join()).toContain("must have required property 'skip'");
    } finally {
      await server.close();
    }
  });
});

describe.skipIf(MISSING)('Kratos double: browser registration flow', () => {
  let double: KratosDouble;
  beforeAll(async () => {
    if (MISSING) return;
    double = await new KratosDouble({
      loginUiUrl: 'https://auth.example.org/login',
      registrationUiUrl: 'https://accounts.example.org/registration',
      defaultBrowserReturnUrl: 'https://app.example.org/',
      allowedReturnUrls: ['https://app.example.org', 'https://*.example.org'],
      cookieDomain: 'example.org',
    }).start();
  });
  afterAll(async () => {
    if (MISSING) return;
    await double.close();
  });

  /** Starts a flow as a browser does; returns its id and the CSRF cookie the browser now holds. */
  async function startFlow(query = ''): Promise<{ id: string; cookie: string; response: Response }> {
    const response = await fetch(`${double.public.url}/self-service/registration/browser${query}`, { redirect: 'manual' });
    const location = response.headers.get('location') ?? '';
    const cookie = (response.headers.get('set-cookie') ?? '').split(';')[0]!;
    return { id: new URL(location, 'https://x').searchParams.get('flow') ?? '', cookie, response };
  }

  function form(fields: Record<string, string>): URLSearchParams {
    return new URLSearchParams(fields);
  }

  async function submit(id: string, cookie: string, fields: Record<string, string>, json = false): Promise<Response> {
    return fetch(`${double.public.url}/self-service/registration?flow=${id}`, {
      method: 'POST',
      redirect: 'manual',
      headers: json ? { cookie, 'content-type': 'application/json', accept: 'application/json' } : { cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: json ? JSON.stringify(fields) : form(fields),
    });
  }

  async function flowOf(id: string, cookie: string) {
    const response = await fetch(`${double.public.url}/self-service/registration/flows?id=${id}`, { headers: { cookie } });
    return { status: response.status, body: (await response.json()) as { ui: { action: string; messages?: { id: number; text: string }[]; nodes: { attributes: { name: string; type: string; value?: string }; meta: { label?: { text: string } } }[] } } };
  }

  it('sends the browser to the registration UI with a flow id and sets the CSRF cookie on the cookie domain', async () => {
    const { id, cookie, response } = await startFlow();
    expect(response.status).toBe(303);
    expect(response.headers.get('location')).toBe(`https://accounts.example.org/registration?flow=${id}`);
    expect(response.headers.get('set-cookie')).toMatch(/^csrf_token_kratos=[\w-]+; Path=\/; HttpOnly; SameSite=Lax; Domain=example\.org$/);
    expect(cookie).toMatch(/^csrf_token_kratos=/);
    expect(drain(double.public)).toEqual([]);
  });

  it('refuses a return_to outside the allowed return URLs', async () => {
    const { response } = await startFlow(`?return_to=${encodeURIComponent('https://evil.test/')}`);
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { id: string } }).error.id).toBe('self_service_flow_return_to_forbidden');
    expect(drain(double.public)).toEqual([]);
  });

  it('renders the identity schema traits, the password, the CSRF token and a Sign up button as UI nodes', async () => {
    const { id, cookie } = await startFlow();
    const { status, body } = await flowOf(id, cookie);
    expect(status).toBe(200);
    expect(body.ui.action).toBe(`${double.public.url}/self-service/registration?flow=${id}`);
    const nodes = body.ui.nodes.map((n) => [n.attributes.name, n.attributes.type, n.meta.label?.text]);
    expect(nodes).toEqual([
      ['csrf_token', 'hidden', undefined],
      ['traits.email', 'email', 'E-mail'],
      ['password', 'password', 'Password'],
      ['traits.name', 'text', 'Name'],
      ['method', 'submit', 'Sign up'],
    ]);
    expect(body.ui.nodes[0]!.attributes.value).toBe(cookie.split('=')[1]);
    expect(drain(double.public)).toEqual([]);
  });

  it('refuses to show a flow to a browser without its CSRF cookie (403)', async () => {
    const { id } = await startFlow();
    const { status } = await flowOf(id, 'csrf_token_kratos=someone-else');
    expect(status).toBe(403);
    expect(drain(double.public)).toEqual([]);
  });

  it('a form post creates the identity with its traits, signs the person in and redirects to the default return URL', async () => {
    const { id, cookie } = await startFlow();
    const csrf = cookie.split('=')[1]!;
    const response = await submit(id, cookie, { csrf_token: csrf, 'traits.email': 'ada@example.org', 'traits.name': 'Ada Lovelace', password: 'analytical-engine-1843', method: 'password' });
    expect(response.status).toBe(303);
    expect(response.headers.get('location')).toBe('https://app.example.org/');
    const identity = [...double.identities.values()].find((i) => i.email === 'ada@example.org');
    expect(identity).toMatchObject({ name: 'Ada Lovelace', password: 'analytical-engine-1843' });
    const session = /^ory_kratos_session=([^;]+); Path=\/; Domain=example\.org; HttpOnly; SameSite=Lax$/.exec(response.headers.get('set-cookie') ?? '');
    expect(session).not.toBeNull();
    const whoami = await fetch(`${double.public.url}/sessions/whoami`, { headers: { cookie: `ory_kratos_session=${session![1]}` } });
    expect(((await whoami.json()) as { identity: { traits: unknown } }).identity.traits).toEqual({ email: 'ada@example.org', name: 'Ada Lovelace' });
    // The flow is used up: sending it again is refused.
    const again = await submit(id, cookie, { csrf_token: csrf, 'traits.email': 'ada2@example.org', 'traits.name': 'Ada', password: 'analytical-engine-1843', method: 'password' });
    expect(again.status).toBe(410);
    expect(drain(double.public)).toEqual([]);
  });

  it('redirects to the allowed return_to the flow was started with', async () => {
    const { id, cookie } = await startFlow(`?return_to=${encodeURIComponent('https://maps.example.org/welcome')}`);
    const response = await submit(id, cookie, { csrf_token: cookie.split('=')[1]!, 'traits.email': 'grace@example.org', 'traits.name': 'Grace Hopper', password: 'cobol-compiler-1959', method: 'password' });
    expect(response.status).toBe(303);
    expect(response.headers.get('location')).toBe('https://maps.example.org/welcome');
    expect(drain(double.public)).toEqual([]);
  });

  it('refuses a post without the flow CSRF token and creates nothing', async () => {
    const { id, cookie } = await startFlow();
    const before = double.identities.size;
    const response = await submit(id, cookie, { csrf_token: 'forged', 'traits.email': 'mallory@example.org', 'traits.name': 'Mallory', password: 'long-enough-password', method: 'password' });
    expect(response.status).toBe(403);
    expect(double.identities.size).toBe(before);
    expect(drain(double.public)).toEqual([]);
  });

  it('answers a duplicate e-mail with 400 and the flow carrying the message, keeping the first identity', async () => {
    double.addIdentity({ email: 'taken@example.org', name: 'First', password: 'first-password-1' });
    const { id, cookie } = await startFlow();
    const before = double.identities.size;
    const response = await submit(id, cookie, { csrf_token: cookie.split('=')[1]!, traits: { email: 'Taken@example.org', name: 'Second' }, password: 'second-password-2', method: 'password' } as never, true);
    expect(response.status).toBe(400);
    const flow = (await response.json()) as { id: string; ui: { messages: { id: number; text: string }[] } };
    expect(flow.id).toBe(id);
    expect(flow.ui.messages).toEqual([expect.objectContaining({ id: 4000007, text: expect.stringContaining('exists already') })]);
    expect(double.identities.size).toBe(before);
    expect(drain(double.public)).toEqual([]);
  });

  it('sends a browser form with a too short password back to the UI, the flow keeping the message and the typed traits', async () => {
    const { id, cookie } = await startFlow();
    const response = await submit(id, cookie, { csrf_token: cookie.split('=')[1]!, 'traits.email': 'short@example.org', 'traits.name': 'Shorty', password: 'seven77', method: 'password' });
    expect(response.status).toBe(303);
    expect(response.headers.get('location')).toBe(`https://accounts.example.org/registration?flow=${id}`);
    const { body } = await flowOf(id, cookie);
    expect(body.ui.messages).toEqual([expect.objectContaining({ id: 4000032, text: expect.stringContaining('at least 8 characters') })]);
    expect(body.ui.nodes.find((n) => n.attributes.name === 'traits.email')!.attributes.value).toBe('short@example.org');
    expect([...double.identities.values()].some((i) => i.email === 'short@example.org')).toBe(false);
    expect(drain(double.public)).toEqual([]);
  });

  it('refuses a form without the password (the spec requires it) as a contract violation', async () => {
    const { id, cookie } = await startFlow();
    const response = await submit(id, cookie, { csrf_token: cookie.split('=')[1]!, 'traits.email': 'nopw@example.org', 'traits.name': 'No Password', method: 'password' });
    expect(response.status).toBe(400);
    expect(drain(double.public).join()).toContain("must have required property 'password'");
  });
});

describe.skipIf(MISSING)('Kratos double: social sign-in as Kratos does it', () => {
  let double: KratosDouble;
  let provider: OidcStandIn;
  beforeAll(async () => {
    const providers: KratosOidcProvider[] = [];
    double = await new KratosDouble({ loginUiUrl: 'http://127.0.0.1:9/login', allowedReturnUrls: ['http://127.0.0.1:9'], oidcProviders: providers }).start();
    provider = await new OidcStandIn({ clientId: 'kratos', clientSecret: 'secret', redirectUris: () => [double.callbackUrl('city')] }).start();
    providers.push({ id: 'city', label: 'City', issuerUrl: provider.issuer, clientId: 'kratos', clientSecret: 'secret', scope: ['openid', 'email'], mapClaims: () => Promise.reject(new Error('not reached in these tests')) });
  });
  afterAll(async () => {
    await double?.close();
    await provider?.close();
  });

  async function startSignIn(): Promise<{ location: string; continuity: string; csrfCookie: string }> {
    const created = await fetch(`${double.public.url}/self-service/login/browser`, { redirect: 'manual' });
    const csrfCookie = created.headers.get('set-cookie')!.split(';')[0]!;
    const id = new URL(created.headers.get('location')!).searchParams.get('flow')!;
    const flow = (await (await fetch(`${double.public.url}/self-service/login/flows?id=${id}`, { headers: { cookie: csrfCookie } })).json()) as { ui: { nodes: Array<{ group: string; attributes: { name: string; value?: string } }> } };
    expect(flow.ui.nodes.filter((n) => n.group === 'oidc').map((n) => n.attributes)).toEqual([expect.objectContaining({ name: 'provider', value: 'city' })]);
    const response = await fetch(`${double.public.url}/self-service/login?flow=${id}`, {
      method: 'POST',
      headers: { cookie: csrfCookie, 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify({ method: 'oidc', provider: 'city', csrf_token: csrfCookie.split('=')[1] }),
    });
    expect(response.status).toBe(422);
    const body = (await response.json()) as { redirect_browser_to: string; error: { id: string } };
    expect(body.error.id).toBe('browser_location_change_required');
    return { location: body.redirect_browser_to, continuity: response.headers.get('set-cookie')!.split(';')[0]!, csrfCookie };
  }

  it('sends the browser to the provider with state, nonce, PKCE (S256) and the callback as redirect URI, on contract', async () => {
    const { location } = await startSignIn();
    const url = new URL(location);
    expect(`${url.origin}${url.pathname}`).toBe(`${provider.issuer}/auth`);
    expect(url.searchParams.get('redirect_uri')).toBe(`${double.public.url}/self-service/methods/oidc/callback/city`);
    expect(url.searchParams.get('code_challenge_method')).toBe('S256');
    for (const name of ['state', 'nonce', 'code_challenge']) expect(url.searchParams.get(name), name).toBeTruthy();
    expect(drain(double.public)).toEqual([]);
  });

  it('refuses a callback from another browser (no continuity cookie) and an unknown state, signing nobody in', async () => {
    const { location, continuity } = await startSignIn();
    const state = new URL(location).searchParams.get('state')!;
    const callback = (query: string, cookie?: string) => fetch(`${double.callbackUrl('city')}?${query}`, { redirect: 'manual', ...(cookie ? { headers: { cookie } } : {}) });
    for (const response of [await callback(`code=x&state=${state}`), await callback(`code=x&state=unknown`, continuity)]) {
      expect(response.status).toBe(303);
      expect(response.headers.get('location')).toContain('/login?error=');
      expect(response.headers.get('set-cookie')).toBeNull();
    }
    expect(double.public.count('oidcCallback')).toBe(2);
    expect(drain(double.public)).toEqual([]);
  });
});
