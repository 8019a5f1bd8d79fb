/**
 * The server's side of the deploy launcher (launcher-process.mjs): a helper process, forked at
 * start while this process is still small (and, with WEBHOOK_USER, still root), that starts every
 * deploy script, signals its process group and reads what is live.
 *
 * If the helper dies, its unfinished deploys are stopped (SIGTERM to their process groups, when
 * this process may) and reported as failed, and `onUnexpectedExit` is called. Without it the next
 * deploy forks a new helper; a server that gave up root sets it to stop instead (boot.ts), because
 * a helper it forks can no longer run isolated deploys or end the old helper's deploys: the service
 * manager restarts the whole server as root, and the new helper ends what the old one left running
 * (launcher-process.mjs, "Restarts").
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import type { LauncherPlan } from './invocation.js';
import type { DeployOutcome, LaunchedProcess, ProcessLauncher, StartRequest } from './runner.js';
import { commitIdOrNull, releaseNameOrNull } from './types.js';

const HELPER = fileURLToPath(new URL('./launcher-process.mjs', import.meta.url));

type LauncherMessage =
  | { type: 'started'; id: number; pid: number }
  | { type: 'exited'; id: number; exitCode: number | null; signal: NodeJS.Signals | null; spawnError: string | null }
  | { type: 'live'; id: number; commit: string | null; release: string | null }
  | { type: 'orphan'; key: string; pid: number; ended: 'SIGTERM' | 'SIGKILL' };

interface Pending {
  pid: number | undefined;
  startedListeners: ((pid: number) => void)[];
  resolve: (result: Pick<DeployOutcome, 'exitCode' | 'signal' | 'spawnError'>) => void;
}

export interface LiveRelease {
  /** A commit id, or null (nothing live, or its REVISION is not one). */
  commit: string | null;
  /** A release name (14 digits), or null. */
  release: string | null;
}

export class DeployLauncher implements ProcessLauncher {
  private helper: ChildProcess | null = null;
  private readonly pending = new Map<number, Pending>();
  private readonly liveQueries = new Map<number, (live: LiveRelease) => void>();
  private nextId = 1;
  private closed = false;
  /** Called when the helper exits without close() having been called. */
  onUnexpectedExit: ((code: number | null, signal: NodeJS.Signals | null) => void) | null = null;

  constructor(
    private readonly logger: Logger,
    private readonly plan: LauncherPlan,
  ) {}

  /** Fork the helper now (cheap while the server is small, and before it gives up root). */
  start(): void {
    this.ensureHelper();
  }

  launch(request: StartRequest): LaunchedProcess {
    const id = this.nextId++;
    const entry: Pending = { pid: undefined, startedListeners: [], resolve: () => undefined };
    const exited = new Promise<Pick<DeployOutcome, 'exitCode' | 'signal' | 'spawnError'>>((resolve) => (entry.resolve = resolve));
    this.pending.set(id, entry);
    const helper = this.ensureHelper();
    helper.send({ type: 'start', id, ...request }, (error) => {
      if (error) this.settle(id, { exitCode: null, signal: null, spawnError: `deploy launcher unreachable: ${error.message}` });
    });
    const signal = (sig: 'SIGTERM' | 'SIGKILL'): void => {
      if (this.helper?.connected) this.helper.send({ type: 'signal', id, signal: sig });
      else if (entry.pid !== undefined) killGroup(entry.pid, sig);
    };
    return {
      get pid() {
        return entry.pid;
      },
      onStarted(listener) {
        if (entry.pid !== undefined) listener(entry.pid);
        else entry.startedListeners.push(listener);
      },
      signal,
      exited,
    };
  }

  /** The commit and release live for a target, read by the launcher (it may read the target's directory). */
  live(key: string): Promise<LiveRelease> {
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.liveQueries.set(id, resolve);
      this.ensureHelper().send({ type: 'live', id, key }, (error) => {
        if (error) this.answerLive(id, { commit: null, release: null });
      });
    });
  }

  /**
   * Look again for deploys a dead launcher left running on this host (another replica's, on a
   * shared DEPLOY_ROOT) and stop them, as at start (launcher-process.mjs, "Restarts").
   */
  endOrphans(): void {
    if (this.helper?.connected) this.helper.send({ type: 'end-orphans' });
  }

  /** Let the helper go (it exits); call after every deploy has finished. */
  close(): void {
    this.closed = true;
    if (this.helper?.connected) this.helper.disconnect();
    this.helper = null;
  }

  private ensureHelper(): ChildProcess {
    if (this.helper?.connected) return this.helper;
    this.closed = false;
    // execArgv []: plain Node, no TypeScript loader or test-runner flags, so it stays small.
    // env PATH only: the helper holds nothing worth reading from /proc/<pid>/environ.
    const helper = fork(HELPER, [], {
      execArgv: [],
      env: { PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin' },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'json',
    });
    helper.send(this.plan);
    helper.on('message', (message: LauncherMessage) => this.onMessage(message));
    helper.once('exit', (code, signal) => {
      if (this.helper === helper) this.helper = null;
      for (const id of [...this.liveQueries.keys()]) this.answerLive(id, { commit: null, release: null });
      const unexpected = !this.closed;
      if (this.pending.size > 0) {
        if (unexpected) this.logger.error({ code, signal, unfinished: this.pending.size }, 'deploy launcher exited; stopping its unfinished deploys');
        for (const [id, entry] of this.pending) {
          if (entry.pid !== undefined) killGroup(entry.pid, 'SIGTERM');
          this.settle(id, { exitCode: null, signal: null, spawnError: 'the deploy launcher exited before the deploy finished' });
        }
      }
      if (unexpected) this.onUnexpectedExit?.(code, signal);
    });
    this.helper = helper;
    return helper;
  }

  private onMessage(message: LauncherMessage): void {
    if (message.type === 'orphan') {
      this.logger.warn({ target: message.key, pid: message.pid, ended: message.ended }, 'stopped a deploy that a previous launcher left running');
      return;
    }
    if (message.type === 'live') {
      // Checked here too: this is what reaches the journal and GET /deployments.
      this.answerLive(message.id, { commit: commitIdOrNull(message.commit), release: releaseNameOrNull(message.release) });
      return;
    }
    const entry = this.pending.get(message.id);
    if (!entry) return;
    if (message.type === 'started') {
      entry.pid = message.pid;
      for (const listener of entry.startedListeners.splice(0)) listener(message.pid);
      return;
    }
    this.settle(message.id, { exitCode: message.exitCode, signal: message.signal, spawnError: message.spawnError });
  }

  private answerLive(id: number, live: LiveRelease): void {
    const resolve = this.liveQueries.get(id);
    this.liveQueries.delete(id);
    resolve?.(live);
  }

  private settle(id: number, result: Pick<DeployOutcome, 'exitCode' | 'signal' | 'spawnError'>): void {
    const entry = this.pending.get(id);
    if (!entry) return;
    this.pending.delete(id);
    entry.resolve(result);
  }
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // already gone, or not ours to signal (the launcher, running as root, does it)
  }
}
