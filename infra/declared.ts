import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type { DeclaredContainer, DeclaredStack } from '../services/shared/declared-stack.js';
import { isPreviewTarget, REPO_ROOT } from './config.js';
import { installMocks, isSecretEnvelope, PROJECT, reveal, type RegisteredResource } from './testing/pulumi-mocks.js';

/**
 * Runs the Pulumi program under the runtime mocks with a stack file's configuration and returns what it
 * declares (services/shared/declared-stack.ts). Secrets in the stack file (`secure:` values) are never
 * decrypted: they are left out, so the program generates placeholders for them, as it would generate
 * real ones. Call once per process: the program module is evaluated once.
 */

/** A stand-in for the one secret the program requires the operator to set. */
const PLACEHOLDER_SMTP = 'smtp://declared-stack.invalid:25/';

export function stackFileConfig(path: string): Record<string, unknown> {
  const parsed = parseYaml(readFileSync(path, 'utf8')) as { config?: Record<string, unknown> } | null;
  const config: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(parsed?.config ?? {})) {
    if (!key.startsWith(`${PROJECT}:`)) continue;
    if (value !== null && typeof value === 'object' && 'secure' in value) continue;
    config[key.slice(PROJECT.length + 1)] = Array.isArray(value) || (value !== null && typeof value === 'object') ? value : String(value);
  }
  return config;
}

const CONTAINER = 'docker:index/container:Container';

function container(r: RegisteredResource): DeclaredContainer {
  const inputs = r.inputs;
  const env = Object.fromEntries(((reveal(inputs.envs) as string[] | undefined) ?? []).map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
  const labels = Object.fromEntries(((reveal(inputs.labels) as { label: string; value: string }[] | undefined) ?? []).map((l) => [l.label, l.value]));
  const networkMode = reveal(inputs.networkMode);
  return {
    name: r.name,
    dockerName: String(inputs.name),
    kind: labels['platform.kind'] === 'job' ? 'job' : 'service',
    image: String(reveal(inputs.image)),
    ports: ((reveal(inputs.ports) as DeclaredContainer['ports'] | undefined) ?? []).map((p) => ({ internal: p.internal, external: p.external, protocol: p.protocol })),
    networks: ((reveal(inputs.networksAdvanced) as { name: string; aliases?: string[]; ipv4Address?: string }[] | undefined) ?? []).map((n) => ({
      name: n.name,
      aliases: n.aliases ?? [],
      ...(n.ipv4Address ? { ipv4Address: n.ipv4Address } : {}),
    })),
    ...(typeof networkMode === 'string' && networkMode.startsWith('container:') ? { networkMode } : {}),
    env,
    envIsSecret: inputs.envs === undefined || isSecretEnvelope(inputs.envs),
    command: (reveal(inputs.command) as string[] | undefined) ?? [],
    entrypoints: (reveal(inputs.entrypoints) as string[] | undefined) ?? [],
    uploads: ((reveal(inputs.uploads) as { file: string; content?: string }[] | undefined) ?? []).map((u) => ({ file: u.file, content: u.content ?? '' })),
    volumes: ((reveal(inputs.volumes) as DeclaredContainer['volumes'] | undefined) ?? []).map((v) => ({ volumeName: v.volumeName, containerPath: v.containerPath, ...(v.readOnly === undefined ? {} : { readOnly: v.readOnly }) })),
  };
}

export async function describeDeclaredStack(stackFile = `${REPO_ROOT}/infra/Pulumi.example.yaml`): Promise<DeclaredStack> {
  const registered = await installMocks({
    config: { ...stackFileConfig(stackFile), smtpConnectionUri: PLACEHOLDER_SMTP },
    secretKeys: ['smtpConnectionUri'],
  });
  const program = await import('./program.js');
  const { containers, jobs } = program.stack;
  await Promise.all(
    [...Object.values(containers), ...Object.values(jobs)].map((c) => (c ? new Promise<void>((resolve) => c.id.apply(() => resolve())) : undefined)),
  );
  const stackConfig = program.stackConfig;
  return {
    parentDomain: stackConfig.parentDomain,
    internalCidrs: stackConfig.internalCidrs,
    networks: registered
      .filter((r) => r.type === 'docker:index/network:Network')
      .map((r) => {
        const subnet = (reveal(r.inputs.ipamConfigs) as { subnet?: string }[] | undefined)?.[0]?.subnet;
        return { name: String(r.inputs.name), internal: r.inputs.internal === true, ...(subnet ? { subnet } : {}) };
      }),
    containers: registered.filter((r) => r.type === CONTAINER).map(container),
    caddyfile: program.stack.caddyfile,
    targets: stackConfig.targets.map((t) => ({ key: t.key, domain: t.domain, preview: isPreviewTarget(t) })),
  };
}
