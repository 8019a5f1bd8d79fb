/**
 * The server's side of the deploy launcher (launcher-process.mjs): a helper process, forked at
 * start while this process is still small, that starts every deploy script. Starting a process
 * from the server itself forks the server, and the page-table copy of a process holding many
 * large request bodies stalled every request in flight by 20–40 ms per deploy.
 *
 * If the helper dies, its unfinished deploys are stopped (SIGTERM to their process groups; the
 * deploy script then keeps or restores the previous release) and reported as failed to start or
 * stopped; the next deploy forks a new helper.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import type { DeployOutcome, LaunchedProcess, ProcessLauncher } from './runner.js';

const HELPER = fileURLToPath(new URL('./launcher-process.mjs', import.meta.url));

type LauncherMessage =
  | { type: 'started'; id: number; pid: number }
  | { type: 'exited'; id: number; exitCode: number | null; signal: NodeJS.Signals | null; spawnError: string | null };

interface Pending {
  pid: number | undefined;
  startedListeners: ((pid: number) => void)[];
  resolve: (result: Pick<DeployOutcome, 'exitCode' | 'signal' | 'spawnError'>) => void;
}

export class DeployLauncher implements ProcessLauncher {
  private helper: ChildProcess | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private closed = false;

  constructor(private readonly logger: Logger) {}

  /** Fork the helper now (cheap while the server is small) instead of at the first deploy. */
  start(): void {
    this.ensureHelper();
  }

  launch(invocation: Parameters<ProcessLauncher['launch']>[0]): LaunchedProcess {
    const id = this.nextId++;
    const entry: Pending = { pid: undefined, startedListeners: [], resolve: () => undefined };
    const exited = new Promise<Pick<DeployOutcome, 'exitCode' | 'signal' | 'spawnError'>>((resolve) => (entry.resolve = resolve));
    this.pending.set(id, entry);
    const helper = this.ensureHelper();
    const { script, args, env, logPath } = invocation;
    helper.send({ type: 'start', id, script, args, env, logPath }, (error) => {
      if (error) this.settle(id, { exitCode: null, signal: null, spawnError: `deploy launcher unreachable: ${error.message}` });
    });
    return {
      get pid() {
        return entry.pid;
      },
      onStarted(listener) {
        if (entry.pid !== undefined) listener(entry.pid);
        else entry.startedListeners.push(listener);
      },
      exited,
    };
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
    const helper = fork(HELPER, [], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'], serialization: 'json' });
    helper.on('message', (message: LauncherMessage) => this.onMessage(message));
    helper.once('exit', (code, signal) => {
      if (this.helper === helper) this.helper = null;
      if (this.pending.size === 0) return;
      if (!this.closed) this.logger.error({ code, signal, unfinished: this.pending.size }, 'deploy launcher exited; stopping its unfinished deploys');
      for (const [id, entry] of this.pending) {
        if (entry.pid !== undefined) {
          try {
            process.kill(-entry.pid, 'SIGTERM');
          } catch {
            // already gone
          }
        }
        this.settle(id, { exitCode: null, signal: null, spawnError: 'the deploy launcher exited before the deploy finished' });
      }
    });
    this.helper = helper;
    return helper;
  }

  private onMessage(message: LauncherMessage): void {
    const entry = this.pending.get(message.id);
    if (!entry) return;
    if (message.type === 'started') {
      entry.pid = message.pid;
      for (const listener of entry.startedListeners.splice(0)) listener(message.pid);
      return;
    }
    this.settle(message.id, { exitCode: message.exitCode, signal: message.signal, spawnError: message.spawnError });
  }

  private settle(id: number, result: Pick<DeployOutcome, 'exitCode' | 'signal' | 'spawnError'>): void {
    const entry = this.pending.get(id);
    if (!entry) return;
    this.pending.delete(id);
    entry.resolve(result);
  }
}
