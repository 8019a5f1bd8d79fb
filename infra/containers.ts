import * as docker from '@pulumi/docker';
import * as pulumi from '@pulumi/pulumi';

/**
 * Two kinds of container, each built by one function so the house rules cannot be forgotten:
 *
 * - a service runs for good: memory and CPU limits, `restart: unless-stopped`, a health check, and
 *   (when asked) Pulumi waits until Docker reports it healthy before dependents are created;
 * - a job runs once to completion (a migration, a provisioning run): limits, `restart: no`, and
 *   `attach: true`, so Pulumi waits for it to exit. Its exit code is an output; dependents read it
 *   through `succeeded()`, which fails the deployment on a non-zero code, so nothing that needs the
 *   job can start after a failed one.
 *
 * Every container carries the label `platform.kind` (service | job) so the policy tests and
 * `docker ps --filter label=platform.kind=service` can tell them apart.
 */

export interface Limits {
  /** Hard memory limit in MiB (swap is capped at the same value: no swap on top). */
  memoryMb: number;
  /** CPU cores (fractions allowed). */
  cpus: number;
  /** Relative CPU weight under contention (Docker default 1024). */
  cpuShares?: number;
  /** Writable-layer size limit (needs a storage driver with quotas, e.g. overlay2 on xfs with pquota). */
  diskSize?: string;
  /**
   * Processes and threads of the container's user (RLIMIT_NPROC, soft = hard). @pulumi/docker 5 has no
   * `pids_limit`; this is the stack's pids limit. It binds every non-root uid, counted per uid, which is
   * why each target's site and build users have uids of their own (infra/stack/targets.ts).
   */
  processes?: number;
  /** Largest file a process may write, in MiB (RLIMIT_FSIZE; a larger write gets SIGXFSZ/EFBIG). */
  fileSizeMb?: number;
  /** Size of the container's own /dev/shm in MiB (IPC namespace private: nothing shares it). */
  shmMb?: number;
}

export interface HealthCheck {
  /** Docker form: ['CMD', ...] or ['CMD-SHELL', '...']. */
  test: string[];
  interval?: string;
  timeout?: string;
  retries?: number;
  startPeriod?: string;
}

export interface NetworkAttachment {
  network: docker.Network;
  aliases?: string[];
  ipv4Address?: string;
}

export interface CommonSpec {
  image: pulumi.Input<string>;
  limits: Limits;
  /** Networks to join; empty when the container shares another container's network namespace. */
  networks: NetworkAttachment[];
  /** Join this container's network namespace (same localhost, same addresses) instead of networks. */
  shareNetworkWith?: docker.Container;
  envs?: pulumi.Input<pulumi.Input<string>[]>;
  command?: pulumi.Input<string>[];
  entrypoints?: pulumi.Input<string>[];
  user?: string;
  uploads?: pulumi.Input<docker.types.input.ContainerUpload>[];
  volumes?: docker.types.input.ContainerVolume[];
  tmpfs?: Record<string, string>;
  readOnly?: boolean;
  /** Drop every Linux capability but these (e.g. [] for none): Docker's `cap_drop: ALL` + `cap_add`. */
  capabilities?: { keep: readonly string[] };
  labels?: Record<string, pulumi.Input<string>>;
  dependsOn?: pulumi.Resource[];
}

export interface ServiceSpec extends CommonSpec {
  healthcheck: HealthCheck;
  ports?: docker.types.input.ContainerPort[];
  /** Wait until healthy before dependents are created (Docker health, not just "running"). */
  waitHealthy?: boolean;
  waitTimeoutSeconds?: number;
}

export type JobSpec = CommonSpec;

function limitArgs(limits: Limits): Partial<docker.ContainerArgs> {
  return {
    memory: limits.memoryMb,
    memorySwap: limits.memoryMb,
    cpus: String(limits.cpus),
    cpuShares: limits.cpuShares ?? 1024,
    ...(limits.diskSize ? { storageOpts: { size: limits.diskSize } } : {}),
    ...(limits.shmMb ? { shmSize: limits.shmMb, ipcMode: 'private' } : {}),
    ...(limits.processes || limits.fileSizeMb
      ? {
          ulimits: [
            ...(limits.processes ? [{ name: 'nproc', soft: limits.processes, hard: limits.processes }] : []),
            ...(limits.fileSizeMb ? [{ name: 'fsize', soft: limits.fileSizeMb * 1024 * 1024, hard: limits.fileSizeMb * 1024 * 1024 }] : []),
          ],
        }
      : {}),
  };
}

