/**
 * Network namespaces for the rehearsal: what Docker gives every container that does not share
 * another's, for the containers where it matters here (the branch sites and their builders, which
 * run code from team pushes).
 *
 * A process started with `spawnInOwnNetns` has a network of its own holding only a loopback
 * interface: whatever it binds (another target's port, the webhook's port) exists in its namespace
 * alone, and it reaches nothing of the host's loopback. The proxy reaches one of its ports through
 * `relayPort`: a small relay (relay.mjs) started inside the namespace (nsenter) that listens on a Unix
 * socket and forwards to 127.0.0.1:<port> there, so Caddy's upstream is `unix//<socket>`.
 *
 * The other way, `relayOut` gives a process in such a namespace one address to dial that leads to
 * one address of the host (the proxy's), and nothing else: a relay inside the namespace listens on
 * that address and forwards to a Unix socket, whose other end, in this process, dials the host's.
 *
 * Needs root (unshare --net, nsenter) and util-linux's unshare/nsenter/setpriv plus iproute2's ip.
 */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, readlinkSync, rmSync } from 'node:fs';
import { createConnection, createServer, type Socket } from 'node:net';
import { join } from 'node:path';

const RELAY = join(import.meta.dirname, 'relay.mjs');

/** Why namespaces cannot be made here, or undefined when they can. */
export function netnsUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'not running as root (unshare --net and nsenter need it)';
  for (const [tool, args] of [['unshare', ['--version']], ['nsenter', ['--version']], ['setpriv', ['--version']], ['ip', ['-V']]] as const) {
    if (spawnSync(tool, args, { stdio: 'ignore' }).status !== 0) return `${tool} not found (apt-get install ${tool === 'ip' ? 'iproute2' : 'util-linux'})`;
  }
  const probe = spawnSync('unshare', ['--net', '--', 'ip', 'link', 'set', 'lo', 'up'], { encoding: 'utf8' });
  if (probe.status !== 0) return `unshare --net does not work here: ${probe.stderr.trim()}`;
  return undefined;
}

export interface RunAs {
  uid: number;
  gid: number;
}

/** setpriv words that make the rest of the command line run as `user`, with no groups and no new privileges. */
function dropTo(user: RunAs | undefined): string[] {
  return user ? ['setpriv', `--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups', '--no-new-privs', '--'] : [];
}

/**
 * `program args…` in a new network namespace with its loopback up (unshare execs, so the child's
 * pid is the program's and /proc/<pid>/ns/net names the namespace), as `user` when given; `wrap`
 * puts a prefix that execs the rest in front (the rehearsal's cgroup, cgroup.ts).
 */
export function spawnInOwnNetns(program: string, args: readonly string[], options: SpawnOptions & { user?: RunAs; wrap?: (argv: string[]) => string[]; hosts?: string } = {}): ChildProcess {
  const { user, wrap = (argv) => argv, hosts, ...spawnOptions } = options;
  // With `hosts`, a mount namespace of its own too, where that file is /etc/hosts (the names the
  // container resolves, as Docker's embedded DNS answers them on its networks); "$1" is the file.
  const argv = hosts
    ? wrap(['unshare', '--net', '--mount', '--', '/bin/sh', '-c', 'ip link set lo up && mount --bind "$1" /etc/hosts && shift && exec "$@"', 'netns', hosts, ...dropTo(user), program, ...args])
    : wrap(['unshare', '--net', '--', '/bin/sh', '-c', 'ip link set lo up && exec "$@"', 'netns', ...dropTo(user), program, ...args]);
  return spawn(argv[0]!, argv.slice(1), spawnOptions);
}

/** `program args…` inside the network namespace of process `pid` (and nothing else of it), as `user` when given. */
export function spawnInNetnsOf(pid: number, program: string, args: readonly string[], options: SpawnOptions & { user?: RunAs } = {}): ChildProcess {
  const { user, ...spawnOptions } = options;
  return spawn('nsenter', [`--net=/proc/${pid}/ns/net`, '--', ...dropTo(user), program, ...args], spawnOptions);
}

/** The argv that runs a command inside the network namespace of `pid` (for health checks). */
export function inNetnsOf(pid: number, argv: readonly string[]): string[] {
  return ['nsenter', `--net=/proc/${pid}/ns/net`, '--', ...argv];
}

/** Resolves once process `pid` is in a network namespace other than this process's (unshare has run). */
export async function ownNetnsReady(pid: number, timeoutMs = 10_000): Promise<void> {
  const mine = readlinkSync('/proc/self/ns/net');
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let theirs: string | undefined;
    try {
      theirs = readlinkSync(`/proc/${pid}/ns/net`);
    } catch {
      throw new Error(`process ${pid} exited before it had a network namespace of its own`);
    }
    if (theirs !== mine) return;
    if (Date.now() > deadline) throw new Error(`process ${pid} has no network namespace of its own after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Hands port `port` of the namespace of `pid` to the file system as `socketPath`; resolves once the
 * socket exists. The relay keeps the namespace alive while it runs (a site restarting inside keeps
 * its namespace and its socket).
 */
export async function relayPort(pid: number, port: number, socketPath: string, timeoutMs = 10_000): Promise<ChildProcess> {
  // Entered too early, nsenter would join this (the host's) namespace.
  await ownNetnsReady(pid, timeoutMs);
  const relay = spawnInNetnsOf(pid, process.execPath, [RELAY, socketPath, String(port)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  relay.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(socketPath)) {
    if (relay.exitCode !== null || relay.signalCode !== null) throw new Error(`the relay for port ${port} of pid ${pid} exited: ${stderr.trim()}`);
    if (Date.now() > deadline) {
      relay.kill('SIGKILL');
      throw new Error(`the relay for port ${port} of pid ${pid} did not create ${socketPath} within ${timeoutMs} ms`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return relay;
}

/**
 * Makes `ip:port` inside the namespace of `pid` lead to `ip:port` of this host and nowhere else: a
 * relay in the namespace listens there and forwards each connection to `socketPath`, which this
 * process serves by dialling the host's `ip:port`. Resolves once the relay listens; `close` ends the
 * socket's server (the relay itself ends with the rehearsal's processes).
 */
export async function relayOut(pid: number, ip: string, port: number, socketPath: string, timeoutMs = 10_000): Promise<{ relay: ChildProcess; close: () => Promise<void> }> {
  await ownNetnsReady(pid, timeoutMs);
  rmSync(socketPath, { force: true });
  // Every relayed connection, so that close ends them instead of waiting for them.
  const open = new Set<Socket>();
  const server = createServer((inner) => {
    const outer = createConnection({ host: ip, port });
    for (const socket of [inner, outer]) {
      open.add(socket);
      socket.once('close', () => open.delete(socket));
    }
    inner.pipe(outer).pipe(inner);
    outer.on('error', () => inner.destroy());
    inner.on('error', () => outer.destroy());
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(socketPath, resolve));
  const close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const socket of open) socket.destroy();
    });
  const relay = spawnInNetnsOf(pid, process.execPath, [RELAY, '--listen', `${ip}:${port}`, socketPath], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const ready = new Promise<void>((resolve, reject) => {
    relay.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('listening')) resolve();
    });
    relay.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    relay.once('exit', () => reject(new Error(`the relay to ${ip}:${port} in the namespace of pid ${pid} exited: ${output.trim()}`)));
  });
  const timer = setTimeout(() => relay.kill('SIGKILL'), timeoutMs);
  try {
    await ready;
  } catch (error) {
    await close();
    throw error;
  } finally {
    clearTimeout(timer);
  }
  return { relay, close };
}
