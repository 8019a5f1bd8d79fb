import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkIdentityConfig, formatFinding, mapperProblems } from '../src/config/check.js';
import { createAjv } from '../../services/shared/ajv.js';
import { OIDC_CONTAINER_VARIABLE, containerEnvironment, effectiveConfig, renderTemplate } from '../../services/shared/identity-config/render.js';
import { CONFIG_DIR } from '../src/config/config-dir.js';
import { VALID_ENV } from './fixtures.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

/**
 * Social sign-in configuration: the providers an operator declares (IDENTITY_OIDC_PROVIDERS) with their
 * secrets (KRATOS_OIDC_CLIENT_SECRETS) become Kratos' `oidc` method; the result validates against
 * Kratos' vendored schema, and a provider without a secret or with a mapper that gives a role is refused.
 */

const MISSING = lacks('the Ory config checks (they validate against the upstream schemas)', requirements.contracts());
const HAS_JSONNET = spawnSync('jsonnet', ['--version']).status === 0;
if (!HAS_JSONNET) console.warn('skipped: evaluating the claims mappers needs the jsonnet command (Debian package jsonnet)');

const ENTRA = { id: 'entra', provider: 'generic', label: 'Microsoft Entra ID', client_id: 'c0ffee-app', issuer_url: 'https://login.microsoftonline.com/8eaef023-2b34-4da1-9baa-8bc8c9d6a490/v2.0', scope: ['openid', 'email', 'profile'] };
const GITHUB = { id: 'github', provider: 'github', label: 'GitHub', client_id: 'Iv1.abc', scope: ['read:user', 'user:email'] };
const SECRETS = JSON.stringify({ entra: 'entra-secret-value-1', github: 'github-secret-value-2' });

function withProviders(providers: unknown[], secrets: string | undefined = SECRETS): Record<string, string> {
  return { ...VALID_ENV, IDENTITY_OIDC_PROVIDERS: JSON.stringify(providers), ...(secrets === undefined ? {} : { KRATOS_OIDC_CLIENT_SECRETS: secrets }) };
}

function check(env: Record<string, string>, configDir?: string): string[] {
  return checkIdentityConfig(env, configDir ? { configDir } : {}).map(formatFinding);
}

describe.skipIf(MISSING)('social sign-in configuration', () => {
  it('a generic OIDC provider and GitHub with their secrets validate against Kratos\' schema', () => {
    expect(check(withProviders([ENTRA, GITHUB]))).toEqual([]);
    const providers = (effectiveConfig('kratos', withProviders([ENTRA, GITHUB]), CONFIG_DIR) as { selfservice: { methods: { oidc: { enabled: boolean; config: { providers: Array<Record<string, string>> } } } } }).selfservice.methods.oidc;
    expect(providers.enabled).toBe(true);
    expect(providers.config.providers.map((p) => [p.id, p.client_secret, p.mapper_url?.slice(0, 9)])).toEqual([
      ['entra', 'entra-secret-value-1', 'base64://'],
      ['github', 'github-secret-value-2', 'base64://'],
    ]);
  });

  it('the rendered kratos.yml holds no provider and no secret; the container gets them in one variable', () => {
    const env = withProviders([ENTRA, GITHUB]);
    const rendered = JSON.stringify(renderTemplate('kratos', env, CONFIG_DIR));
    expect(rendered).not.toContain('entra-secret-value-1');
    expect(rendered).not.toContain('c0ffee-app');
    const container = containerEnvironment('kratos', env, CONFIG_DIR);
    const providers = JSON.parse(container[OIDC_CONTAINER_VARIABLE] ?? '[]') as Array<{ id: string; client_secret: string }>;
    expect(providers.map((p) => [p.id, p.client_secret])).toEqual([['entra', 'entra-secret-value-1'], ['github', 'github-secret-value-2']]);
    expect(containerEnvironment('kratos', VALID_ENV, CONFIG_DIR)[OIDC_CONTAINER_VARIABLE]).toBeUndefined();
  });

  it('a provider without a client secret is refused, naming it', () => {
    const findings = check(withProviders([ENTRA, GITHUB], JSON.stringify({ entra: 'entra-secret-value-1' })));
    expect(findings).toContain('kratos.yml: selfservice.methods.oidc.config.providers[1].client_secret is not set for provider github (KRATOS_OIDC_CLIENT_SECRETS["github"])');
    expect(check(withProviders([ENTRA], JSON.stringify({ entra: '  ' })))).toContain(
      'kratos.yml: selfservice.methods.oidc.config.providers[0].client_secret is not set for provider entra (KRATOS_OIDC_CLIENT_SECRETS["entra"])',
    );
  });

  it('a client secret written into the provider declaration is refused without echoing it', () => {
    const findings = check(withProviders([{ ...ENTRA, client_secret: 'leaked-in-plain-config' }]));
    expect(findings).toEqual([expect.stringContaining('holds a client_secret: put it in KRATOS_OIDC_CLIENT_SECRETS')]);
    expect(findings.join('\n')).not.toContain('leaked-in-plain-config');
  });

  it('a mapper that gives a role is refused', () => {
    const dir = mkdtempSync(join(tmpdir(), 'identity-oidc-'));
    cpSync(CONFIG_DIR, dir, { recursive: true });
    const generic = join(dir, 'oidc', 'generic.jsonnet');
    writeFileSync(generic, readFileSync(generic, 'utf8').replace("verified_addresses:", "metadata_public: { role: 'admin' },\n    verified_addresses:"));
    expect(check(withProviders([ENTRA]), dir)).toEqual([
      'kratos.yml: selfservice.methods.oidc.config.providers[0].mapper_url the claims mapper of entra sets identity metadata (metadata_public/metadata_admin): a provider must never grant a role',
      'kratos.yml: selfservice.methods.oidc.config.providers[0].mapper_url the claims mapper of entra mentions a role: a mapper maps e-mail and name only, roles are granted by an administrator',
    ]);
    expect(mapperProblems("local c = std.extVar('claims'); { identity: { traits: { email: c.email, role: c.groups[0] } } }")).toEqual([
      'mentions a role: a mapper maps e-mail and name only, roles are granted by an administrator',
    ]);
    // The shipped mappers only talk about roles in their comments.
    for (const mapper of ['generic', 'github']) expect(mapperProblems(readFileSync(join(CONFIG_DIR, 'oidc', `${mapper}.jsonnet`), 'utf8'))).toEqual([]);
  });

  it('a provider off Kratos\' schema (unknown type, Microsoft without tenant) fails the schema check', () => {
    const findings = check(withProviders([{ ...ENTRA, provider: 'keycloak-ish' }, { ...GITHUB, id: 'ms', provider: 'microsoft' }], JSON.stringify({ entra: 'x-secret', ms: 'y-secret' })));
    expect(findings.some((f) => f.includes('providers/0/provider') || f.includes('providers[0].provider'))).toBe(true);
    expect(findings.some((f) => f.includes('microsoft_tenant'))).toBe(true);
  });

  it('an http issuer, a duplicate id and an unknown mapper are refused', () => {
    expect(check(withProviders([{ ...ENTRA, issuer_url: 'http://keycloak.example.org/realms/city' }]))).toContain(
      'kratos.yml: selfservice.methods.oidc.config.providers[0].issuer_url must use https outside dev mode, is http://keycloak.example.org/realms/city',
    );
    expect(check(withProviders([ENTRA, ENTRA]))).toContain('kratos.yml: selfservice.methods.oidc.config.providers[1].id entra is used by two providers');
    expect(check(withProviders([{ ...ENTRA, mapper: 'https://evil.example/mapper.jsonnet' }]))).toEqual([expect.stringContaining('mapper must be one of generic, github')]);
  });
});

