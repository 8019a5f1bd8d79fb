import { spawn } from 'node:child_process';
import {
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeSync,
} from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { readRevisionFile, releaseNameOrNull } from '../../services/shared/revision-file.mjs';
import { sendControlRequest } from '../sites/restart-client.js';
import { JobSchema, MAX_JOB_BYTES, spoolPaths, writeAtomically, type Job } from './spool.js';

/**
 * A target's builder: takes deploy requests from the target's spool (spool.ts), one at a time, and
 * runs the deploy script (scripts/deploy-branch.sh) for each, in this container only:
 *
 * - the script runs as root here and runs every build step as the target's build user (setpriv,
 *   no new privileges, an allow-listed environment); the release goes into the target's site volume;
 * - every deploy is a process group of its own, stopped (SIGTERM, then SIGKILL) when it runs past
 *   `timeoutMs`, when the target's directory grows by more than `diskLimitBytes`, or when the webhook
 *   cancels it; the container's limits bound its memory, CPU, processes (RLIMIT_NPROC of the build
 *   user), file size and /tmp;
 * - the build reaches no network but the egress proxy, which lets it through to the package registry
 *   only (the proxy credential for the git host is in the script's environment, never the build's);
 * - the site is restarted through its control socket (sites-restart), and the script's health check
 *   on 127.0.0.1:<port> is answered here by asking the site container over that socket for the
 *   status of the page (`probe`): the builder shares no network with the site;
 * - what is live is mirrored into the spool for the webhook, then the exit code is written. The
 *   release's REVISION may be whatever a build left there (a FIFO, a link to a root-only file, a huge
 *   file): it is read as the webhook's launcher reads it (services/shared/revision-file.mjs: no link
 *   followed, no writer waited for, a small regular file only, within a time limit) and mirrored only
 *   when it is a commit id; the release only when its name is a release name.
 */

export interface BuilderTarget {
  key: string;
  matchPattern: 'exact' | 'prefix';
  repo: string;
  port: number;
  service: string;
  siteDir?: string;
}

export interface BuilderOptions {
  target: BuilderTarget;
  spool: string;
  /** The target's directory on its site volume (deploy-branch.sh's <deployDir>). */
  deployDir: string;
  /** The deploy script and the control socket of the target's site container. */
  deployScript: string;
  controlSocket: string;
  /** The deploy script's environment (users, restart command, proxies, allow-list…), without the per-deploy part. */
  scriptEnv: Record<string, string>;
  timeoutMs: number;
  /** Growth of deployDir a deploy may cause (bytes on disk, hard links once). */
  diskLimitBytes: number;
  /** How often the growth is measured. */
  diskCheckMs?: number;
  /** SIGTERM to SIGKILL. */
  killGraceMs?: number;
  /** Uid of the build user: its leftovers in tmpDir are removed after every deploy. */
  buildUid?: number;
  tmpDir?: string;
  /** The owner of the spool's files the webhook writes (uid:gid), when running as root. */
  spoolOwner?: { uid: number; gid: number };
  logger: Logger;
  pollMs?: number;
}

/** Does a branch belong to this target (the webhook's own routing rule: services/shared/targets.ts)? */
export function branchMatches(target: Pick<BuilderTarget, 'key' | 'matchPattern'>, branch: string): boolean {
  return target.matchPattern === 'exact' ? branch === target.key : branch.startsWith(`${target.key}/`) && branch.length > target.key.length + 1;
}

export class Builder {
  private readonly paths: ReturnType<typeof spoolPaths>;
  private stopping = false;
  private idle: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;

  constructor(private readonly options: BuilderOptions) {
    this.paths = spoolPaths(options.spool);
  }

  /** Prepare the spool, settle what a previous builder left, mirror what is live, then take requests. */
  start(): void {
    const { paths } = this;
    for (const dir of [paths.jobs, paths.logs]) mkdirSync(dir, { recursive: true });
    if (this.options.spoolOwner) {
      const { uid, gid } = this.options.spoolOwner;
      for (const dir of [this.options.spool, paths.jobs, paths.logs]) chownSync(dir, uid, gid);
    }
    for (const name of readdirSync(paths.jobs)) {
      const id = name.replace(/\.taken$/, '');
      if (name.endsWith('.taken') && !existsSync(paths.exit(id))) {
        this.appendLog(id, 'the builder restarted during this deploy; the next deploy puts the previous release back if it was interrupted after the switch\n');
        writeAtomically(paths.exit(id), '1\n');
      }
    }
    this.beat();
    this.heartbeat = setInterval(() => this.beat(), 10_000);
    this.idle = this.mirrorLive().finally(() => this.schedule());
  }

  /** Stop taking requests and stop the running deploy (its script puts the previous release back). */
  async stop(): Promise<void> {
    this.stopping = true;
    clearTimeout(this.timer);
    clearInterval(this.heartbeat);
    this.stopCurrent?.('the builder is stopping');
    await this.idle;
  }

  private stopCurrent: ((why: string) => void) | undefined;

