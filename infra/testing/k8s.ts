import * as pulumi from '@pulumi/pulumi';
import { exampleConfig, installMocks, reveal, type MockOptions, type RegisteredResource } from './pulumi-mocks.js';

/**
 * The Pulumi program on the Kubernetes target under the runtime mocks: a complete configuration (the
 * example stack's values with `target: kubernetes`, the cluster's settings, the backups' bucket) and
 * what the program registered, as Kubernetes objects (apiVersion, kind, metadata, spec … exactly the
 * inputs the provider would send the API server). Call once per test file: the program module is
 * evaluated once per process.
 */

/** The Kubernetes settings of the example (infra/Pulumi.example.yaml documents each key). */
export const EXAMPLE_KUBERNETES = {
  registry: 'registry.example.org/geodata',
  apiServerCidrs: ['10.96.0.1/32', '192.168.10.10/32'],
  storageClass: 'fast-ssd',
};

export const EXAMPLE_BACKUP = {
  endpoint: 'https://s3.eu-central-1.amazonaws.com',
  provider: 'AWS',
  region: 'eu-central-1',
  bucket: 'geodata-backups',
  prefix: 'prod',
  accessKeyId: 'AKIAEXAMPLEKEY',
};

/** Operator-set secrets with markers that must never appear outside a secret (the Docker tests' rule). */
export const K8S_GIVEN_SECRETS = {
  smtpConnectionUri: 'smtps://mailer:MARK-k8s-smtp-51c2@smtp.example.org:465/',
  backupOffsiteSecretAccessKey: 'MARK-k8s-bucket-key-9f0e',
  geoserverAdminPassword: 'MARK-k8s-geoserver-admin-77aa',
  kratosCipherSecret: 'MARK-k8s-cipher-00000000000000000'.slice(0, 32),
};

export function kubernetesConfig(overrides: Record<string, unknown> = {}): MockOptions['config'] {
  return { ...exampleConfig(), target: 'kubernetes', kubernetes: EXAMPLE_KUBERNETES, backupOffsite: EXAMPLE_BACKUP, ...K8S_GIVEN_SECRETS, ...overrides };
}

/** A declared object as the API server would receive it (secret envelopes removed for reading). */
export interface DeclaredObject {
  /** Pulumi's resource type, e.g. kubernetes:apps/v1:Deployment. */
  type: string;
  /** Pulumi's resource name. */
  name: string;
  apiVersion: string;
  kind: string;
  /** The object without secret envelopes. */
  object: Record<string, unknown>;
  /** The inputs as the engine received them (secret envelopes kept). */
  inputs: Record<string, unknown>;
}

const KUBERNETES = /^kubernetes:(.+)\/(v[^:]+):(.+)$/;

/** The registered resources that are Kubernetes objects (a Helm release is one resource under the mocks). */
export function declaredObjects(registered: RegisteredResource[]): DeclaredObject[] {
  return registered.flatMap((r) => {
    const match = KUBERNETES.exec(r.type);
    if (!match) return [];
    const [, group = '', version = '', kind = ''] = match;
    const apiVersion = group === 'core' ? version : `${group}/${version}`;
    const object = reveal(r.inputs) as Record<string, unknown>;
    return [{ type: r.type, name: r.name, apiVersion: String(object.apiVersion ?? apiVersion), kind: String(object.kind ?? kind), object, inputs: r.inputs }];
  });
}

/** Every Pulumi resource reachable from a value (the stack's return object), to wait for. */
function resourcesIn(value: unknown, seen = new Set<unknown>()): pulumi.Resource[] {
  if (value === null || typeof value !== 'object' || seen.has(value)) return [];
  seen.add(value);
  if (pulumi.Resource.isInstance(value)) return [value];
  if (pulumi.Output.isInstance(value)) return [];
  return Object.values(value).flatMap((v) => resourcesIn(v, seen));
}

export async function declareKubernetesUnderMocks(config: MockOptions['config'] = kubernetesConfig(), secretKeys: string[] = Object.keys(K8S_GIVEN_SECRETS)) {
  const registered = await installMocks({ config, secretKeys });
  const program = await import('../program.js');
  const stack = program.kubernetes;
  if (!stack) throw new Error('the program declared no Kubernetes stack: is target kubernetes set?');
  await Promise.all(resourcesIn(stack).map((r) => new Promise<void>((resolve) => r.urn.apply(() => resolve()))));
  // Resources registered from inside an apply (none today) get a moment to arrive.
  await new Promise((resolve) => setTimeout(resolve, 50));
  return { registered, program, stack, objects: declaredObjects(registered) };
}
