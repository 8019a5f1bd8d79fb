import { beforeAll, describe, expect, it } from 'vitest';
import { declaredContainer, declareDockerUnderMocks, isSecretEnvelope, resolved, reveal, type RegisteredResource } from '../testing/pulumi-mocks.js';

/**
 * Social sign-in from the stack configuration: the providers an operator declares (oidcProviders) and
 * their client secrets (the secret oidcClientSecrets) reach Kratos and its migration as Kratos' one
 * providers variable, with the shipped Jsonnet mapper inlined, and only inside a secret.
 */

const CONTAINER = 'docker:index/container:Container';
let registered: RegisteredResource[];
const PROVIDERS = [
  { id: 'city-entra', provider: 'microsoft', label: 'City account', client_id: 'entra-client', microsoft_tenant: 'contoso.example', mapper: 'generic' },
  { id: 'github', provider: 'github', client_id: 'gh-client', mapper: 'github' },
];

beforeAll(async () => {
  const declaredStack = await declareDockerUnderMocks({
    config: { oidcProviders: PROVIDERS },
    secrets: { oidcClientSecrets: JSON.stringify({ 'city-entra': 'entra-secret-from-the-operator', github: 'github-secret-from-the-operator' }) },
  });
  registered = declaredStack.registered;
  await resolved(declaredStack.program.stack.containers.kratos.id);
});

const declared = (name: string) => declaredContainer(registered, name);
const envOf = (name: string) => declared(name).env;

describe('social sign-in providers declared in the stack', () => {
  it.each(['kratos', 'kratos-migrate'])('%s gets every provider with its client secret and the mapper inlined, in Kratos\' providers variable', (name) => {
    const providers = JSON.parse(envOf(name).SELFSERVICE_METHODS_OIDC_CONFIG_PROVIDERS ?? '[]') as { id: string; client_id: string; client_secret: string; mapper_url: string }[];
    expect(providers.map((p) => [p.id, p.client_id, p.client_secret])).toEqual([
      ['city-entra', 'entra-client', 'entra-secret-from-the-operator'],
      ['github', 'gh-client', 'github-secret-from-the-operator'],
    ]);
    for (const p of providers) expect(p.mapper_url).toMatch(/^base64:\/\//);
  });

  it('the environment holding the client secrets is a secret in the state', () => {
    expect(isSecretEnvelope(declared('kratos').inputs.envs)).toBe(true);
  });

  it('no other container learns a client secret', () => {
    for (const r of registered.filter((c) => c.type === CONTAINER && c.name !== 'kratos' && c.name !== 'kratos-migrate')) {
      expect(JSON.stringify(reveal(r.inputs.envs) ?? []), r.name).not.toContain('secret-from-the-operator');
    }
  });
});
