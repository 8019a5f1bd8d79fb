import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, realpathSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { createConnection, createServer, type Server } from 'node:net';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ControlRequestSchema, MAX_LINE_BYTES, type ControlResponse } from './protocol.js';

/**
 * The process supervisor of a site container (the stack runs one per deploy target; it can hold
 * several, as the tests do): one child process per site, each serving
 * the target's `live` release on the target's port. It restarts a crashed site (with back-off) and
 * restarts a site on request over the control socket (see protocol.ts), answering only after the new
 * process accepts connections on its port, so the deploy script's own health check and rollback work
 * as they do with systemd.
 */

export interface SiteSpec {
  /** astro-<key with / as -> (serviceNameOf in services/shared/targets.ts). */
  service: string;
  port: number;
  /** The target's deploy directory; the site runs in <deployDir>/live. */
  deployDir: string;
  /** The site's folder inside the release (the target's siteDir, e.g. services/web); the release root when unset. */
  siteDir?: string;
  /**
   * The target's site user (siteUserOf in services/shared/targets.ts): the site runs as this user
   * and its group, which may read the live release and nothing else of any target (see
   * docs/webhook.md). Needs the supervisor to run as root; unset, the site runs as the supervisor.
   */
  user?: { name: string; uid: number; gid: number };
}

export interface SupervisorOptions {
  sites: SiteSpec[];
  /** argv run in the release directory, e.g. ['npm', 'start']; gets PORT and HOST. */
  startCommand: string[];
  host: string;
  logger: Logger;
  /** How long a (re)started site may take to accept connections. */
  readyTimeoutMs?: number;
  /** How long a stopping site gets between SIGTERM and SIGKILL. */
  stopGraceMs?: number;
  /** Environment of the site processes (never the supervisor's secrets: it has none). */
  env?: NodeJS.ProcessEnv;
}

interface Running {
  child: ChildProcess;
  exited: Promise<void>;
  release: string;
}

export class Supervisor {
  private readonly running = new Map<string, Running>();
  private readonly crashes = new Map<string, number>();
  private readonly byName: Map<string, SiteSpec>;
  /** Restarts of one site run one after the other (a deploy's request and a crash restart may meet). */
  private readonly queues = new Map<string, Promise<unknown>>();
  private stopping = false;

  constructor(private readonly options: SupervisorOptions) {
    this.byName = new Map(options.sites.map((s) => [s.service, s]));
  }

  /** Start every site that has a live release; the others start on their first deploy. */
  async startAll(): Promise<void> {
    for (const site of this.options.sites) {
      if (existsSync(`${site.deployDir}/live`)) await this.restart(site.service).catch((error: Error) => this.options.logger.warn({ service: site.service, err: error.message }, 'site did not start'));
    }
  }

  knows(service: string): boolean {
    return this.byName.has(service);
  }

  pidOf(service: string): number | undefined {
    return this.running.get(service)?.child.pid;
  }

  /** Stop the site if it runs, start its current live release, wait until its port accepts connections. */
  restart(service: string): Promise<number> {
    const previous = this.queues.get(service) ?? Promise.resolve();
    const next = previous.catch(() => undefined).then(() => this.restartNow(service));
    this.queues.set(service, next);
    return next;
  }

  private async restartNow(service: string): Promise<number> {
    const site = this.byName.get(service);
    if (!site) throw new Error(`unknown service ${service}`);
    await this.stop(service);
    const live = `${site.deployDir}/live`;
    if (!existsSync(live)) throw new Error(`${service} has no live release`);
    // Resolve the symlink now: the process keeps running the release it started with, even after
    // the deploy script switches `live` to the next one.
    const release = realpathSync(live);
    const [command, ...args] = this.options.startCommand as [string, ...string[]];
    const child = spawn(command, args, {
      cwd: site.siteDir ? join(release, site.siteDir) : release,
      env: { ...this.options.env, PORT: String(site.port), HOST: this.options.host, ...(site.user ? { USER: site.user.name, LOGNAME: site.user.name } : {}) },
      stdio: ['ignore', 'inherit', 'inherit'],
      // Node sets the groups to the given gid only (no supplementary group of the supervisor's).
      ...(site.user ? { uid: site.user.uid, gid: site.user.gid } : {}),
    });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const entry: Running = { child, exited, release };
    this.running.set(service, entry);
    child.once('exit', (code, signal) => this.onExit(service, entry, code, signal));
    this.options.logger.info({ service, pid: child.pid, release }, 'site started');
    await waitForPort(this.options.host === '0.0.0.0' ? '127.0.0.1' : this.options.host, site.port, this.options.readyTimeoutMs ?? 30_000, exited);
    this.crashes.delete(service);
    return child.pid as number;
  }

