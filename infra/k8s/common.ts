import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { createHash } from 'node:crypto';
import type { StackConfig } from '../config.js';
import type { Limits } from '../containers.js';
import type { StackSecrets } from '../secrets.js';
import type { KubernetesSettings } from './config.js';

/**
 * What every part of the Kubernetes target shares: the configuration (the stack's, and the cluster's own
 * settings), the secrets, the namespaces, and the builders that carry the house rules, so a part cannot
 * declare a container without them:
 *
 * - every container: CPU and memory limits (the Docker target's LIMITS), a non-root user, a read-only
 *   root file system, no capabilities, no privilege escalation, the runtime's seccomp profile;
 * - every pod: no service-account token unless it names why, no service links, the restricted Pod
 *   Security level (its namespace enforces it too);
 * - every environment: a Secret of its own, read with envFrom, so no value (secret or not) is written
 *   into a pod template, and a checksum of it on the template rolls the pods when it changes.
 */

export interface Namespaces {
  /** The platform: API, worker, GeoServer, identity, databases, webhook, edge. */
  platform: string;
  /** Trusted branch sites (the platform's own web app: main, develop). */
  sites: string;
  /** Untrusted code: the preview sites of team branches. */
  preview: string;
  /** Untrusted code: every site build (a Job per deploy). */
  builds: string;
}

export interface K8sContext {
  cfg: StackConfig;
  secrets: StackSecrets;
  k8s: KubernetesSettings;
  ns: Namespaces;
}

export function k8sContext(cfg: StackConfig, secrets: StackSecrets, settings: KubernetesSettings): K8sContext {
  const p = cfg.namePrefix;
  return { cfg, secrets, k8s: settings, ns: { platform: p, sites: `${p}-sites`, preview: `${p}-preview`, builds: `${p}-builds` } };
}

/** The label every selector and NetworkPolicy uses to name a workload. */
export const APP = 'app.kubernetes.io/name';
export const PART_OF = { 'app.kubernetes.io/part-of': 'geodata-platform' } as const;

export const labels = (name: string, extra: Record<string, string> = {}): Record<string, string> => ({ [APP]: name, ...PART_OF, ...extra });

/** Docker's limits as Kubernetes resources: the limit is the Docker limit; requests a quarter of the CPU and the whole memory. */
export function resources(limits: Limits): k8s.types.input.core.v1.ResourceRequirements {
  const cpuMillis = Math.round(limits.cpus * 1000);
  return {
    limits: { cpu: `${cpuMillis}m`, memory: `${limits.memoryMb}Mi` },
    requests: { cpu: `${Math.max(50, Math.round(cpuMillis / 4))}m`, memory: `${limits.memoryMb}Mi` },
  };
}

/** A container's security context: the only one the builders write. */
export function restrictedSecurityContext(uid: number): k8s.types.input.core.v1.SecurityContext {
  return {
    runAsNonRoot: true,
    runAsUser: uid,
    runAsGroup: uid,
    allowPrivilegeEscalation: false,
    readOnlyRootFilesystem: true,
    capabilities: { drop: ['ALL'] },
    seccompProfile: { type: 'RuntimeDefault' },
  };
}

/** Node images' own user (`node`, 1000), the uid the Docker target runs them as too. */
export const NODE_UID = 1000;

export interface ContainerSpec {
  name: string;
  image: pulumi.Input<string>;
  limits: Limits;
  uid: number;
  command?: string[];
  args?: string[];
  /** The Secret holding this container's environment (envFrom), from `environmentSecret`. */
  envSecret?: pulumi.Input<string>;
  ports?: { name: string; port: number }[];
  /** A readiness and liveness check: HTTP (a path on a port), TCP, or a command (the worker's heartbeat check). */
  probe?: { path: string; port: number; initialDelaySeconds?: number; failureThreshold?: number } | { tcp: number } | { exec: string[] };
  volumeMounts?: k8s.types.input.core.v1.VolumeMount[];
}

export function container(spec: ContainerSpec): k8s.types.input.core.v1.Container {
  const probe = spec.probe;
  const handler =
    probe === undefined ? undefined : 'tcp' in probe ? { tcpSocket: { port: probe.tcp } } : 'exec' in probe ? { exec: { command: probe.exec }, timeoutSeconds: 10 } : { httpGet: { path: probe.path, port: probe.port } };
  const delay = probe && 'path' in probe ? (probe.initialDelaySeconds ?? 5) : 5;
  const failures = probe && 'path' in probe ? (probe.failureThreshold ?? 3) : 3;
  return {
    name: spec.name,
    image: spec.image,
    imagePullPolicy: 'IfNotPresent',
    ...(spec.command ? { command: spec.command } : {}),
    ...(spec.args ? { args: spec.args } : {}),
    ...(spec.envSecret ? { envFrom: [{ secretRef: { name: spec.envSecret } }] } : {}),
    ...(spec.ports ? { ports: spec.ports.map((p) => ({ name: p.name, containerPort: p.port, protocol: 'TCP' })) } : {}),
    ...(handler
      ? {
          readinessProbe: { ...handler, initialDelaySeconds: delay, periodSeconds: 10, failureThreshold: failures },
          livenessProbe: { ...handler, initialDelaySeconds: delay * 4, periodSeconds: 20, failureThreshold: failures },
        }
      : {}),
    resources: resources(spec.limits),
    securityContext: restrictedSecurityContext(spec.uid),
    volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }, ...(spec.volumeMounts ?? [])],
  };
}

