import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parse as parseYaml } from 'yaml';
import { describe, expect, it } from 'vitest';
import { checkIdentityConfig, formatFinding } from '../src/config/check.js';
import { containerEnvironment, effectiveConfig, parseListVariable } from '../../services/shared/identity-config/render.js';
import { CONFIG_DIR } from '../src/config/config-dir.js';
import { VALID_ENV } from './fixtures.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

const MISSING = lacks('the Ory config checks (they validate against the upstream schemas)', requirements.contracts());

/** The shipped Kratos/Hydra configs against the vendored v26.2.0 schemas, and each runtime rule failing. */

const run = promisify(execFile);


function check(changes: Record<string, string | undefined>, configDir?: string) {
  const env = { ...VALID_ENV, ...changes };
  return checkIdentityConfig(env, configDir ? { configDir } : {}).map(formatFinding);
}

describe.skipIf(MISSING)('shipped configuration', () => {
  it('kratos.yml, hydra.yml and the identity schema validate against the vendored schemas', () => {
    expect(check({})).toEqual([]);
  });

  it('Kratos and Hydra get separate databases, and no secret is written into a rendered file', () => {
    const kratos = effectiveConfig('kratos', VALID_ENV, CONFIG_DIR);
    const hydra = effectiveConfig('hydra', VALID_ENV, CONFIG_DIR);
    expect(kratos.dsn).not.toBe(hydra.dsn);
    const files = ['kratos.yml', 'hydra.yml'].map((f) => readFileSync(join(CONFIG_DIR, f), 'utf8')).join('\n');
    expect(files).not.toMatch(/dsn:|secrets:|connection_uri/);
  });

  it('sets the session cookie on the parent domain, Hydra\'s login/consent/logout on the auth app, PKCE for public clients', () => {
    const kratos = effectiveConfig('kratos', VALID_ENV, CONFIG_DIR);
    const hydra = effectiveConfig('hydra', VALID_ENV, CONFIG_DIR);
    const at = (doc: unknown, path: string): unknown => path.split('.').reduce<unknown>((node, key) => (node as Record<string, unknown> | undefined)?.[key], doc);
    expect(at(kratos, 'session.cookie.domain')).toBe('example.org');
    expect(at(kratos, 'serve.public.cors.allowed_origins')).toEqual(['https://example.org', 'https://*.example.org']);
    expect(at(kratos, 'selfservice.methods.totp.enabled')).toBe(true);
    expect(at(kratos, 'selfservice.methods.webauthn.enabled')).toBe(true);
    expect(at(kratos, 'selfservice.methods.passkey.enabled')).toBe(true);
    expect(at(kratos, 'selfservice.flows.recovery.use')).toBe('code');
    expect(at(kratos, 'selfservice.flows.verification.use')).toBe('code');
    expect(at(kratos, 'selfservice.flows.login.ui_url')).toBe('https://auth.example.org/self-service/login');
    expect(at(kratos, 'selfservice.flows.registration.ui_url')).toBe('https://auth.example.org/registration');
    expect(at(effectiveConfig('kratos', { ...VALID_ENV, IDENTITY_ACCOUNTS_URL: 'https://accounts.example.org' }, CONFIG_DIR), 'selfservice.flows.registration.ui_url')).toBe('https://accounts.example.org/registration');
    expect(at(hydra, 'urls')).toMatchObject({ login: 'https://auth.example.org/login', consent: 'https://auth.example.org/consent', logout: 'https://auth.example.org/logout' });
    expect(at(hydra, 'urls.identity_provider.url')).toBe('http://kratos:4434');
    expect(at(hydra, 'oauth2.pkce.enforced_for_public_clients')).toBe(true);
  });

  it('the container environment uses Ory\'s own variable names', () => {
    expect(Object.keys(containerEnvironment('kratos', VALID_ENV, CONFIG_DIR)).sort()).toEqual(['COURIER_SMTP_CONNECTION_URI', 'DSN', 'SECRETS_CIPHER', 'SECRETS_COOKIE', 'SECRETS_DEFAULT']);
    expect(Object.keys(containerEnvironment('hydra', VALID_ENV, CONFIG_DIR)).sort()).toEqual(['DSN', 'SECRETS_SYSTEM']);
  });

  it('reads list variables like Ory: a JSON array or comma-separated', () => {
    expect(parseListVariable('["a,b","c"]')).toEqual(['a,b', 'c']);
    expect(parseListVariable('new-secret, old-secret')).toEqual(['new-secret', 'old-secret']);
  });
});