describe.skipIf(!HAS_JSONNET)('the claims mappers, evaluated as Kratos does (claims as ext code)', () => {
  const evaluate = (mapper: string, claims: Record<string, unknown>) =>
    JSON.parse(execFileSync('jsonnet', ['--ext-code', `claims=${JSON.stringify(claims)}`, join(CONFIG_DIR, 'oidc', `${mapper}.jsonnet`)], { encoding: 'utf8' })) as { identity: Record<string, unknown> };

  it('generic: e-mail and name, verified only when the provider says so, and no role whatever the claims say', () => {
    const claims = { sub: 'k-1', email: 'erika@city.example', email_verified: true, name: 'Erika Muster', role: 'admin', groups: ['admins'], raw_claims: { roles: ['admin'] } };
    expect(evaluate('generic', claims)).toEqual({ identity: { traits: { email: 'erika@city.example', name: 'Erika Muster' }, verified_addresses: [{ via: 'email', value: 'erika@city.example' }] } });
    expect(evaluate('generic', { ...claims, email_verified: false }).identity.verified_addresses).toEqual([]);
    expect(evaluate('generic', { sub: 'k-2', email: 'x@city.example', given_name: 'Xaver', family_name: 'Y' }).identity.traits).toEqual({ email: 'x@city.example', name: 'Xaver Y' });
  });

  it('what the mappers produce is an identity the identity schema accepts (traits only, no metadata)', () => {
    const schema = JSON.parse(readFileSync(join(CONFIG_DIR, 'identity.schema.json'), 'utf8')) as { properties: { traits: Record<string, unknown> } };
    const validTraits = createAjv().compile(schema.properties.traits);
    for (const [mapper, claims] of [
      ['generic', { sub: 'k', email: 'a.b@city.example', email_verified: true, name: 'A B', role: 'admin' }],
      ['generic', { sub: 'k', email: 'c@city.example', given_name: 'C', family_name: 'D' }],
      ['github', { sub: '1', email: 'gh@example.org', email_verified: true, nickname: 'gh' }],
    ] as const) {
      const { identity } = evaluate(mapper, claims);
      expect(Object.keys(identity).sort(), mapper).toEqual(['traits', 'verified_addresses']);
      expect(validTraits(identity.traits), `${mapper}: ${JSON.stringify(validTraits.errors)}`).toBe(true);
    }
  });

  it('github: the login stands in for a missing name', () => {
    expect(evaluate('github', { sub: '42', email: 'octo@example.org', email_verified: true, nickname: 'octocat' })).toEqual({
      identity: { traits: { email: 'octo@example.org', name: 'octocat' }, verified_addresses: [{ via: 'email', value: 'octo@example.org' }] },
    });
  });
});