function labelArgs(kind: 'service' | 'job', name: string, labels: Record<string, pulumi.Input<string>> = {}): docker.types.input.ContainerLabel[] {
  return Object.entries({ 'platform.kind': kind, 'platform.component': name, ...labels }).map(([label, value]) => ({ label, value }));
}

function commonArgs(containerName: string, spec: CommonSpec): docker.ContainerArgs {
  return {
    name: containerName,
    image: spec.image,
    ...limitArgs(spec.limits),
    envs: spec.envs,
    command: spec.command,
    entrypoints: spec.entrypoints,
    user: spec.user,
    uploads: spec.uploads,
    volumes: spec.volumes,
    tmpfs: spec.tmpfs,
    readOnly: spec.readOnly,
    ...(spec.capabilities ? { capabilities: { drops: ['ALL'], adds: [...spec.capabilities.keep] } } : {}),
    ...(spec.shareNetworkWith
      ? { networkMode: pulumi.interpolate`container:${spec.shareNetworkWith.name}` }
      : {
          networkMode: 'bridge',
          networksAdvanced: spec.networks.map((n) => ({ name: n.network.name, aliases: n.aliases, ipv4Address: n.ipv4Address })),
        }),
    // A container never gains privileges it did not start with (setuid binaries, file capabilities).
    securityOpts: ['no-new-privileges:true'],
    logDriver: 'json-file',
    logOpts: { 'max-size': '20m', 'max-file': '5' },
  };
}

export function service(name: string, containerName: string, spec: ServiceSpec, opts: pulumi.CustomResourceOptions = {}): docker.Container {
  return new docker.Container(
    name,
    {
      ...commonArgs(containerName, spec),
      labels: labelArgs('service', name, spec.labels),
      restart: 'unless-stopped',
      healthcheck: {
        tests: spec.healthcheck.test,
        interval: spec.healthcheck.interval ?? '30s',
        timeout: spec.healthcheck.timeout ?? '5s',
        retries: spec.healthcheck.retries ?? 3,
        startPeriod: spec.healthcheck.startPeriod ?? '20s',
      },
      ports: spec.ports,
      wait: spec.waitHealthy ?? false,
      waitTimeout: spec.waitTimeoutSeconds ?? 120,
      destroyGraceSeconds: 30,
      mustRun: true,
    },
    { ...opts, dependsOn: [...(spec.dependsOn ?? []), ...toArray(opts.dependsOn)] },
  );
}

export function job(name: string, containerName: string, spec: JobSpec, opts: pulumi.CustomResourceOptions = {}): docker.Container {
  return new docker.Container(
    name,
    {
      ...commonArgs(containerName, spec),
      labels: labelArgs('job', name, spec.labels),
      restart: 'no',
      attach: true,
      logs: true,
      // A finished job is stopped; that is its desired state, not a drift to repair.
      mustRun: false,
    },
    {
      ...opts,
      dependsOn: [...(spec.dependsOn ?? []), ...toArray(opts.dependsOn)],
      // The captured output lives in the stack state: keep it encrypted like any secret.
      additionalSecretOutputs: ['containerLogs'],
    },
  );
}

/**
 * The job's exit code as a value dependents consume (e.g. as a label). Reading it makes the dependent
 * wait for the job to finish; a non-zero code rejects, so `pulumi up` stops before the dependent is
 * created and reports the job's name.
 */
export function succeeded(jobName: string, container: docker.Container): pulumi.Output<string> {
  return container.exitCode.apply((code) => {
    if (code !== 0) throw new Error(`job ${jobName} exited with code ${String(code)}; see its logs (docker logs ${jobName})`);
    return 'succeeded';
  });
}

/** Like `succeeded` for many jobs at once: waits for every one, and a rejection names each that failed. */
export function allSucceeded(jobs: readonly (readonly [string, docker.Container])[]): pulumi.Output<string> {
  return pulumi.all(jobs.map(([name, container]) => container.exitCode.apply((code) => [name, code] as const))).apply((results) => {
    const failed = results.filter(([, code]) => code !== 0);
    if (failed.length > 0) throw new Error(failed.map(([name, code]) => `job ${name} exited with code ${String(code)}; see its logs (docker logs ${name})`).join('; '));
    return 'succeeded';
  });
}

function toArray(value: pulumi.Input<pulumi.Input<pulumi.Resource>[]> | pulumi.Input<pulumi.Resource> | undefined): pulumi.Resource[] {
  if (value === undefined) return [];
  if (Array.isArray(value)) return value as pulumi.Resource[];
  return [value as pulumi.Resource];
}
