/**
 * Runs the Pulumi program under runtime mocks whose `newResource` does what Docker would: each
 * container the program registers is started on this machine as what it really is (see
 * docs/rehearsal.md), and the mock answers only once the container is healthy (a service Pulumi waits
 * for) or has exited (a job: its exit code becomes the `exitCode` output). Pulumi's own dependency
 * handling then orders everything, and `succeeded()` gates the dependents of a failed job exactly as
 * under `pulumi up`: they are never created.
 */
import * as pulumi from '@pulumi/pulumi';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import pg from 'pg';
import { parse as parseYaml } from 'yaml';
import { assembleImage, type AssembledImage } from '../docker/image.js';
import { startFakeGeoServer, type FakeGeoServer } from '../geoserver/testing/fake-geoserver.js';
import { PROJECT, isSecretEnvelope } from '../testing/pulumi-mocks.js';
import { HydraDouble } from '../../services/shared/testing/ory/hydra-double.js';
import { KratosDouble } from '../../services/shared/testing/ory/kratos-double.js';
import { freePort } from '../../services/shared/testing/ports.js';
import { startAccountsUi } from './accounts-ui-standin.js';
import { EndpointMap } from './endpoints.js';
import { RehearsalCgroup } from './cgroup.js';
import { inNetnsOf, ownNetnsReady, relayOut, relayPort, spawnInOwnNetns, type RunAs } from './netns.js';
import { PG_BIN, startCluster, type Cluster } from './postgres.js';

export interface ContainerRecord {
  name: string;
  kind: 'service' | 'job';
  /** What stood in for the image. */
  as: string;
  status: 'healthy' | 'exited' | 'failed' | 'not started';
  exitCode?: number;
  detail?: string;
  log: string[];
  startedMs: number;
  readyMs?: number;
  /** Its main process; for a container with a network namespace of its own, /proc/<pid>/ns/net is that namespace. */
  pid?: number;
  /** Started in a network namespace of its own (the containers that run team code: sites, builders). */
  ownNetns?: boolean;
  /** The uid and gid it runs as (its declared `user`), when not root. */
  runAs?: RunAs;
  /** Its declared volumes: container path → the folder standing in for the volume (project images). */
  mounts?: Record<string, string>;
  /** Its declared environment, before the rehearsal's rewriting (project images). */
  declaredEnv?: Record<string, string>;
}

export interface RehearsalStack {
  scratch: string;
  endpoints: EndpointMap;
  containers: Map<string, ContainerRecord>;
  images: Map<string, AssembledImage>;
  clusters: Map<string, Cluster>;
  kratos?: KratosDouble;
  hydra?: HydraDouble;
  geoserver?: FakeGeoServer;
  /** Caddy's HTTPS address (IP:port) and its data dir (the internal CA). */
  proxy?: { ip: string; httpsPort: number; dataDir: string };
  findings: string[];
  /** Resolved program outputs (the module's exports). */
  program: Record<string, unknown>;
  /** `docker restart <name>` for the containers that support it here (the shell services). */
  restart: Map<string, () => Promise<void>>;
  stop(): Promise<void>;
}

interface Inputs {
  name?: string;
  image?: string;
  command?: string[];
  entrypoints?: string[];
  envs?: string[];
  uploads?: { file: string; content: string; executable?: boolean }[];
  volumes?: { volumeName: string; containerPath: string; readOnly?: boolean }[];
  networksAdvanced?: { name: string; aliases?: string[] }[];
  networkMode?: string;
  healthcheck?: { tests?: string[] };
  attach?: boolean;
  user?: string;
  labels?: { label: string; value: string }[];
}

function reveal(value: unknown): unknown {
  if (isSecretEnvelope(value)) return reveal(value.value);
  if (Array.isArray(value)) return value.map(reveal);
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, reveal(v)]));
  return value;
}

/**
 * A Docker `user` (`name`, `uid`, `name:group`, `uid:gid`) as ids on this host, where the rehearsal's
 * containers run: numeric ids as they are, names looked up here (the image's users exist here too,
 * see ensureImageUsers). Undefined when a name is unknown.
 */
function userIds(user: string): RunAs | undefined {
  const [name, group] = user.split(':') as [string, string | undefined];
  const id = (flag: '-u' | '-g', who: string) => {
    if (/^\d+$/.test(who)) return Number(who);
    const result = spawnSync('id', [flag, who], { encoding: 'utf8' });
    return result.status === 0 ? Number(result.stdout.trim()) : undefined;
  };
  const uid = id('-u', name);
  if (uid === undefined) return undefined;
  let gid: number | undefined;
  if (group === undefined) gid = /^\d+$/.test(name) ? uid : id('-g', name);
  else if (/^\d+$/.test(group)) gid = Number(group);
  else {
    const entry = spawnSync('getent', ['group', group], { encoding: 'utf8' });
    gid = entry.status === 0 ? Number(entry.stdout.split(':')[2]) : undefined;
  }
  return gid === undefined ? undefined : { uid, gid };
}

