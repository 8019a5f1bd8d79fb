import * as pulumi from '@pulumi/pulumi';

/**
 * Pulumi runtime mocks for the policy tests: every resource the program registers is recorded with
 * its inputs exactly as the engine would receive them (secret inputs keep Pulumi's secret envelope),
 * with the time it was registered and the time its outputs resolved.
 *
 * Jobs (containers with attach: true) can be made slow or failing, to show what waits for them.
 */

export const PROJECT = 'geodata-platform';

/** Pulumi's wire marker for a secret value (rpc.specialSigKey / specialSecretSig). */
const SECRET_SIG_KEY = '4dabf18193072939515e22adb298388d';
const SECRET_SIG = '1b47061264138c4ac30d75fd1eb44270';

export interface RegisteredResource {
  type: string;
  name: string;
  inputs: Record<string, unknown>;
  registeredAt: number;
  resolvedAt?: number;
}

export interface MockOptions {
  /** Config values without the project prefix; objects are JSON-encoded like `pulumi config set --path`. */
  config: Record<string, unknown>;
  /** Config keys that are secrets (`pulumi config set --secret`). */
  secretKeys: string[];
  /** Milliseconds a job takes before its exit code is known (default 0). */
  jobDurationMs?: number;
  /** Exit code per job resource name (default 0). */
  jobExitCodes?: Record<string, number>;
}

export function isSecretEnvelope(value: unknown): value is { value: unknown } {
  return typeof value === 'object' && value !== null && (value as Record<string, unknown>)[SECRET_SIG_KEY] === SECRET_SIG;
}

/** The value without secret envelopes (for reading, e.g. env lists). */
export function reveal(value: unknown): unknown {
  if (isSecretEnvelope(value)) return reveal(value.value);
  if (Array.isArray(value)) return value.map(reveal);
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, reveal(v)]));
  return value;
}

/** A container's `envs` (KEY=VALUE strings, as Docker takes them) by name, secret envelopes removed; none declared is {}. */
export function envVariables(envs: unknown): Record<string, string> {
  return Object.fromEntries(((reveal(envs) as string[] | undefined) ?? []).map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
}

/** A declared container as the policy tests read it: its inputs, its environment by name, the names of its networks. */
export function declaredContainer(registered: RegisteredResource[], name: string): { inputs: Record<string, unknown>; env: Record<string, string>; networks: string[] } {
  const found = registered.find((r) => r.type === 'docker:index/container:Container' && r.name === name);
  if (!found) throw new Error(`the program declares no container ${name}`);
  const env = envVariables(found.inputs.envs);
  const networks = ((reveal(found.inputs.networksAdvanced) as { name: string }[] | undefined) ?? []).map((n) => n.name);
  return { inputs: found.inputs, env, networks };
}

/** Every string in a value that is NOT inside a secret envelope (where a plaintext secret must never be). */
export function plainStrings(value: unknown): string[] {
  if (isSecretEnvelope(value)) return [];
  if (typeof value === 'string') return [value];
  if (Array.isArray(value)) return value.flatMap(plainStrings);
  if (value !== null && typeof value === 'object') return Object.values(value).flatMap(plainStrings);
  return [];
}

export async function installMocks(options: MockOptions): Promise<RegisteredResource[]> {
  const registered: RegisteredResource[] = [];
  const start = Date.now();
  await pulumi.runtime.setMocks(
    {
      newResource: async (args: pulumi.runtime.MockResourceArgs) => {
        const record: RegisteredResource = { type: args.type, name: args.name, inputs: args.inputs as Record<string, unknown>, registeredAt: Date.now() - start };
        registered.push(record);
        const state: Record<string, unknown> = { ...args.inputs };
        if (args.type === 'docker:index/remoteImage:RemoteImage') state.imageId = `sha256:${args.name}`;
        if (args.type === 'docker:index/image:Image') state.repoDigest = '';
        if (args.type === 'random:index/randomPassword:RandomPassword') state.result = `generated-${args.name}-0123456789abcdef0123456789`;
        if (args.type === 'random:index/randomBytes:RandomBytes') state.hex = `${'ab'.repeat(32)}`;
        if (args.type === 'docker:index/container:Container' && (args.inputs as { attach?: boolean }).attach === true) {
          if (options.jobDurationMs) await new Promise((resolve) => setTimeout(resolve, options.jobDurationMs));
          state.exitCode = options.jobExitCodes?.[args.name] ?? 0;
        }
        record.resolvedAt = Date.now() - start;
        return { id: `${args.name}-id`, state };
      },
      call: (args: pulumi.runtime.MockCallArgs) => args.inputs,
    },
    PROJECT,
    'test',
  );
  const flat: Record<string, string> = {};
  for (const [key, value] of Object.entries(options.config)) {
    flat[`${PROJECT}:${key}`] = typeof value === 'string' ? value : JSON.stringify(value);
  }
  pulumi.runtime.setAllConfig(flat, options.secretKeys.map((k) => `${PROJECT}:${k}`));
  return registered;
}

/** Mail settings for the Docker stack tests that do not check mail: a secret, as an operator sets it. */
const EXAMPLE_SMTP = { smtpConnectionUri: 'smtp://mail.example.org:25/' };

export interface DockerStackOptions extends Pick<MockOptions, 'jobDurationMs' | 'jobExitCodes'> {
  /** Settings over the example configuration (exampleConfig). */
  config?: Record<string, unknown>;
  /** Settings given as secrets (`pulumi config set --secret`): an SMTP connection URI unless they name their own. */
  secrets?: Record<string, unknown>;
}

/**
 * The Pulumi program on the Docker target under the runtime mocks, and what it registered. Call once
 * per test file: the program module is evaluated once per process. The caller waits for the resources
 * it reads (`resolved(container.id)`).
 */
export async function declareDockerUnderMocks(options: DockerStackOptions = {}) {
  const { config, secrets: given, ...jobs } = options;
  const secrets = { ...EXAMPLE_SMTP, ...given };
  const registered = await installMocks({ config: { ...exampleConfig(config), ...secrets }, secretKeys: Object.keys(secrets), ...jobs });
  const program = await import('../program.js');
  return { registered, program };
}

export function resolved<T>(output: pulumi.Output<T>): Promise<T> {
  return new Promise((resolve) => output.apply((value) => resolve(value)));
}

/** A complete, valid configuration (the values of Pulumi.example.yaml) plus secrets with unique markers. */
export function exampleConfig(overrides: Record<string, unknown> = {}): MockOptions['config'] {
  return {
    domains: {
      api: 'api.example.org',
      geo: 'geo.example.org',
      auth: 'auth.example.org',
      kratos: 'id.example.org',
      hydra: 'oauth.example.org',
      accounts: 'accounts.example.org',
      webhook: 'hooks.example.org',
    },
    acmeEmail: 'ops@example.org',
    parentDomain: 'example.org',
    appUrl: 'https://main.sites.example.org',
    smtpFrom: 'noreply@example.org',
    ...overrides,
  };
}
