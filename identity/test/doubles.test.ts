import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Configuration, OAuth2Api } from '@ory/hydra-client';
import { ContractServer } from '../../test/doubles/ory/contract-server.js';
import { hydraSpec, HydraDouble } from '../../test/doubles/ory/hydra-double.js';
import { KratosDouble } from '../../test/doubles/ory/kratos-double.js';
import { OpenApiContract } from '../../test/doubles/ory/openapi-contract.js';
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