  /** The status the site answers to GET <path> on its port (what the deploy script's health check asks). */
  probe(service: string, path: string, timeoutMs = 2_000): Promise<number> {
    const site = this.byName.get(service);
    if (!site) return Promise.reject(new Error(`unknown service ${service}`));
    const host = this.options.host === '0.0.0.0' ? '127.0.0.1' : this.options.host;
    return new Promise((resolve, reject) => {
      const req = httpRequest({ host, port: site.port, path, method: 'GET', headers: { host: `127.0.0.1:${site.port}`, connection: 'close' }, timeout: timeoutMs }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      req.on('error', (error) => reject(new Error(`${service} did not answer: ${error.message}`)));
      req.end();
    });
  }

  async stop(service: string): Promise<void> {
    const entry = this.running.get(service);
    if (!entry) return;
    this.running.delete(service);
    if (entry.child.exitCode === null && entry.child.signalCode === null) {
      entry.child.kill('SIGTERM');
      const timer = setTimeout(() => entry.child.kill('SIGKILL'), this.options.stopGraceMs ?? 10_000);
      await entry.exited;
      clearTimeout(timer);
    }
    this.options.logger.info({ service }, 'site stopped');
  }

  async stopAll(): Promise<void> {
    this.stopping = true;
    await Promise.all([...this.running.keys()].map((service) => this.stop(service)));
  }

  private onExit(service: string, entry: Running, code: number | null, signal: string | null): void {
    // Only an unexpected exit of the current process is a crash (a stop removes it from the map first).
    if (this.stopping || this.running.get(service) !== entry) return;
    this.running.delete(service);
    const crashes = (this.crashes.get(service) ?? 0) + 1;
    this.crashes.set(service, crashes);
    const delay = Math.min(30_000, 1_000 * 2 ** (crashes - 1));
    this.options.logger.error({ service, code, signal, retryInMs: delay }, 'site exited; restarting');
    setTimeout(() => {
      if (!this.stopping && !this.running.has(service)) this.restart(service).catch((error: Error) => this.options.logger.error({ service, err: error.message }, 'site restart failed'));
    }, delay).unref();
  }
}

function waitForPort(host: string, port: number, timeoutMs: number, exited: Promise<void>): Promise<void> {
  return new Promise((resolve, reject) => {
    const deadline = Date.now() + timeoutMs;
    let gone = false;
    void exited.then(() => {
      gone = true;
    });
    const attempt = () => {
      if (gone) return reject(new Error(`the site exited before it accepted connections on port ${port}`));
      const socket = createConnection({ host, port });
      socket.once('connect', () => {
        socket.destroy();
        resolve();
      });
      socket.once('error', () => {
        socket.destroy();
        if (Date.now() > deadline) return reject(new Error(`nothing accepted connections on port ${port} within ${timeoutMs} ms`));
        setTimeout(attempt, 100);
      });
    };
    attempt();
  });
}

/** The control socket: one JSON line in, one out. Requests are validated before anything happens. */
export async function startControlServer(socketPath: string, supervisor: Supervisor, logger: Logger): Promise<Server> {
  rmSync(socketPath, { force: true });
  const server = createServer((socket) => {
    let buffered = '';
    let handled = false;
    const reply = (response: ControlResponse) => {
      handled = true;
      socket.end(`${JSON.stringify(response)}\n`);
    };
    socket.setEncoding('utf8');
    socket.setTimeout(120_000, () => socket.destroy());
    socket.on('data', (chunk: string) => {
      if (handled) return;
      buffered += chunk;
      if (Buffer.byteLength(buffered) > MAX_LINE_BYTES) return reply({ ok: false, error: 'request too large' });
      const newline = buffered.indexOf('\n');
      if (newline < 0) return;
      let request;
      try {
        request = ControlRequestSchema.parse(JSON.parse(buffered.slice(0, newline)));
      } catch {
        return reply({ ok: false, error: 'malformed request' });
      }
      if (request.action === 'ping') return reply({ ok: true });
      const service = request.service;
      if (!supervisor.knows(service)) return reply({ ok: false, error: `unknown service ${service}` });
      handled = true;
      if (request.action === 'probe') {
        supervisor.probe(service, request.path).then(
          (status) => reply({ ok: true, service, status }),
          (error: Error) => reply({ ok: false, error: error.message }),
        );
        return;
      }
      logger.info({ service }, 'restart requested');
      supervisor.restart(service).then(
        (pid) => reply({ ok: true, service, pid }),
        (error: Error) => reply({ ok: false, error: error.message }),
      );
    });
    socket.on('error', () => socket.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => resolve());
  });
  // Owner and group only. In the stack the socket's directory is the site user's (0700): only the
  // site and its builder's root reach it, never the target's build user.
  chmodSync(socketPath, 0o660);
  return server;
}
