import { beforeAll, describe, expect, it } from 'vitest';
import { declareDockerUnderMocks, resolved, reveal, type RegisteredResource } from '../testing/pulumi-mocks.js';

/**
 * The same program with the optional disk limit on and a failing Kratos migration: the identity
 * containers get the 10 GB writable-layer limit, and Kratos is never created after its migration
 * failed (the deployment stops there), while Hydra, whose migration succeeded, still comes up.
 */

const CONTAINER = 'docker:index/container:Container';
let registered: RegisteredResource[];
const errors: string[] = [];
const SHORT_SECRET = 'too-short-login-secret-31-chars';
// A cipher rotation in progress: the new secret first, the old one still accepted for decryption.
const CIPHER_ROTATION = `${'N'.repeat(32)},${'O'.repeat(32)}`;

beforeAll(async () => {
  // The failed job's error surfaces as the rejection of the dependent's registration.
  const onRejection = (reason: unknown) => errors.push(String(reason instanceof Error ? reason.message : reason));
  process.on('unhandledRejection', onRejection);
  const declared = await declareDockerUnderMocks({
    config: { identityDiskLimit: 'true' },
    secrets: { loginCookieSecret: SHORT_SECRET, kratosCipherSecret: CIPHER_ROTATION },
    jobExitCodes: { 'kratos-migrate': 1 },
  });
  registered = declared.registered;
  await resolved(declared.program.stack.containers.hydra.id);
  // Let the rejected registration settle.
  await new Promise((resolve) => setTimeout(resolve, 200));
  process.off('unhandledRejection', onRejection);
});

const container = (name: string) => registered.find((r) => r.type === CONTAINER && r.name === name);

describe('with identityDiskLimit', () => {
  it('every identity container has a 10G writable-layer limit, the others none', () => {
    // (Kratos and the login app are not created in this run: see the failed migration below.)
    for (const name of ['identity-db', 'kratos-migrate', 'hydra-migrate', 'hydra']) {
      expect(container(name)?.inputs.storageOpts, name).toEqual({ size: '10G' });
    }
    for (const name of ['features-db', 'geoserver', 'proxy', 'webhook']) {
      expect(container(name)?.inputs.storageOpts, name).toBeUndefined();
    }
  });
});

describe('a failed migration', () => {
  it('stops Kratos from being created and names the job in the error', () => {
    expect(container('kratos-migrate')).toBeDefined();
    expect(container('kratos')).toBeUndefined();
    expect(container('login'), 'the login app needs Kratos').toBeUndefined();
    expect(errors.join('\n')).toContain('job kratos-migrate exited with code 1');
  });

  it('stops the backup from being created: its first dump would hold a half-migrated database', () => {
    expect(container('backup')).toBeUndefined();
  });

  it('does not hold back the other identity service', () => {
    expect(container('hydra')).toBeDefined();
  });
});

describe('a Kratos cipher secret rotation (new,old)', () => {
  it('is accepted and reaches Kratos as Ory\'s comma-separated list', () => {
    const envs = (reveal(container('kratos-migrate')?.inputs.envs) as string[]).filter((e) => e.startsWith('SECRETS_CIPHER='));
    expect(envs).toEqual([`SECRETS_CIPHER=${CIPHER_ROTATION}`]);
    expect(errors.join('\n')).not.toContain('kratosCipherSecret');
  });
});

describe('an operator-set secret that breaks a rule', () => {
  it('fails the deployment naming the key, never the value', () => {
    const all = errors.join('\n');
    expect(all).toContain('config loginCookieSecret must be at least 32 characters');
    expect(all).not.toContain(SHORT_SECRET);
  });
});