export interface PodSpecInput {
  ctx: K8sContext;
  containers: k8s.types.input.core.v1.Container[];
  initContainers?: k8s.types.input.core.v1.Container[];
  volumes?: k8s.types.input.core.v1.Volume[];
  fsGroup?: number;
  /** Team code: scheduled only on the tainted node pool, and only there. */
  untrusted?: boolean;
  /** A service account whose token the pod needs, and why (every other pod gets none). */
  serviceAccount?: { name: pulumi.Input<string>; why: string };
  restartPolicy?: 'Always' | 'Never' | 'OnFailure';
  /** MiB the pod's own /tmp may hold (an emptyDir in memory: the root file system is read-only). */
  tmpMb?: number;
}

export function podSpec(input: PodSpecInput): k8s.types.input.core.v1.PodSpec {
  const { ctx } = input;
  const taint = ctx.k8s.previewTaintKey;
  return {
    ...(input.serviceAccount ? { serviceAccountName: input.serviceAccount.name, automountServiceAccountToken: true } : { automountServiceAccountToken: false }),
    enableServiceLinks: false,
    ...(input.restartPolicy ? { restartPolicy: input.restartPolicy } : {}),
    securityContext: {
      runAsNonRoot: true,
      seccompProfile: { type: 'RuntimeDefault' },
      ...(input.fsGroup !== undefined ? { fsGroup: input.fsGroup, fsGroupChangePolicy: 'OnRootMismatch' } : {}),
    },
    ...(ctx.k8s.imagePullSecret ? { imagePullSecrets: [{ name: ctx.k8s.imagePullSecret }] } : {}),
    ...(input.untrusted
      ? {
          nodeSelector: { [taint]: 'true' },
          tolerations: [{ key: taint, operator: 'Equal', value: 'true', effect: 'NoSchedule' }],
        }
      : {}),
    ...(input.initContainers ? { initContainers: input.initContainers } : {}),
    containers: input.containers,
    volumes: [{ name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: `${input.tmpMb ?? 64}Mi` } }, ...(input.volumes ?? [])],
  };
}

/**
 * A workload's environment as a Secret of its own (envFrom), and the checksum that goes on its pod
 * template: a changed value (a rotated password, a new setting) rolls the pods, as a new Docker
 * container does on the other target.
 */
export function environmentSecret(
  name: string,
  namespace: string,
  values: Record<string, pulumi.Input<string>> | pulumi.Output<Record<string, string>>,
  opts: pulumi.CustomResourceOptions = {},
) {
  const data = pulumi.output(values) as pulumi.Output<Record<string, string>>;
  const secret = new k8s.core.v1.Secret(
    `${name}-env`,
    {
      metadata: { name: `${name}-env`, namespace, labels: labels(name) },
      type: 'Opaque',
      stringData: pulumi.secret(data),
    },
    opts,
  );
  const checksum = data.apply((d) => createHash('sha256').update(JSON.stringify(Object.entries(d).sort())).digest('hex'));
  return { secret, name: secret.metadata.name, checksum };
}

export type Peer =
  /** Pods by their app label (a string) or by other labels (CloudNativePG's `cnpg.io/cluster` …), in this namespace or the one named. */
  | { pods: string | Record<string, string>; namespace?: string }
  | { namespace: string }
  | { cidrs: string[]; except?: string[] };

export interface Rule {
  peers: Peer[];
  ports: number[];
  protocol?: 'TCP' | 'UDP';
}

function peer(p: Peer): k8s.types.input.networking.v1.NetworkPolicyPeer {
  if ('cidrs' in p) throw new Error('cidrs are expanded by peers()');
  const nsSelector = (ns: string) => ({ matchLabels: { 'kubernetes.io/metadata.name': ns } });
  if ('pods' in p) {
    const matchLabels = typeof p.pods === 'string' ? { [APP]: p.pods } : p.pods;
    return { podSelector: { matchLabels }, ...(p.namespace ? { namespaceSelector: nsSelector(p.namespace) } : {}) };
  }
  return { namespaceSelector: nsSelector(p.namespace) };
}

function peers(list: Peer[]): k8s.types.input.networking.v1.NetworkPolicyPeer[] {
  return list.flatMap((p) => ('cidrs' in p ? p.cidrs.map((cidr) => ({ ipBlock: { cidr, ...(p.except ? { except: p.except } : {}) } })) : [peer(p)]));
}

/**
 * One allow-list NetworkPolicy for the pods of one workload: who may reach them on which ports, and what
 * they may reach. It adds to the namespace's default deny (infra/k8s/network.ts); a workload without
 * one reaches nothing but DNS and is reached by nothing.
 */
export function allow(name: string, namespace: string, pods: Record<string, string>, rules: { ingress?: Rule[]; egress?: Rule[] }, opts: pulumi.CustomResourceOptions = {}) {
  const policyTypes = [...(rules.ingress ? ['Ingress'] : []), ...(rules.egress ? ['Egress'] : [])];
  const toRule = (r: Rule) => ({ ports: r.ports.map((port) => ({ port, protocol: r.protocol ?? 'TCP' })), peers: peers(r.peers) });
  return new k8s.networking.v1.NetworkPolicy(
    `allow-${name}-${namespace}`,
    {
      metadata: { name: `allow-${name}`, namespace, labels: PART_OF },
      spec: {
        podSelector: { matchLabels: pods },
        policyTypes,
        ...(rules.ingress ? { ingress: rules.ingress.map(toRule).map(({ ports, peers: from }) => ({ ports, from })) } : {}),
        ...(rules.egress ? { egress: rules.egress.map(toRule).map(({ ports, peers: to }) => ({ ports, to })) } : {}),
      },
    },
    opts,
  );
}

/** Everywhere outside the cluster's private ranges: the way out for mail, OSM, Wikibase, the object store. */
export const INTERNET: Peer = { cidrs: ['0.0.0.0/0'], except: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '169.254.0.0/16', '100.64.0.0/10'] };