  private beat(): void {
    const now = new Date();
    try {
      if (!existsSync(this.paths.heartbeat)) writeAtomically(this.paths.heartbeat, 'alive\n');
      utimesSync(this.paths.heartbeat, now, now);
    } catch (error) {
      this.options.logger.error({ err: (error as Error).message }, 'cannot write the heartbeat');
    }
  }

  private schedule(): void {
    if (this.stopping) return;
    this.timer = setTimeout(() => {
      this.idle = this.takeNext().finally(() => this.schedule());
    }, this.options.pollMs ?? 250);
  }

  /** The oldest waiting request, taken by rename (so it is taken once), then run. */
  private async takeNext(): Promise<void> {
    const waiting = readdirSync(this.paths.jobs)
      .filter((name) => name.endsWith('.json'))
      .map((name) => ({ name, at: statSync(join(this.paths.jobs, name), { throwIfNoEntry: false })?.mtimeMs ?? 0 }))
      .sort((a, b) => a.at - b.at || a.name.localeCompare(b.name));
    for (const { name } of waiting) {
      const id = name.slice(0, -'.json'.length);
      const taken = this.paths.taken(id);
      try {
        renameSync(join(this.paths.jobs, name), taken);
      } catch {
        continue; // withdrawn meanwhile
      }
      const code = await this.run(id, taken);
      await this.mirrorLive();
      this.prune();
      writeAtomically(this.paths.exit(id), `${code}\n`);
      return;
    }
  }

  private appendLog(id: string, text: string): void {
    const fd = openSync(this.paths.log(id), 'a', 0o644);
    try {
      writeSync(fd, text);
    } finally {
      closeSync(fd);
    }
  }

  private readJob(id: string, path: string): Job | string {
    try {
      if (statSync(path).size > MAX_JOB_BYTES) return 'request too large';
      const job = JobSchema.parse(JSON.parse(readFileSync(path, 'utf8')));
      if (job.id !== id) return 'request id does not match its file';
      if (!branchMatches(this.options.target, job.branch)) return `branch ${job.branch} does not belong to target ${this.options.target.key}`;
      return job;
    } catch {
      return 'malformed request (only id, branch and commit are accepted)';
    }
  }

  /** One deploy: the script's exit code (2 for a refused request, 128+n for a signal). */
  private async run(id: string, path: string): Promise<number> {
    const { options } = this;
    const { logger, target } = options;
    const job = this.readJob(id, path);
    if (typeof job === 'string') {
      this.appendLog(id, `builder: refused: ${job}\n`);
      logger.warn({ id, reason: job }, 'deploy request refused');
      return 2;
    }
    logger.info({ id, branch: job.branch, commit: job.commit }, 'deploy started');
    const responder = await this.healthResponder().catch((error: Error) => {
      this.appendLog(id, `builder: cannot answer the health check on 127.0.0.1:${target.port}: ${error.message}\n`);
      return undefined;
    });
    const args = [job.branch, options.deployDir, String(target.port), target.repo, ...(job.commit ? [job.commit] : [])];
    const env = { ...options.scriptEnv, SERVICE_NAME: target.service, SITES_CONTROL_SOCKET: options.controlSocket, ...(target.siteDir ? { SITE_DIR: target.siteDir } : {}) };
    const logFd = openSync(this.paths.log(id), 'a', 0o644);
    const baseline = await diskUsage(options.deployDir);
    let reason: string | undefined;
    let code: number;
    try {
      const child = spawn(options.deployScript, args, { env, detached: true, stdio: ['ignore', logFd, logFd] });
      const exited = new Promise<number>((resolve) => {
        child.once('error', (error) => {
          writeSync(logFd, `builder: could not start the deploy script: ${error.message}\n`);
          resolve(1);
        });
        child.once('exit', (exitCode, signal) => resolve(exitCode ?? 128 + (signal ? signalNumber(signal) : 1)));
      });
      const stopWith = (why: string) => {
        if (reason || child.pid === undefined) return;
        reason = why;
        writeSync(logFd, `builder: stopping the deploy: ${why}\n`);
        killGroup(child.pid, 'SIGTERM');
        setTimeout(() => killGroup(child.pid!, 'SIGKILL'), options.killGraceMs ?? 30_000).unref();
      };
      this.stopCurrent = stopWith;
      const deadline = setTimeout(() => stopWith(`it ran longer than ${options.timeoutMs / 1000} s`), options.timeoutMs);
      const cancelWatch = setInterval(() => {
        if (existsSync(this.paths.cancel(id))) stopWith('cancelled by the webhook');
      }, 250);
      let measuring = false;
      const diskWatch = setInterval(() => {
        if (measuring) return;
        measuring = true;
        void diskUsage(options.deployDir).then((usage) => {
          measuring = false;
          const grown = usage - baseline;
          if (grown > options.diskLimitBytes) stopWith(`the target's directory grew by ${Math.round(grown / 1048576)} MiB, more than ${Math.round(options.diskLimitBytes / 1048576)} MiB`);
        });
      }, options.diskCheckMs ?? 2_000);
      code = await exited;
      this.stopCurrent = undefined;
      clearTimeout(deadline);
      clearInterval(cancelWatch);
      clearInterval(diskWatch);
      // Nothing a deploy started outlives it.
      if (child.pid !== undefined) killGroup(child.pid, 'SIGKILL');
    } finally {
      closeSync(logFd);
      responder?.close();
      this.cleanTmp();
    }
    logger.info({ id, code, stopped: reason }, 'deploy ended');
    return code;
  }