function parseEnvList(list: string[] = []): Record<string, string> {
  return Object.fromEntries(list.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
}

/** The loopback IP Caddy binds (its own, so ports 80/443 do not collide with anything on 127.0.0.1). */
export const PROXY_IP = '127.80.80.1';

/**
 * Wires a rehearsal can cut (`npm run stack:rehearse -- --break <wire> [--break <wire>]`), each as a change to what the
 * program declares, to show that the rehearsal then fails at the step that depends on it:
 *   worker-egress  the QC worker loses its network with a route out        → steps 4b and 4c
 *   clients-sync   the clients sync is pointed at a Hydra that is not there → the stack stops at that job
 *   site-settings  the sites are told nothing (no SITE_ENV_*)              → step 6d
 */
export const BROKEN_WIRES = ['worker-egress', 'clients-sync', 'site-settings'] as const;
export type BrokenWire = (typeof BROKEN_WIRES)[number];

function cutWires(wires: readonly BrokenWire[], name: string, inputs: Inputs, routesOut: Set<string>): Inputs {
  return wires.reduce((cut, wire) => cutWire(wire, name, cut, routesOut), inputs);
}

function cutWire(wire: BrokenWire, name: string, inputs: Inputs, routesOut: Set<string>): Inputs {
  if (wire === 'worker-egress' && name === 'qc-worker') return { ...inputs, networksAdvanced: (inputs.networksAdvanced ?? []).filter((n) => !routesOut.has(n.name)) };
  if (wire === 'clients-sync' && name === 'clients-sync') {
    const env = (inputs.envs ?? []).filter((e) => !e.startsWith('HYDRA_ADMIN_URL=') && !e.startsWith('CLIENTS_SYNC_DEADLINE_SECONDS='));
    return { ...inputs, envs: [...env, 'HYDRA_ADMIN_URL=http://hydra-admin-moved:4445', 'CLIENTS_SYNC_DEADLINE_SECONDS=3'] };
  }
  if (wire === 'site-settings' && name.startsWith('site-')) return { ...inputs, envs: (inputs.envs ?? []).filter((e) => !e.startsWith('SITE_ENV_')) };
  return inputs;
}

interface SiteToProxy {
  name: string;
  /** Its /etc/hosts (bind-mounted in its own mount namespace). */
  hosts: string;
  /** Caddy's root certificate, for its site process's NODE_EXTRA_CA_CERTS. */
  ca: string;
}

/** The pseudo-network of the world outside the stack: joined by every container on a network with a route out. */
export const INTERNET = 'internet (outside the stack)';

export interface RehearsalOptions {
  scratch: string;
  config: Record<string, unknown>;
  /**
   * Stand-ins outside the stack (a mail relay, the agency's endpoint, …) at `alias:port`, listening on
   * 127.0.0.1:<loopbackPort>: reachable only from containers on a network Docker gives a route out
   * (`internal: false`), as the internet is.
   */
  outside?: { alias: string; port: number; loopbackPort: number }[];
  /** Wires of the declared stack to cut before starting it (BROKEN_WIRES), to show which step then fails. */
  breakWires?: BrokenWire[];
  /**
   * The sites reach the proxy, as in the stack, where the proxy joins each site's network under the
   * public names the site's server calls (docs/infra.md, "Sites get their configuration"): each site's
   * namespace gets one address, PROXY_IP:443, relayed to the proxy's and to nothing else, its own
   * /etc/hosts naming there the proxy's aliases on its networks, and Caddy's CA as NODE_EXTRA_CA_CERTS
   * of its site process (the stack's certificates are public ones). Off by default: only `--web-app`
   * deploys a site whose server calls anything.
   */
  sitesReachProxy?: boolean;
  /** Log lines of the rehearsal (one per container event). */
  say(line: string): void;
}

export async function rehearseStack(options: RehearsalOptions): Promise<RehearsalStack> {
  const { scratch, say } = options;
  const repoRoot = join(import.meta.dirname, '..', '..');
  const endpoints = new EndpointMap();
  const containers = new Map<string, ContainerRecord>();
  const images = new Map<string, AssembledImage>();
  const remoteImages = new Map<string, string>();
  const clusters = new Map<string, Cluster>();
  const children: ChildProcess[] = [];
  /** What stop() closes after the processes, last opened first: each named, each bounded. */
  const closers: [string, () => Promise<void> | void][] = [];
  const findings: string[] = [];
  const stack: RehearsalStack = { scratch, endpoints, containers, images, clusters, findings, program: {}, restart: new Map(), stop: async () => undefined };
  const started = Date.now();
  // Networks with a route out (internal: false): their containers reach the stand-ins outside.
  const routesOut = new Set<string>();
  for (const o of options.outside ?? []) await endpoints.declare('outside', [{ alias: o.alias, networks: [INTERNET] }], o.port, o.loopbackPort);
  // Every process the rehearsal starts is in this cgroup from its first instruction (cgroup.ts), so
  // stopping ends all of them, whatever user they became and however they detached.
  const cgroup = RehearsalCgroup.create(`rehearsal-${process.pid}-${Date.now()}`);
  if (typeof cgroup === 'string') throw new Error(`the rehearsal needs a cgroup of its own to end every process it starts: ${cgroup}`);
  const inCgroup = (argv: string[]) => cgroup.wrap(argv);
  let inFlight = 0;
  let lastActivity = Date.now();
  const sitesToProxy: SiteToProxy[] = [];

  const volumeDir = (name: string) => {
    const dir = join(scratch, 'volumes', name);
    mkdirSync(dir, { recursive: true });
    return dir;
  };

  /** The container's view of the file system: uploads, then volumes, then the image. */
  const pathMapper = (name: string, inputs: Inputs, image?: AssembledImage) => {
    const files = new Map<string, string>();
    for (const upload of inputs.uploads ?? []) {
      const host = join(scratch, 'containers', name, 'files', upload.file);
      mkdirSync(dirname(host), { recursive: true });
      writeFileSync(host, upload.content);
      if (upload.executable) chmodSync(host, 0o755);
      files.set(upload.file, host);
    }
    const mounts = (inputs.volumes ?? []).map((v) => ({ containerPath: v.containerPath, host: volumeDir(v.volumeName) }));
    for (const mount of mounts) {
      if (!image) break;
      // A new named volume takes the owner of the image's directory it is mounted on (webhook.Dockerfile's chown).
      const owner = image.owners[mount.containerPath];
      if (owner && readdirSync(mount.host).length === 0) {
        const ids = userIds(owner);
        if (ids) chownSync(mount.host, ids.uid, ids.gid);
      }
      // A mount below a directory of the image (the webhook's spools under its DEPLOY_ROOT) is a link
      // there, so a path the process builds at run time (DEPLOY_ROOT/<deployPath>) reaches the volume.
      const inImage = image.hostPath(mount.containerPath);
      if (!existsSync(inImage) && existsSync(dirname(inImage))) symlinkSync(mount.host, inImage);
    }
    return (containerPath: string): string | undefined => {
      if (!containerPath.startsWith('/')) return undefined;
      const file = files.get(containerPath);
      if (file) return file;
      for (const mount of mounts) {
        if (containerPath === mount.containerPath || containerPath.startsWith(`${mount.containerPath}/`)) return join(mount.host, containerPath.slice(mount.containerPath.length));
      }
      if (image) return image.hostPath(containerPath);
      return undefined;
    };
  };

  /** Absolute container paths in a value (whole value, or after `=`/`:` in lists) become host paths. */
  const rewritePaths = (value: string, map: (p: string) => string | undefined) =>
    // A path may also open a quoted shell word (`chown 0:0 '/srv/sites'` in an `sh -c` script).
    value.replace(/(^|[\s=,'"])(\/[\w./-]+)/g, (whole, lead: string, path: string) => {
      const host = map(path);
      return host && (existsSync(host) || existsSync(dirname(host))) ? `${lead}${host}` : whole;
    });

  /** Where a relayed port of a container in its own namespace appears (short: Unix socket paths are limited to 108 bytes). */
  const socketPath = (name: string, port: number) => {
    const dir = join(scratch, 'sockets');
    mkdirSync(dir, { recursive: true });
    return join(dir, `${name}-${port}.sock`);
  };

  const record = (name: string, kind: ContainerRecord['kind'], as: string): ContainerRecord => {
    const entry: ContainerRecord = { name, kind, as, status: 'not started', log: [], startedMs: Date.now() - started };
    containers.set(name, entry);
    return entry;
  };

  const attachmentsOf = new Map<string, { alias: string; networks: string[] }[]>();
  const resourceOfDockerName = new Map<string, string>();
  const networkAttachments = (name: string, inputs: Inputs) => {
    if (inputs.name) resourceOfDockerName.set(inputs.name, name);
    if (inputs.networkMode?.startsWith('container:')) {
      // One network namespace: its listeners answer under the owner's names on the owner's networks.
      const dockerName = inputs.networkMode.slice('container:'.length);
      const owner = resourceOfDockerName.get(dockerName) ?? dockerName;
      endpoints.joinNetworks(name, endpoints.networks(owner));
      return { owner, attachments: attachmentsOf.get(owner) ?? [] };
    }
    const networks = (inputs.networksAdvanced ?? []).map((n) => n.name);
    endpoints.joinNetworks(name, networks.some((n) => routesOut.has(n)) ? [...networks, INTERNET] : networks);
    const attachments = [
      { alias: name, networks },
      ...(inputs.networksAdvanced ?? []).flatMap((n) => (n.aliases ?? []).map((alias) => ({ alias, networks: [n.name] }))),
    ];
    attachmentsOf.set(name, attachments);
    return { owner: name, attachments };
  };

  const spawnProcess = (entry: ContainerRecord, program: string, args: string[], cwd: string, env: Record<string, string>, hosts?: string) => {
    const options = { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] as ['ignore', 'pipe', 'pipe'] };
    const dropped = entry.runAs ? ['setpriv', `--reuid=${entry.runAs.uid}`, `--regid=${entry.runAs.gid}`, '--clear-groups', '--no-new-privs', '--'] : [];
    const argv = inCgroup([...dropped, program, ...args]);
    const child = entry.ownNetns
      ? spawnInOwnNetns(program, args, { ...options, ...(entry.runAs ? { user: entry.runAs } : {}), ...(hosts ? { hosts } : {}), wrap: inCgroup })
      : spawn(argv[0]!, argv.slice(1), options);
    entry.pid = child.pid;
    children.push(child);
    const collect = (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n')) if (line.trim()) entry.log.push(line);
      if (entry.log.length > 2000) entry.log.splice(0, entry.log.length - 2000);
    };
    child.stdout!.on('data', collect);
    child.stderr!.on('data', collect);
    const exited = new Promise<number>((resolve) => child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1))));
    return { child, exited };
  };

  /** Runs a Docker health check command in the container's terms until it passes (or the process dies). */
  const waitHealthy = async (entry: ContainerRecord, check: () => Promise<boolean>, exited: Promise<number> | undefined, timeoutMs = 60_000) => {
    let dead: number | undefined;
    void exited?.then((code) => (dead = code));
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (dead !== undefined) throw new Error(`${entry.name} exited with code ${dead} before it was healthy: ${entry.log.slice(-5).join(' | ')}`);
      if (await check().catch(() => false)) {
        entry.status = 'healthy';
        entry.readyMs = Date.now() - started;
        return;
      }
      await new Promise((r) => setTimeout(r, 150));
    }
    throw new Error(`${entry.name} not healthy after ${timeoutMs / 1000} s: ${entry.log.slice(-5).join(' | ')}`);
  };

  const runCheckCommand = async (test: string[], cwd: string, env: Record<string, string>, rewrite: (s: string) => string, netnsOf?: number): Promise<boolean> => {
    const [form, ...rest] = test;
    const argv = form === 'CMD-SHELL' ? ['/bin/sh', '-c', rewrite(rest.join(' '))] : rest.map(rewrite);
    if (argv[0] === 'node') argv[0] = process.execPath;
    // Docker runs a health check inside the container: here, inside its network namespace.
    const run = inCgroup(netnsOf === undefined ? argv : inNetnsOf(netnsOf, argv));
    const child = spawn(run[0]!, run.slice(1), { cwd, env, stdio: 'ignore' });
    return new Promise((resolve) => child.once('exit', (code) => resolve(code === 0)));
  };

  /**
   * The official node images carry a `node` user (uid 1000) that the project images hand their
   * services to (`WEBHOOK_USER=node`, `chown node:node`). Here the containers are processes on this
   * host, so that user must exist on it; the scratch folder must be traversable by it, as the image's
   * files are for that user in a container.
   */
  let imageUsersReady = false;
  const ensureImageUsers = () => {
    if (imageUsersReady) return;
    imageUsersReady = true;
    if (spawnSync('id', ['-u', 'node'], { stdio: 'ignore' }).status !== 0) {
      const made = spawnSync('useradd', ['--system', '--user-group', '--no-create-home', '--shell', '/usr/sbin/nologin', 'node'], { encoding: 'utf8' });
      if (made.status !== 0) findings.push(`the image user node could not be created on this host: ${made.stderr.trim()}`);
    }
    chmodSync(scratch, 0o711);
  };

  // ------------------------------------------------------------------ per image kind
  const startProjectContainer = async (name: string, inputs: Inputs, entry: ContainerRecord, image: AssembledImage, isJob: boolean) => {
    ensureImageUsers();
    const { owner, attachments } = networkAttachments(name, inputs);
    const map = pathMapper(name, inputs, image);
    const labels = Object.fromEntries((inputs.labels ?? []).map((l) => [l.label, l.value]));
    // Containers that run team code (the sites and their builders) get a network namespace of their
    // own, as under Docker: what they bind exists there alone, and they reach nothing of this host.
    entry.ownNetns = labels['platform.runs'] === 'team-code';
    if (inputs.user) {
      const ids = userIds(inputs.user);
      if (!ids) findings.push(`${name}: its user ${inputs.user} does not exist on this host; it ran as root`);
      else if (ids.uid !== 0) entry.runAs = ids;
    }
    const declaredEnv = parseEnvList(inputs.envs);
    entry.declaredEnv = declaredEnv;
    entry.mounts = Object.fromEntries((inputs.volumes ?? []).map((v) => [v.containerPath, volumeDir(v.volumeName)]));
    let env: Record<string, string> = { ...image.env, ...declaredEnv };
    // The ports it listens on: every *PORT variable with a number (PORT, IDENTITY_PORT, WEBHOOK_PORT),
    // the image's own ENV ones only when it runs the image's command (they belong to that command).
    // A container on this host's loopback gets a loopback port of its own; one in its own namespace
    // keeps its port, which its relay hands to the proxy as a Unix socket.
    const ownPorts = new Map<number, number>();
    const relayed: number[] = [];
    const listening = inputs.command?.length ? declaredEnv : env;
    for (const [key, value] of Object.entries(listening)) {
      if (!isJob && /(^|_)PORT$/.test(key) && /^\d+$/.test(value) && !/^(PG|GEOSERVER_DB_)/.test(key)) {
        const names = attachments.length ? attachments : [{ alias: owner, networks: endpoints.networks(owner) }];
        if (entry.ownNetns) {
          endpoints.declareSocket(owner, names, Number(value), socketPath(name, Number(value)));
          relayed.push(Number(value));
          continue;
        }
        const loopback = await endpoints.declare(owner, names, Number(value));
        ownPorts.set(Number(value), loopback);
        env[key] = String(loopback);
      }
    }
    env = endpoints.rewriteHostPortPairs(name, env);
    for (const [key, value] of Object.entries(env)) env[key] = rewritePaths(endpoints.rewrite(name, value), map);
    // Under Docker the proxy reaches the services from a bridge address (unique-local); here from
    // loopback. A trust-proxy setting that trusts unique-local peers trusts loopback here, no more.
    for (const [key, value] of Object.entries(env)) if (/TRUST_PROXY$/.test(key) && /\buniquelocal\b/.test(value)) env[key] = `${value},loopback`;
    // Only the rehearsal sets APP_ROOT: the image's /usr/local/bin scripts run its files from its folder.
    env.APP_ROOT = image.hostWorkdir;
    // The webhook's launcher runs build-submit, and the deploy script runs sites-restart, with an
    // environment of PATH only (by design), so the image's folder is written into the rehearsal's
    // copies of those scripts instead of passed along.
    const bin = join(image.root, 'usr/local/bin');
    for (const script of existsSync(bin) ? readdirSync(bin) : []) {
      const path = join(bin, script);
      const text = readFileSync(path, 'utf8');
      if (text.includes('${APP_ROOT:-/app}')) writeFileSync(path, text.replace('${APP_ROOT:-/app}', image.hostWorkdir));
    }
    env.PATH = `${bin}:${process.env.PATH ?? ''}`;
    // Its own HOME, writable by the user it runs as (a HOME it declares is a path of its own, e.g. /tmp).
    env.HOME = join(scratch, 'containers', name, 'home');
    mkdirSync(env.HOME, { recursive: true });
    if (entry.runAs) chownSync(env.HOME, entry.runAs.uid, entry.runAs.gid);
    // A site's path to the proxy (sitesReachProxy): its /etc/hosts, filled once the proxy is declared,
    // and the proxy's CA for its site process, copied once Caddy has made it.
    let toProxy: SiteToProxy | undefined;
    if (options.sitesReachProxy && entry.ownNetns && name.startsWith('site-')) {
      const dir = join(scratch, 'containers', name);
      toProxy = { name, hosts: join(dir, 'hosts'), ca: join(dir, 'proxy-ca.crt') };
      writeFileSync(toProxy.hosts, '127.0.0.1 localhost\n', { mode: 0o644 });
      env.SITE_ENV_NODE_EXTRA_CA_CERTS = toProxy.ca;
      sitesToProxy.push(toProxy);
    }
    const command = (inputs.command?.length ? inputs.command : image.cmd).map((a) => rewritePaths(endpoints.rewrite(name, a), map));
    const program = command[0] === 'node' ? process.execPath : command[0]!;
    const { exited } = spawnProcess(entry, program, command.slice(1), image.hostWorkdir, env, toProxy?.hosts);
    if (toProxy && entry.pid !== undefined) {
      const out = await relayOut(entry.pid, PROXY_IP, 443, socketPath(`${name}-to-proxy`, 443));
      children.push(out.relay);
      closers.push([`${name}'s path to the proxy`, out.close]);
    }
    if (entry.ownNetns && entry.pid !== undefined) {
      await ownNetnsReady(entry.pid);
      entry.detail = `network namespace of its own${entry.runAs ? `, uid ${entry.runAs.uid}` : ''}${relayed.length ? `; port ${relayed.join(', ')} reachable only through a Unix-socket relay` : ''}${toProxy ? `; reaches ${PROXY_IP}:443 (the proxy) through one` : ''}`;
      for (const port of relayed) {
        const relay = await relayPort(entry.pid, port, socketPath(name, port));
        children.push(relay);
      }
    }
    if (isJob) {
      const code = await exited;
      entry.status = code === 0 ? 'exited' : 'failed';
      entry.exitCode = code;
      return code;
    }
    const test = inputs.healthcheck?.tests ?? [];
    const rewriteCheck = (s: string) => rewritePaths(s.replace(/127\.0\.0\.1:(\d+)/g, (whole, p: string) => (ownPorts.has(Number(p)) ? `127.0.0.1:${ownPorts.get(Number(p))}` : whole)), map);
    await waitHealthy(entry, () => runCheckCommand(test, image.hostWorkdir, env, rewriteCheck, entry.ownNetns ? entry.pid : undefined), exited);
    return undefined;
  };

  const startPostgres = async (name: string, inputs: Inputs, entry: ContainerRecord, postgis: boolean) => {
    const { owner, attachments } = networkAttachments(name, inputs);
    const env = parseEnvList(inputs.envs);
    const port = await freePort();
    const cluster = startCluster({ port, superuser: env.POSTGRES_USER ?? 'postgres', password: env.POSTGRES_PASSWORD ?? '', database: env.POSTGRES_DB ?? 'postgres', postgis });
    clusters.set(name, cluster);
    closers.push([`the cluster of ${name}`, () => cluster.stop()]);
    await endpoints.declare(owner, attachments, 5432, port);
    entry.status = 'healthy';
    entry.readyMs = Date.now() - started;
  };

  const startShellJob = async (name: string, inputs: Inputs, entry: ContainerRecord, isJob: boolean) => {
    networkAttachments(name, inputs);
    const map = pathMapper(name, inputs);
    let env = parseEnvList(inputs.envs);
    env = endpoints.rewriteHostPortPairs(name, env);
    for (const [key, value] of Object.entries(env)) env[key] = rewritePaths(endpoints.rewrite(name, value), map);
    env.PATH = `${PG_BIN}:${process.env.PATH ?? ''}`;
    const argv = (inputs.entrypoints ?? []).map((a) => map(a) ?? a);
    let { child, exited } = spawnProcess(entry, argv[0]!, argv.slice(1), scratch, env);
    if (!isJob) {
      stack.restart.set(name, async () => {
        if (child.exitCode === null) {
          child.kill('SIGTERM');
          await exited;
        }
        ({ child, exited } = spawnProcess(entry, argv[0]!, argv.slice(1), scratch, env));
      });
    }
    if (isJob) {
      const code = await exited;
      entry.status = code === 0 ? 'exited' : 'failed';
      entry.exitCode = code;
      return code;
    }
    const test = inputs.healthcheck?.tests ?? [];
    await waitHealthy(entry, () => runCheckCommand(test, scratch, env, (s) => rewritePaths(s, map)), exited, 120_000);
    return undefined;
  };

  const uploadedYaml = (inputs: Inputs, path: string): Record<string, unknown> => {
    const upload = (inputs.uploads ?? []).find((u) => u.file === path);
    if (!upload) throw new Error(`no ${path} uploaded`);
    return parseYaml(upload.content) as Record<string, unknown>;
  };

  const attachmentsFor = (inputs: Inputs, alias: string) => (inputs.networksAdvanced ?? []).filter((n) => (n.aliases ?? []).includes(alias)).map((n) => n.name);

  /** The Ory database an Ory container's DSN names, connected as that DSN says (through the endpoint map). */
  const oryDatabase = async (name: string, inputs: Inputs): Promise<pg.Client> => {
    networkAttachments(name, inputs);
    const dsn = parseEnvList(inputs.envs).DSN;
    if (!dsn) throw new Error(`${name}: no DSN in its environment`);
    const client = new pg.Client({ connectionString: endpoints.rewrite(name, dsn), connectionTimeoutMillis: 5_000 });
    await client.connect();
    return client;
  };

  /**
   * `migrate sql up` of Kratos or Hydra, as far as the doubles (which keep their data in memory) can
   * take it: what the real job needs from the stack is proven for real. It connects with the declared
   * DSN over the declared networks and, as the declared role, creates Ory's migration table in its
   * database; a missing DSN, a database it cannot reach, a wrong password or a role without CREATE
   * there fail the job (exit 1), and its dependents are then never created, as under `pulumi up`.
   */
  const runOryMigrateStandIn = async (name: string, inputs: Inputs, entry: ContainerRecord): Promise<number> => {
    entry.status = 'exited';
    try {
      const client = await oryDatabase(name, inputs);
      try {
        await client.query('CREATE TABLE IF NOT EXISTS schema_migration (version varchar(48) NOT NULL PRIMARY KEY)');
        await client.query("INSERT INTO schema_migration (version) VALUES ('rehearsal-stand-in') ON CONFLICT DO NOTHING");
      } finally {
        await client.end();
      }
      entry.exitCode = 0;
      entry.detail = 'stand-in: connected with the declared DSN and created the migration table as its role';
      return 0;
    } catch (error) {
      entry.log.push(`migrate: ${(error as Error).message}`);
      entry.exitCode = 1;
      entry.detail = `stand-in migration failed: ${(error as Error).message}`;
      return 1;
    }
  };

  /** Like Kratos and Hydra themselves, refuse to serve an unmigrated database. */
  const assertOryMigrated = async (name: string, inputs: Inputs): Promise<void> => {
    const client = await oryDatabase(name, inputs);
    try {
      const { rows } = await client.query<{ migrated: boolean }>("SELECT to_regclass('schema_migration') IS NOT NULL AS migrated");
      if (!rows[0]?.migrated) throw new Error(`${name}: its database is not migrated (no schema_migration table)`);
    } finally {
      await client.end();
    }
  };

  const startKratos = async (name: string, inputs: Inputs, entry: ContainerRecord) => {
    networkAttachments(name, inputs);
    const yml = uploadedYaml(inputs, '/etc/config/kratos/kratos.yml') as {
      serve: { public: { base_url: string } };
      selfservice: {
        default_browser_return_url?: string;
        allowed_return_urls?: string[];
        flows: { login: { ui_url: string }; registration?: { enabled?: boolean; ui_url?: string; after?: { default_browser_return_url?: string } } };
      };
      session?: { cookie?: { domain?: string } };
    };
    const registration = yml.selfservice.flows.registration;
    const afterRegistration = registration?.after?.default_browser_return_url ?? yml.selfservice.default_browser_return_url;
    const kratos = await new KratosDouble({
      loginUiUrl: yml.selfservice.flows.login.ui_url,
      ...(registration?.enabled && registration.ui_url ? { registrationUiUrl: registration.ui_url } : {}),
      ...(afterRegistration ? { defaultBrowserReturnUrl: afterRegistration } : {}),
      allowedReturnUrls: yml.selfservice.allowed_return_urls ?? [],
      ...(yml.session?.cookie?.domain ? { cookieDomain: yml.session.cookie.domain } : {}),
    }).start();
    closers.push(['the Kratos double', () => kratos.close()]);
    stack.kratos = kratos;
    // The double builds browser-facing URLs from its base URL: the proxy's, as serve.public.base_url says.
    await exposeOryDouble(name, inputs, entry, kratos, yml.serve.public.base_url, { service: 'kratos', publicPort: 4433, adminPort: 4434 });
  };

  /**
   * Puts a started Ory double where the stack declares it: its public API under `<service>` (and the
   * container's own name) on `publicPort`, its admin API under `<service>-admin` on `adminPort`. The
   * double then builds browser-facing URLs from `browserUrl`, the proxy's address of its public API.
   */
  const exposeOryDouble = async (
    name: string,
    inputs: Inputs,
    entry: ContainerRecord,
    double: { public: { url: string }; admin: { url: string } },
    browserUrl: string,
    ports: { service: 'kratos' | 'hydra'; publicPort: number; adminPort: number },
  ) => {
    const publicPort = Number(new URL(double.public.url).port);
    const adminPort = Number(new URL(double.admin.url).port);
    double.public.url = browserUrl.replace(/\/$/, '');
    const admin = `${ports.service}-admin`;
    await endpoints.declare(name, [{ alias: ports.service, networks: attachmentsFor(inputs, ports.service) }, { alias: name, networks: endpoints.networks(name) }], ports.publicPort, publicPort);
    await endpoints.declare(name, [{ alias: admin, networks: attachmentsFor(inputs, admin) }], ports.adminPort, adminPort);
    entry.status = 'healthy';
    entry.readyMs = Date.now() - started;
  };

  const startHydra = async (name: string, inputs: Inputs, entry: ContainerRecord) => {
    networkAttachments(name, inputs);
    const yml = uploadedYaml(inputs, '/etc/config/hydra/hydra.yml') as {
      urls: { self: { issuer: string }; login: string; consent: string; logout: string; post_logout_redirect?: string };
      strategies?: { access_token?: string };
    };
    const hydra = await new HydraDouble({
      loginUrl: yml.urls.login,
      consentUrl: yml.urls.consent,
      logoutUrl: yml.urls.logout,
      postLogoutRedirect: yml.urls.post_logout_redirect ?? yml.urls.login,
    }).start();
    closers.push(['the Hydra double', () => hydra.close()]);
    stack.hydra = hydra;
    if (yml.strategies?.access_token && yml.strategies.access_token !== 'opaque') findings.push(`hydra.yml issues ${yml.strategies.access_token} access tokens; the Hydra double issues opaque ones only`);
    await exposeOryDouble(name, inputs, entry, hydra, yml.urls.self.issuer, { service: 'hydra', publicPort: 4444, adminPort: 4445 });
  };

  /** The accounts UI image: the stand-in serves its registration page from the env the stack declares. */
  const startAccountsUiStandIn = async (name: string, inputs: Inputs, entry: ContainerRecord) => {
    const { owner, attachments } = networkAttachments(name, inputs);
    const env = parseEnvList(inputs.envs);
    const port = Number(env.PORT ?? 3000);
    const loopback = await endpoints.declare(owner, attachments, port);
    const reach = (value: string | undefined, variable: string) => {
      if (!value) throw new Error(`${name} is declared without ${variable}`);
      return endpoints.rewrite(name, value);
    };
    const ui = await startAccountsUi({ KRATOS_PUBLIC_URL: reach(env.KRATOS_PUBLIC_URL, 'KRATOS_PUBLIC_URL'), KRATOS_BROWSER_URL: reach(env.KRATOS_BROWSER_URL, 'KRATOS_BROWSER_URL') }, loopback);
    closers.push(['the accounts UI stand-in', () => ui.close()]);
    // The declared health check, run against the stand-in's loopback port.
    const test = (inputs.healthcheck?.tests ?? []).map((a) => a.replace(`127.0.0.1:${port}`, `127.0.0.1:${loopback}`));
    await waitHealthy(entry, () => (test.length ? runCheckCommand(test, scratch, { PATH: process.env.PATH ?? '' }, (s) => s) : Promise.resolve(true)), undefined);
  };

  const startGeoServer = async (name: string, inputs: Inputs, entry: ContainerRecord) => {
    const { owner, attachments } = networkAttachments(name, inputs);
    const env = parseEnvList(inputs.envs);
    // Its data directory is the declared volume; its store reaches the database over its own networks.
    const dataVolume = (inputs.volumes ?? []).find((v) => v.containerPath === '/opt/geoserver_data');
    if (!dataVolume) throw new Error(`${name} is declared without a data directory volume at /opt/geoserver_data`);

    const geoserver = await startFakeGeoServer({
      user: env.GEOSERVER_ADMIN_USER ?? 'admin',
      password: env.GEOSERVER_ADMIN_PASSWORD ?? '',
      wfs: {
        dataDir: volumeDir(dataVolume.volumeName),
        ...(env.JAVA_TOOL_OPTIONS ? { jvmOptions: env.JAVA_TOOL_OPTIONS } : {}),
        resolveDatabase: (host, port) => {
          // The provisioning job's environment was already mapped from its own networks (GEOSERVER_DB_HOST/PORT),
          // so the store may hold a loopback address; a Docker name resolves over GeoServer's networks.
          if (host === '127.0.0.1') return { host, port };
          const address = endpoints.resolve(name, host, port);
          if (!address) throw new Error(`${name} cannot resolve ${host}:${port}`);
          const [ip, loopbackPort] = address.split(':');
          return { host: ip!, port: Number(loopbackPort) };
        },
      },
    });
    closers.push(['the GeoServer double', () => geoserver.close()]);
    stack.geoserver = geoserver;
    // The image's start script hands its data directory to RUN_WITH_USER_UID (CHANGE_OWNERSHIP_ON_FOLDERS,
    // chown -R), so the provisioning job, which runs as that user, may write into it.
    if (env.RUN_WITH_USER_UID && (env.CHANGE_OWNERSHIP_ON_FOLDERS ?? '').split(/\s+/).includes('/opt/geoserver_data')) {
      spawnSync('chown', ['-R', `${env.RUN_WITH_USER_UID}:${env.RUN_WITH_USER_GID ?? env.RUN_WITH_USER_UID}`, volumeDir(dataVolume.volumeName)]);
    }
    await endpoints.declare(owner, attachments, 8080, Number(new URL(geoserver.url).port));
    entry.status = 'healthy';
    entry.readyMs = Date.now() - started;
  };

  const startCaddy = async (name: string, inputs: Inputs, entry: ContainerRecord) => {
    networkAttachments(name, inputs);
    const caddyfile = (inputs.uploads ?? []).find((u) => u.file === '/etc/caddy/Caddyfile')?.content;
    if (!caddyfile) throw new Error('the proxy has no /etc/caddy/Caddyfile');
    const dataDir = join(scratch, 'caddy');
    mkdirSync(dataDir, { recursive: true });
    const httpsPort = 443;
    const adminPort = await freePort();
    // The rendered file as it is, with three changes for loopback: the global options bind Caddy to
    // its own loopback IP and use its internal CA instead of ACME, and each upstream host:port
    // becomes the loopback address of that container (the endpoint map, from the proxy's networks).
    const globals = [`\tdefault_bind ${PROXY_IP}`, '\tlocal_certs', '\tskip_install_trust', `\tadmin 127.0.0.1:${adminPort}`, '\thttp_port 80', `\thttps_port ${httpsPort}`];
    const rendered = caddyfile
      .replace(/^\{\n/m, `{\n${globals.join('\n')}\n`)
      .replace(/^(\s*reverse_proxy\s+)(\S+)$/gm, (_, lead: string, upstream: string) => `${lead}${endpoints.rewrite(name, upstream)}`)
      // forward_auth is a reverse proxy too (to the API): its upstream resolves over the proxy's networks alike.
      .replace(/^(\s*forward_auth\s+(?:@\S+\s+)?)(\S+)(\s*\{)$/gm, (_, lead: string, upstream: string, open: string) => `${lead}${endpoints.rewrite(name, upstream)}${open}`);
    const file = join(dataDir, 'Caddyfile');
    writeFileSync(file, rendered);
    const { exited } = spawnProcess(entry, 'caddy', ['run', '--config', file, '--adapter', 'caddyfile'], dataDir, {
      PATH: process.env.PATH ?? '',
      HOME: dataDir,
      XDG_DATA_HOME: join(dataDir, 'data'),
      XDG_CONFIG_HOME: join(dataDir, 'config'),
    });
    stack.proxy = { ip: PROXY_IP, httpsPort, dataDir: join(dataDir, 'data') };
    // Healthy is its admin API answering and a TLS handshake for every site of the file (the name as
    // SNI; the chain is checked by the steps): the admin API answers before the internal CA has
    // issued the sites' certificates (in the background, after start), and a browser arriving in
    // between got ERR_SSL_PROTOCOL_ERROR.
    const sites = [...rendered.matchAll(/^([a-z0-9.-]+) \{$/gm)].map((m) => m[1]!);
    const handshake = (servername: string) =>
      new Promise<boolean>((resolve) => {
        const socket = tlsConnect({ host: PROXY_IP, port: httpsPort, servername, rejectUnauthorized: false, timeout: 2_000 });
        const done = (ok: boolean) => {
          socket.destroy();
          resolve(ok);
        };
        socket.once('secureConnect', () => done(true));
        socket.once('error', () => done(false));
        socket.once('timeout', () => done(false));
      });
    await waitHealthy(entry, async () => (await fetch(`http://127.0.0.1:${adminPort}/config/`)).ok && (await Promise.all(sites.map(handshake))).every(Boolean), exited);
    if (sitesToProxy.length) {
      // Each site resolves the proxy's aliases on the networks it shares with the proxy (the stack's
      // siteUpstreamNames), and trusts Caddy's CA (made at its start).
      const root = join(dataDir, 'data', 'caddy/pki/authorities/local/root.crt');
      const deadline = Date.now() + 15_000;
      while (!existsSync(root) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      for (const site of sitesToProxy) {
        const shared = (inputs.networksAdvanced ?? []).filter((n) => endpoints.networks(site.name).includes(n.name));
        const names = [...new Set(shared.flatMap((n) => n.aliases ?? []))];
        writeFileSync(site.hosts, `127.0.0.1 localhost\n${names.map((alias) => `${PROXY_IP} ${alias}\n`).join('')}`);
        if (existsSync(root)) {
          copyFileSync(root, site.ca);
          chmodSync(site.ca, 0o644);
        } else findings.push(`${site.name}: Caddy made no CA within 15 s; its site process does not trust the proxy`);
      }
    }
  };

  // ------------------------------------------------------------------ the mocks
  const newContainer = async (name: string, inputs: Inputs): Promise<{ exitCode?: number }> => {
    const isJob = inputs.attach === true;
    const imageRef = inputs.image ?? '';
    const project = images.get(imageRef);
    const remote = remoteImages.get(imageRef) ?? '';
    const kind = isJob ? 'job' : 'service';
    const as = project ? `image ${project.dockerfile.split('/').pop()} assembled` : remote;
    const entry = record(name, kind, as);
    say(`start ${kind} ${name} (${as || imageRef})`);
    try {
      if (project) {
        const code = await startProjectContainer(name, inputs, entry, project, isJob);
        if (code !== undefined) return { exitCode: code };
        return {};
      }
      if (/^postgis\//.test(remote) && !inputs.entrypoints) await startPostgres(name, inputs, entry, true);
      else if (/^postgres:/.test(remote) && !inputs.entrypoints) await startPostgres(name, inputs, entry, false);
      else if (/^postgres:/.test(remote)) {
        const code = await startShellJob(name, inputs, entry, isJob);
        if (code !== undefined) return { exitCode: code };
      } else if (/^oryd\/(kratos|hydra):/.test(remote) && inputs.command?.[0] === 'migrate') {
        return { exitCode: await runOryMigrateStandIn(name, inputs, entry) };
      } else if (/^oryd\/kratos:/.test(remote)) {
        await assertOryMigrated(name, inputs);
        await startKratos(name, inputs, entry);
      } else if (/^oryd\/hydra:/.test(remote)) {
        await assertOryMigrated(name, inputs);
        await startHydra(name, inputs, entry);
      } else if (/^oryd\/kratos-selfservice-ui-node:/.test(remote)) await startAccountsUiStandIn(name, inputs, entry);
      else if (/geoserver/.test(remote)) await startGeoServer(name, inputs, entry);
      else if (/^caddy:/.test(remote)) await startCaddy(name, inputs, entry);
      else {
        entry.detail = `no stand-in for ${remote} on this machine`;
        findings.push(`${name}: not started (${entry.detail})`);
        return {};
      }
      say(`${name}: ${entry.status}${entry.exitCode !== undefined ? ` (exit ${entry.exitCode})` : ''}`);
      return {};
    } catch (error) {
      entry.status = 'failed';
      entry.detail = (error as Error).message;
      say(`${name}: FAILED ${entry.detail}`);
      throw error;
    } finally {
      if (entry.exitCode !== undefined) say(`${name}: exited ${entry.exitCode}${entry.exitCode ? ` — ${entry.log.slice(-3).join(' | ')}` : ''}`);
    }
  };

  await pulumi.runtime.setMocks(
    {
      newResource: async (args: pulumi.runtime.MockResourceArgs) => {
        inFlight++;
        if (process.env.REHEARSAL_DEBUG) console.log("newResource", args.type, args.name);
        lastActivity = Date.now();
        try {
          const inputs = reveal(args.inputs) as Record<string, unknown>;
          const state: Record<string, unknown> = { ...args.inputs };
          switch (args.type) {
            case 'docker:index/image:Image': {
              const build = inputs.build as { dockerfile: string };
              const imageName = inputs.imageName as string;
              const into = join(scratch, 'images', args.name);
              images.set(imageName, assembleImage(build.dockerfile, { repoRoot, into }));
              say(`image ${imageName} assembled from ${build.dockerfile.replace(`${repoRoot}/`, '')}`);
              state.repoDigest = '';
              break;
            }
            case 'docker:index/remoteImage:RemoteImage': {
              const id = `rehearsal-${args.name}`;
              remoteImages.set(id, inputs.name as string);
              state.imageId = id;
              break;
            }
            case 'random:index/randomPassword:RandomPassword':
              state.result = randomBytes(48).toString('base64url').slice(0, Number(inputs.length ?? 32));
              break;
            case 'random:index/randomBytes:RandomBytes':
              state.hex = randomBytes(Number(inputs.length ?? 32)).toString('hex');
              state.base64 = randomBytes(Number(inputs.length ?? 32)).toString('base64');
              break;
            case 'docker:index/network:Network':
              if (inputs.internal !== true) routesOut.add(String(inputs.name));
              break;
            case 'docker:index/container:Container': {
              const result = await newContainer(args.name, cutWires(options.breakWires ?? [], args.name, inputs as Inputs, routesOut));
              if (result.exitCode !== undefined) state.exitCode = result.exitCode;
              break;
            }
            default:
              break;
          }
          return { id: `${args.name}-id`, state };
        } finally {
          inFlight--;
          lastActivity = Date.now();
        }
      },
      call: (args: pulumi.runtime.MockCallArgs) => args.inputs,
    },
    PROJECT,
    'rehearsal',
  );
  const flat: Record<string, string> = {};
  for (const [key, value] of Object.entries(options.config)) flat[`${PROJECT}:${key}`] = typeof value === 'string' ? value : JSON.stringify(value);
  pulumi.runtime.setAllConfig(flat, []);

  const failures: string[] = [];
  const onRejection = (reason: unknown) => failures.push((reason as Error)?.message ?? String(reason));
  process.on('unhandledRejection', onRejection);
  stack.stop = async () => {
    process.off('unhandledRejection', onRejection);
    // SIGTERM as `docker stop` sends it, SIGKILL after a grace period like Docker's.
    const running = children.filter((child) => child.exitCode === null && child.signalCode === null);
    for (const child of running) child.kill('SIGTERM');
    const killer = setTimeout(() => running.forEach((child) => child.exitCode === null && child.kill('SIGKILL')), 5_000);
    await Promise.all(running.map((child) => (child.exitCode === null && child.signalCode === null ? new Promise((r) => child.once('exit', r)) : undefined)));
    clearTimeout(killer);
    // What the containers' own processes left behind (a site's children, a build's daemons): SIGKILL
    // from the cgroup, as Docker ends a stopped container's cgroup.
    const survivors = await cgroup.killAll();
    if (survivors.length) findings.push(`processes ${survivors.join(', ')} of the rehearsal could not be ended`);
    // Bounded as every step is: a close that waits for a connection nobody ends must not hang the rehearsal.
    for (const [what, close] of closers.reverse()) {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), 5_000)));
      const outcome = await Promise.race([Promise.resolve(close()).catch(() => undefined), late]);
      clearTimeout(timer);
      if (outcome === 'late') findings.push(`closing ${what} did not finish within 5 s`);
    }
  };
  try {
    stack.program = (await import('../program.js')) as Record<string, unknown>;
    lastActivity = Date.now();
    // Done when nothing is being created and nothing new was registered for a while (the dependents
    // of a failed job are never registered: that is the gate).
    while (inFlight > 0 || Date.now() - lastActivity < 3_000) await new Promise((r) => setTimeout(r, 200));
  } catch (error) {
    failures.push((error as Error).message);
  }
  for (const failure of failures) findings.push(`pulumi up would fail: ${failure}`);
  return stack;
}
