import type * as docker from '@pulumi/docker';
import * as pulumi from '@pulumi/pulumi';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, type StackConfig } from '../config.js';
import type { Limits } from '../containers.js';
import type { StackSecrets } from '../secrets.js';

/**
 * What every part of the stack (network, identity, features, sites, backups, edge) shares: the
 * configuration, the secrets, the naming rule and the small helpers that build container inputs.
 */
export interface StackContext {
  cfg: StackConfig;
  secrets: StackSecrets;
  /** `<namePrefix>-<name>`: the Docker name of a container, network or volume. */
  n: (name: string) => string;
}

export function stackContext(cfg: StackConfig, secrets: StackSecrets): StackContext {
  return { cfg, secrets, n: (name) => `${cfg.namePrefix}-${name}` };
}

export const LIMITS = {
  // The seed's limits for the identity containers: exactly 2 GB, 2 cores, CPU shares 1024.
  identity: { memoryMb: 2048, cpus: 2, cpuShares: 1024 },
  postgres: { memoryMb: 1024, cpus: 1 },
  geoserver: { memoryMb: 2048, cpus: 1.5 },
  node: { memoryMb: 512, cpus: 1 },
  // One target's site: its own memory, CPU, processes (RLIMIT_NPROC of its own uid) and /dev/shm.
  site: { memoryMb: 512, cpus: 1, processes: 256, shmMb: 64 },
  // One target's builder: what its builds may use (npm ci and an Astro build), one build at a time.
  builder: { memoryMb: 2048, cpus: 1.5, processes: 512, fileSizeMb: 2048, shmMb: 64 },
  webhook: { memoryMb: 512, cpus: 1 },
  egress: { memoryMb: 128, cpus: 0.5 },
  proxy: { memoryMb: 256, cpus: 0.5 },
  job: { memoryMb: 256, cpus: 0.5 },
  backup: { memoryMb: 512, cpus: 0.5, cpuShares: 256 },
} satisfies Record<string, Limits>;

/** Node-based images: the health check is Node's own fetch, so the images need neither curl nor wget. */
export function nodeHttpCheck(port: number, path: string, expectedStatus?: number): string[] {
  const healthy = expectedStatus === undefined ? 'r.ok' : `r.status===${expectedStatus}`;
  const script = `fetch('http://127.0.0.1:${port}${path}').then(r=>process.exit(${healthy}?0:1),()=>process.exit(1))`;
  return ['CMD', 'node', '-e', script];
}

/** Ory images ship busybox wget; the health endpoints answer 200 when the service is ready. */
export function wgetCheck(url: string): string[] {
  return ['CMD', 'wget', '-q', '-T', '3', '-O', '/dev/null', url];
}

export function pgReadyCheck(user: string): string[] {
  return ['CMD', 'pg_isready', '-q', '-h', '127.0.0.1', '-U', user];
}

/** A container environment (`NAME=value` list); secret inputs keep the whole list secret. */
export function env(values: Record<string, pulumi.Input<string>>): pulumi.Output<string[]> {
  return pulumi.all(values).apply((resolved) => Object.entries(resolved).map(([k, v]) => `${k}=${v}`));
}

export function fileUpload(path: string, content: pulumi.Input<string>, executable = false): docker.types.input.ContainerUpload {
  return { file: path, content, executable };
}

export function readRepoFile(relative: string): string {
  return readFileSync(join(REPO_ROOT, relative), 'utf8');
}

export const https = (host: string): string => `https://${host}`;