  /**
   * The deploy script checks the site on 127.0.0.1:<port> after the restart. Here that port answers
   * with the status the site container reports for the same request (control socket `probe`): the
   * status line only, never the page.
   */
  private healthResponder(): Promise<Server> {
    const { target, controlSocket } = this.options;
    const server = createServer((socket) => {
      let head = '';
      socket.setEncoding('latin1');
      socket.setTimeout(5_000, () => socket.destroy());
      socket.on('error', () => socket.destroy());
      socket.on('data', (chunk: string) => {
        head += chunk;
        const end = head.indexOf('\r\n');
        if (end < 0) {
          if (head.length > 2048) socket.destroy();
          return;
        }
        socket.removeAllListeners('data');
        const [method, path] = head.slice(0, end).split(' ');
        if (method !== 'GET' || !path?.startsWith('/')) return void socket.end('HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n');
        void sendControlRequest(controlSocket, { action: 'probe', service: target.service, path }, 4_000).then((answer) => {
          const status = answer.ok && answer.status ? answer.status : 502;
          socket.end(`HTTP/1.0 ${status} Probe\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
        });
      });
    });
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(target.port, '127.0.0.1', () => resolve(server));
    });
  }

  /**
   * spool/live -> deploys/<release> with its REVISION, as the target's directory has it: the release
   * only when `live` names a release, its REVISION only when it is a commit id (empty otherwise), read
   * without following a link or waiting for a writer (readRevisionFile). Never rejects: a spool it
   * cannot write is logged, and the request's exit code is written all the same.
   */
  private async mirrorLive(): Promise<void> {
    const { paths } = this;
    const { deployDir, logger } = this.options;
    try {
      let release: string | null = null;
      try {
        // `live` and deploys/ are root's; the name is checked all the same before it becomes a path.
        release = releaseNameOrNull(readlinkSync(join(deployDir, 'live')).split('/').pop());
      } catch {
        // nothing live (yet)
      }
      if (!release) {
        rmSync(paths.live, { force: true });
        return;
      }
      const commit = await readRevisionFile(join(deployDir, 'deploys', release, 'REVISION'));
      mkdirSync(join(paths.deploys, release), { recursive: true });
      writeAtomically(join(paths.deploys, release, 'REVISION'), commit ? `${commit}\n` : '');
      const temp = `${paths.live}.tmp-${process.pid}`;
      rmSync(temp, { force: true });
      symlinkSync(`deploys/${release}`, temp);
      renameSync(temp, paths.live);
      for (const other of readdirSync(paths.deploys)) if (other !== release) rmSync(join(paths.deploys, other), { recursive: true, force: true });
    } catch (error) {
      logger.error({ err: (error as Error).message }, 'cannot mirror what is live into the spool');
    }
  }

  /** Finished requests older than a week, and all but the newest 100 webhook deploy logs. */
  private prune(): void {
    const weekAgo = Date.now() - 7 * 24 * 3600 * 1000;
    for (const name of readdirSync(this.paths.jobs)) {
      const path = join(this.paths.jobs, name);
      const stat = statSync(path, { throwIfNoEntry: false });
      if (stat && stat.mtimeMs < weekAgo && !name.endsWith('.json')) rmSync(path, { force: true });
    }
    const logs = readdirSync(this.paths.logs).filter((n) => /^deploy-\d{14}-/.test(n)).sort();
    for (const name of logs.slice(0, Math.max(0, logs.length - 100))) rmSync(join(this.paths.logs, name), { force: true });
  }

  /** What the build user left in /tmp (the container's tmpfs) goes with its deploy. */
  private cleanTmp(): void {
    const { buildUid, tmpDir } = this.options;
    if (buildUid === undefined || !tmpDir) return;
    for (const name of readdirSync(tmpDir)) {
      const path = join(tmpDir, name);
      if (statSync(path, { throwIfNoEntry: false, bigint: false })?.uid === buildUid) rmSync(path, { recursive: true, force: true });
    }
  }
}

/** Bytes on disk under a directory, one file system, hard links counted once (du); 0 when it is missing. */
export function diskUsage(dir: string): Promise<number> {
  return new Promise((resolve) => {
    const du = spawn('du', ['-sx', '--block-size=1', dir], { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    du.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    du.once('error', () => resolve(0));
    du.once('close', () => resolve(Number(out.split('\t')[0]) || 0));
  });
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // already gone
  }
}

function signalNumber(signal: NodeJS.Signals): number {
  return ({ SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 } as Record<string, number>)[signal] ?? 1;
}