describe.skipIf(MISSING)('runtime rules, each naming its key', () => {
  it('Kratos cipher secret of 31 characters → secrets.cipher[0]', () => {
    expect(check({ KRATOS_SECRETS_CIPHER: 'x'.repeat(31) })).toContain('kratos.yml: secrets.cipher[0] must be exactly 32 characters, has 31 (Kratos ignores it otherwise)');
  });

  it('Kratos cipher secret of 33 characters → secrets.cipher[0]', () => {
    expect(check({ KRATOS_SECRETS_CIPHER: 'x'.repeat(33) })).toContain('kratos.yml: secrets.cipher[0] must be exactly 32 characters, has 33 (Kratos ignores it otherwise)');
  });

  it('an old rotated cipher secret of the wrong length → secrets.cipher[1]', () => {
    const findings = check({ KRATOS_SECRETS_CIPHER: `${'a'.repeat(32)},${'b'.repeat(40)}` });
    expect(findings).toContain('kratos.yml: secrets.cipher[1] must be exactly 32 characters, has 40 (Kratos ignores it otherwise)');
    expect(findings.every((f) => f.includes('secrets.cipher[1]'))).toBe(true);
  });

  it('no cipher secret → secrets.cipher', () => {
    expect(check({ KRATOS_SECRETS_CIPHER: undefined })).toContain('kratos.yml: secrets.cipher is not set (KRATOS_SECRETS_CIPHER): one secret of exactly 32 characters is needed');
  });

  it('no default secret → secrets.default', () => {
    expect(check({ KRATOS_SECRETS_DEFAULT: '' })).toEqual([expect.stringMatching(/^kratos\.yml: secrets\.default is not set/)]);
  });

  it('an http issuer → urls.self.issuer', () => {
    expect(check({ HYDRA_PUBLIC_URL: 'http://oauth.example.org/' })).toEqual(['hydra.yml: urls.self.issuer must use https outside dev mode, is http://oauth.example.org/']);
  });

  it('an http issuer is accepted in dev mode only', () => {
    expect(check({ HYDRA_PUBLIC_URL: 'http://127.0.0.1:4444/', IDENTITY_DEV_MODE: 'true' })).toEqual([]);
  });

  it('a Hydra system secret of 31 characters (the schema allows 16) → secrets.system[0]', () => {
    expect(check({ HYDRA_SECRETS_SYSTEM: 's'.repeat(31) })).toEqual(['hydra.yml: secrets.system[0] must be at least 32 characters, has 31']);
  });

  it('no Hydra system secret → secrets.system', () => {
    expect(check({ HYDRA_SECRETS_SYSTEM: undefined })).toEqual(['hydra.yml: secrets.system is not set (HYDRA_SECRETS_SYSTEM)']);
  });
});

const ACCOUNTS = 'https://accounts.example.org';

describe.skipIf(MISSING)('passkey and WebAuthn origins', () => {
  it('cover the login app and the accounts pages where keys are registered', () => {
    const kratos = effectiveConfig('kratos', { ...VALID_ENV, IDENTITY_ACCOUNTS_URL: ACCOUNTS }, CONFIG_DIR) as { selfservice: { methods: Record<string, { config: { rp: { origins: string[] } } }> } };
    for (const method of ['webauthn', 'passkey']) {
      expect(kratos.selfservice.methods[method]?.config.rp.origins, method).toEqual([VALID_ENV.IDENTITY_AUTH_URL, ACCOUNTS]);
    }
    expect(check({ IDENTITY_ACCOUNTS_URL: ACCOUNTS })).toEqual([]);
  });

  it('an origin list without the accounts domain → rp.origins naming the page it breaks', () => {
    const dir = mkdtempSync(join(tmpdir(), 'identity-config-'));
    cpSync(CONFIG_DIR, dir, { recursive: true });
    const kratos = readFileSync(join(dir, 'kratos.yml'), 'utf8').replaceAll('            - ${IDENTITY_ACCOUNTS_URL:-$IDENTITY_AUTH_URL}\n', '');
    writeFileSync(join(dir, 'kratos.yml'), kratos);
    const accounts = ACCOUNTS;
    expect(check({ IDENTITY_ACCOUNTS_URL: ACCOUNTS }, dir)).toEqual([
      `kratos.yml: selfservice.methods.webauthn.config.rp.origins lacks ${accounts}, where the registration page runs (a key used there is refused)`,
      `kratos.yml: selfservice.methods.webauthn.config.rp.origins lacks ${accounts}, where the settings page runs (a key used there is refused)`,
      `kratos.yml: selfservice.methods.passkey.config.rp.origins lacks ${accounts}, where the registration page runs (a key used there is refused)`,
      `kratos.yml: selfservice.methods.passkey.config.rp.origins lacks ${accounts}, where the settings page runs (a key used there is refused)`,
    ]);
  });
});

