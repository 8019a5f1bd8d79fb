import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ENTRY_POINTS } from './images.js';
import { exampleConfig, installMocks, reveal, type RegisteredResource } from './testing/pulumi-mocks.js';

/**
 * Policies for the privilege separation of the branch sites (docs/webhook.md, "Users and modes"), read
 * from the Pulumi program under the runtime mocks: the webhook and sites containers start as root so
 * that builds and sites can run as per-target users, and give root up for their service users.
 */

const CONTAINER = 'docker:index/container:Container';
const REPO_ROOT = join(import.meta.dirname, '..');
let registered: RegisteredResource[];

beforeAll(async () => {
  registered = await installMocks({ config: { ...exampleConfig(), smtpConnectionUri: 'smtp://mail.example.org:25/' }, secretKeys: ['smtpConnectionUri'] });
  const program = await import('./program.js');
  await new Promise<void>((resolve) => program.stack.containers.webhook.id.apply(() => resolve()));
});

function declared(name: string) {
  const found = registered.find((r) => r.type === CONTAINER && r.name === name);
  if (!found) throw new Error(`the program declares no container ${name}`);
  const envs = ((reveal(found.inputs.envs) as string[] | undefined) ?? []).map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)] as const);
  return {
    inputs: found.inputs,
    env: Object.fromEntries(envs) as Record<string, string | undefined>,
    command: (reveal(found.inputs.command) as string[] | undefined) ?? [],
    volumes: (reveal(found.inputs.volumes) as { volumeName: string; containerPath: string; readOnly?: boolean }[] | undefined) ?? [],
  };
}

/** `sh -c <script> <$0> <args…>`: the start script and the command it finally execs. */
function startScript(name: string): { script: string; exec: string[] } {
  const { command } = declared(name);
  expect(command.slice(0, 2), name).toEqual(['/bin/sh', '-c']);
  return { script: command[2] as string, exec: command.slice(4) };
}

const quoted = (words: readonly string[]) => words.map((w) => `'${w}'`).join(' ');

describe('the webhook and sites containers (privilege separation)', () => {
  it('start as root, because builds and sites run as per-target users', () => {
    expect(declared('webhook').inputs.user).toBe('0');
    expect(declared('sites').inputs.user).toBe('0');
  });

  it('keep the capabilities that switching users needs (no cap_drop ALL)', () => {
    for (const name of ['webhook', 'sites']) {
      const caps = reveal(declared(name).inputs.capabilities) as { drops?: string[]; adds?: string[] } | undefined;
      const dropped = (caps?.drops ?? []).map((c) => c.toUpperCase().replace(/^CAP_/, ''));
      for (const needed of ['ALL', 'SETUID', 'SETGID', 'CHOWN', 'KILL', 'DAC_OVERRIDE']) expect(dropped, `${name} drops ${needed}`).not.toContain(needed);
    }
  });

  it('the webhook server gives up root for node and isolates every build as its target\'s user', () => {
    const { env } = declared('webhook');
    expect(env.NODE_ENV).toBe('production');
    expect(env.WEBHOOK_USER).toBe('node');
    expect(env.DEPLOY_ISOLATION).toBe('users');
  });

  it('the deploy script, which runs the restart command, is given the control socket the sites container listens on', () => {
    const { env } = declared('webhook');
    // The script's environment is an allow-list (services/webhook/src/deployments/invocation.ts): the
    // socket's path reaches it only through DEPLOY_ENV_PASS.
    expect((env.DEPLOY_ENV_PASS ?? '').split(/[ ,]+/)).toContain('SITES_CONTROL_SOCKET');
    expect(env.SITES_CONTROL_SOCKET).toBe(declared('sites').env.SITES_CONTROL_SOCKET);
  });

  it('the sites supervisor starts each site as its target\'s site user', () => {
    expect(declared('sites').env.SITES_ISOLATION).toBe('users');
  });

  it('both create the users of the targets file the stack uploads before their service starts', () => {
    for (const [name, service] of [['webhook', ENTRY_POINTS.webhook], ['sites', ENTRY_POINTS.sites]] as const) {
      const { script, exec } = startScript(name);
      expect(script, name).toMatch(/^set -eu;/);
      expect(script, name).toContain(`${quoted(ENTRY_POINTS.usersApply)};`);
      expect(script.endsWith('exec "$@"'), name).toBe(true);
      expect(exec, name).toEqual([...service]);
      expect(declared(name).env.TARGETS_FILE, name).toBe('/etc/geodata/targets.yaml');
    }
  });

  it('the deploy root is traversable by the per-target users and the state directory belongs to node', () => {
    const webhook = declared('webhook');
    const { script } = startScript('webhook');
    const mountOf = (path: string) => webhook.volumes.find((v) => v.containerPath === path);
    expect(mountOf('/srv/sites')?.readOnly).not.toBe(true);
    expect(webhook.env.DEPLOY_ROOT).toBe('/srv/sites');
    expect(script).toContain("chown 0:0 '/srv/sites'; chmod 0711 '/srv/sites';");
    expect(mountOf('/var/lib/webhook')).toBeDefined();
    expect(webhook.env.WEBHOOK_STATE_DIR).toBe('/var/lib/webhook');
    expect(script).toContain("chown node:node '/var/lib/webhook';");
  });

  it('the webhook runs the command of its image (webhook.Dockerfile CMD), whose default user refuses production', () => {
    const dockerfile = readFileSync(join(REPO_ROOT, 'infra/docker/webhook.Dockerfile'), 'utf8');
    const cmd = /^CMD (\[.*\])$/m.exec(dockerfile)?.[1];
    expect(JSON.parse(cmd ?? 'null')).toEqual([...ENTRY_POINTS.webhook]);
    // The image stays non-root by default; only the stack's explicit user "0" starts it as root.
    expect(dockerfile).toMatch(/^USER node$/m);
  });
});
