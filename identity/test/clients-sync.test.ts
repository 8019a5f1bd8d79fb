import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../services/shared/config.js';
import { loadClientDeclarations, syncClients, type ClientDeclaration } from '../src/clients/sync.js';
import { CONFIG_DIR } from '../src/config/config-dir.js';
import { createOryClients, type OryClients } from '../../services/shared/ory/clients.js';
import { HydraDouble } from '../../services/shared/testing/ory/hydra-double.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

const MISSING = lacks('the client sync tests on the Hydra double', requirements.contracts());

/** Client sync against the contract-checked Hydra admin double: idempotent, secret shown once. */

const run = promisify(execFile);
let hydra: HydraDouble;
let ory: OryClients;

beforeAll(async () => {
  if (MISSING) return;
  hydra = await new HydraDouble({ loginUrl: 'http://x/login', consentUrl: 'http://x/consent', logoutUrl: 'http://x/logout', postLogoutRedirect: 'http://x/' }).start();
  ory = createOryClients({ kratosPublicUrl: 'http://127.0.0.1:9', kratosAdminUrl: 'http://127.0.0.1:9', hydraAdminUrl: hydra.admin.url });
});
afterAll(async () => {
  if (MISSING) return;
  await hydra.close();
});
afterEach(() => {
  if (MISSING) return;
  expect(hydra.violations).toEqual([]);
});

const declarations: ClientDeclaration[] = [
  { client_id: 'editor', client_name: 'Editor', public: false, first_party: true, redirect_uris: ['https://app.example.org/cb'], post_logout_redirect_uris: [], audience: ['geodata-api'] },
  { client_id: 'mobile', client_name: 'Mobile', public: true, first_party: false, redirect_uris: ['de.example.app:/cb'], post_logout_redirect_uris: ['de.example.app:/bye'], audience: [] },
];

describe.skipIf(MISSING)('client sync', () => {
  it('creates the clients, with a generated secret for a confidential one and none for a public one', async () => {
    const outcomes = await syncClients(ory.oauth2, declarations);
    expect(outcomes).toEqual([
      { clientId: 'editor', action: 'created', clientSecret: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/) },
      { clientId: 'mobile', action: 'created' },
    ]);
    const editor = hydra.clients.get('editor');
    expect(editor).toMatchObject({ grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], scope: 'openid offline_access profile email', skip_consent: true, token_endpoint_auth_method: 'client_secret_basic' });
    expect(editor?.client_secret).toBe((outcomes[0] as { clientSecret: string }).clientSecret);
    expect(hydra.clients.get('mobile')).toMatchObject({ token_endpoint_auth_method: 'none' });
  });

  it('a second run changes nothing and shows no secret', async () => {
    const secretBefore = hydra.clients.get('editor')?.client_secret;
    const outcomes = await syncClients(ory.oauth2, declarations);
    expect(outcomes).toEqual([
      { clientId: 'editor', action: 'unchanged' },
      { clientId: 'mobile', action: 'unchanged' },
    ]);
    expect(hydra.admin.count('setOAuth2Client')).toBe(0);
    expect(hydra.clients.get('editor')?.client_secret).toBe(secretBefore);
  });

  it('a changed redirect URI updates the client and keeps its secret', async () => {
    const secretBefore = hydra.clients.get('editor')?.client_secret;
    const changed = [{ ...(declarations[0] as ClientDeclaration), redirect_uris: ['https://app.example.org/cb', 'https://beta.example.org/cb'] }];
    expect(await syncClients(ory.oauth2, changed)).toEqual([{ clientId: 'editor', action: 'updated', fields: ['redirect_uris'] }]);
    expect(hydra.clients.get('editor')?.redirect_uris).toEqual(['https://app.example.org/cb', 'https://beta.example.org/cb']);
    expect(hydra.clients.get('editor')?.client_secret).toBe(secretBefore);
    expect(await syncClients(ory.oauth2, changed)).toEqual([{ clientId: 'editor', action: 'unchanged' }]);
  });

  it('the command run twice as a process: the secret is printed once, then never again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'clients-'));
    const file = join(dir, 'clients.yaml');
    writeFileSync(file, 'clients:\n  - client_id: reports\n    client_name: Reports\n    redirect_uris:\n      - https://reports.${IDENTITY_PARENT_DOMAIN}/cb\n');
    const env = { ...process.env, HYDRA_ADMIN_URL: hydra.admin.url, IDENTITY_PARENT_DOMAIN: 'example.org' };
    const cli = join(import.meta.dirname, '../src/clients/sync-cli.ts');
    const first = await run(process.execPath, ['--import', 'tsx', cli, '--file', file], { env });
    expect(first.stdout).toMatch(/created {3}reports\n {10}client_secret \(shown once, store it now\): \S{43}\n/);
    const second = await run(process.execPath, ['--import', 'tsx', cli, '--file', file], { env });
    expect(second.stdout).toBe('unchanged reports\n');
    expect(hydra.clients.get('reports')?.redirect_uris).toEqual(['https://reports.example.org/cb']);
  });

  it('the shipped clients.yaml is valid', () => {
    const clients = loadClientDeclarations(join(CONFIG_DIR, 'clients.yaml'), { IDENTITY_PARENT_DOMAIN: 'example.org' });
    expect(clients.map((c) => c.client_id)).toEqual(['map-editor', 'field-app']);
  });

  it('every shipped client may request tokens for the API audience (geodata-api, or the stack\'s apiAudience)', () => {
    const byDefault = loadClientDeclarations(join(CONFIG_DIR, 'clients.yaml'), { IDENTITY_PARENT_DOMAIN: 'example.org' });
    for (const client of byDefault) expect(client.audience, client.client_id).toEqual(['geodata-api']);
    const configured = loadClientDeclarations(join(CONFIG_DIR, 'clients.yaml'), { IDENTITY_PARENT_DOMAIN: 'example.org', IDENTITY_API_AUDIENCE: 'city-api' });
    for (const client of configured) expect(client.audience, client.client_id).toEqual(['city-api']);
  });

  it('a client synced without the audience gets it on the next run, and Hydra then grants it', async () => {
    const [editor] = declarations as [ClientDeclaration];
    await syncClients(ory.oauth2, [{ ...editor, client_id: 'legacy', audience: [] }]);
    expect(hydra.clients.get('legacy')?.audience).toEqual([]);
    const outcomes = await syncClients(ory.oauth2, [{ ...editor, client_id: 'legacy' }]);
    expect(outcomes).toEqual([{ clientId: 'legacy', action: 'updated', fields: ['audience'] }]);
    expect(hydra.clients.get('legacy')?.audience).toEqual(['geodata-api']);
  });

  it('refuses a file with a plain-http redirect URI or a duplicate client_id, naming the key', () => {
    const dir = mkdtempSync(join(tmpdir(), 'clients-'));
    const file = join(dir, 'clients.yaml');
    writeFileSync(file, 'clients:\n  - client_id: a-client\n    client_name: A\n    redirect_uris: [http://app.example.org/cb]\n  - client_id: a-client\n    client_name: B\n    redirect_uris: [https://x.example.org/cb]\n');
    expect(() => loadClientDeclarations(file, {})).toThrow(ConfigError);
    expect(() => loadClientDeclarations(file, {})).toThrow(/clients\.0\.redirect_uris\.0: http is only allowed for localhost.*clients\.1\.client_id: duplicate client_id a-client/);
  });
});