describe.skipIf(MISSING)('preview domains', () => {
  it('a preview site under the cookie domain is refused, naming it; one on its own domain passes', () => {
    expect(check({ IDENTITY_PREVIEW_DOMAINS: 'de1.example-preview.net, fv.example-preview.net' })).toEqual([]);
    expect(check({ IDENTITY_PREVIEW_DOMAINS: 'de1.example-preview.net,de2.sites.example.org' })).toEqual([
      "kratos.yml: session.cookie.domain example.org covers the preview site de2.sites.example.org: it would receive every user's session cookie; put preview sites on a registrable domain of their own",
    ]);
  });
});

describe.skipIf(MISSING)('schema findings name the key', () => {
  it('a missing DSN → dsn (required by the Kratos schema)', () => {
    expect(check({ KRATOS_DSN: undefined })).toEqual(["kratos.yml: dsn must have required property 'dsn'"]);
  });

  it('a URL that is not a URI → serve.admin.base_url', () => {
    expect(check({ KRATOS_ADMIN_URL: 'kratos admin' })).toContain('kratos.yml: serve.admin.base_url must match format "uri"');
  });

  it('a short Kratos default secret → secrets.default[0]', () => {
    expect(check({ KRATOS_SECRETS_DEFAULT: 'short' })).toEqual(['kratos.yml: secrets.default[0] must NOT have fewer than 16 characters']);
  });

  it('a misspelt key in a template → that key', () => {
    const dir = mkdtempSync(join(tmpdir(), 'identity-config-'));
    cpSync(CONFIG_DIR, dir, { recursive: true });
    const hydra = readFileSync(join(dir, 'hydra.yml'), 'utf8').replace('  pkce:\n    enforced_for_public_clients: true', '  pkce:\n    enforce_for_public_clients: true');
    writeFileSync(join(dir, 'hydra.yml'), hydra);
    expect(check({}, dir)).toEqual(['hydra.yml: oauth2.pkce.enforce_for_public_clients is not a known key']);
  });

  it('a missing template variable → the variable and where it is used', () => {
    expect(check({ IDENTITY_PARENT_DOMAIN: undefined }).join('\n')).toContain('kratos.yml: (template) kratos.yml: serve.public.cors.allowed_origins[0] needs the environment variable IDENTITY_PARENT_DOMAIN');
  });

  it('an identity schema off the Kratos meta-schema → the key inside it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'identity-config-'));
    cpSync(CONFIG_DIR, dir, { recursive: true });
    const text = readFileSync(join(dir, 'identity.schema.json'), 'utf8').replace('"password": { "identifier": true }', '"password": { "identifier": "yes" }');
    expect(text).toContain('"identifier": "yes"');
    const schema = JSON.parse(text) as unknown;
    writeFileSync(join(dir, 'identity.schema.json'), JSON.stringify(schema));
    expect(check({}, dir)).toContain('identity.schema.json: properties.traits.properties.email.ory.sh/kratos.credentials.password.identifier must be boolean');
  });
});

describe.skipIf(MISSING)('npm run identity:check (the process)', () => {
  const cli = join(import.meta.dirname, '../src/config/check-cli.ts');

  it('exits 0 on a valid environment', async () => {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', cli], { env: { ...process.env, ...VALID_ENV } });
    expect(stdout).toContain('valid for Ory v26.2.0');
  });

  it('exits 1 naming every offending key, and prints no secret', async () => {
    const env = { ...process.env, ...VALID_ENV, KRATOS_SECRETS_CIPHER: 'tooshort-cipher-secret', HYDRA_SECRETS_SYSTEM: 'short-system-secret-1' };
    const failure = await run(process.execPath, ['--import', 'tsx', cli], { env }).then(
      () => undefined,
      (error: { code: number; stderr: string; stdout: string }) => error,
    );
    expect(failure?.code).toBe(1);
    expect(failure?.stderr).toContain('FAIL kratos.yml: secrets.cipher[0]');
    expect(failure?.stderr).toContain('FAIL hydra.yml: secrets.system[0]');
    for (const secret of ['tooshort-cipher-secret', 'short-system-secret-1', 'k-pass', 'h-pass', 'm-pass']) {
      expect(`${failure?.stdout}${failure?.stderr}`).not.toContain(secret);
    }
  });

  it('identity:render writes mountable files that contain no secret', async () => {
    const out = mkdtempSync(join(tmpdir(), 'identity-render-'));
    await run(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '../src/config/render-cli.ts'), '--out', out], { env: { ...process.env, ...VALID_ENV } });
    const rendered = ['kratos.yml', 'hydra.yml'].map((f) => readFileSync(join(out, f), 'utf8')).join('\n');
    for (const value of Object.entries(VALID_ENV).filter(([k]) => /DSN|SECRET|SMTP_URI/.test(k)).map(([, v]) => v)) expect(rendered).not.toContain(value);
    expect((parseYaml(readFileSync(join(out, 'hydra.yml'), 'utf8')) as { urls: { self: { issuer: string } } }).urls.self.issuer).toBe('https://oauth.example.org/');
  });
});
