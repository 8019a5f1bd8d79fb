import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { beforeAll, describe, expect, it } from 'vitest';
import { StackConfigSchema } from '../config.js';
import { SECRET_SPECS } from '../secrets.js';
import { installMocks, PROJECT, resolved, type RegisteredResource } from '../testing/pulumi-mocks.js';

/**
 * infra/Pulumi.example.yaml documents every configuration key with a working value: the program,
 * run under the mocks with exactly that file's values (plus the one required secret), declares the
 * whole stack; every key the program reads is in the file; no secret has a value in it.
 */

const text = readFileSync(join(import.meta.dirname, '..', 'Pulumi.example.yaml'), 'utf8');
const example = (parseYaml(text) as { config: Record<string, unknown> }).config;
const keys = Object.keys(example).map((k) => k.replace(`${PROJECT}:`, ''));
const SECRET_KEYS = [...Object.keys(SECRET_SPECS), 'smtpConnectionUri', 'webhookSecrets'];

let registered: RegisteredResource[];

beforeAll(async () => {
  registered = await installMocks({
    config: { ...Object.fromEntries(keys.map((k) => [k, example[`${PROJECT}:${k}`]])), smtpConnectionUri: 'smtp://mail.example.org:25/' },
    secretKeys: ['smtpConnectionUri'],
  });
  const program = await import('../program.js');
  await Promise.all(Object.values(program.stack.containers).map((c) => (c ? resolved(c.id) : undefined)));
});

describe('Pulumi.example.yaml', () => {
  it('sets every non-secret key the program reads', () => {
    expect(keys.sort()).toEqual(Object.keys(StackConfigSchema.shape).sort());
  });

  it('documents every secret with `pulumi config set --secret`, and gives none a value', () => {
    for (const key of SECRET_KEYS) {
      expect(text, key).toMatch(new RegExp(`#.*\\b${key}\\b`));
      expect(keys, key).not.toContain(key);
    }
    expect(text).toContain('pulumi config set --secret smtpConnectionUri');
  });

  it('is a working configuration: the whole stack is declared from it', () => {
    const containers = registered.filter((r) => r.type === 'docker:index/container:Container').map((r) => r.name);
    expect(containers).toEqual(
      expect.arrayContaining(['proxy', 'api', 'geoserver', 'kratos', 'hydra', 'login', 'accounts-ui', 'webhook', 'egress', 'site-main', 'builder-main', 'site-feature-de1', 'builder-feature-de1', 'backup']),
    );
  });
});
