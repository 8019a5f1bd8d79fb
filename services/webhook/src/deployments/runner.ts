/**
 * Runs the deploy script for one deployment: no shell, exactly four arguments, its own process
 * group (so a time limit or shutdown stops npm and everything under it), stdout and stderr into
 * the deployment's log file. The process itself is started by a ProcessLauncher (launcher.ts);
 * supervision (time limit, stop, killing the group) happens here.
 */

export interface DeployInvocation {
  script: string;
  /** branch, deploy directory, port, repository URL — in that order. */
  args: readonly [branch: string, deployDir: string, port: string, repoUrl: string];
  env: NodeJS.ProcessEnv;
  logPath: string;
  timeoutMs: number;
  /** Time between SIGTERM and SIGKILL when the run is stopped. */
  killGraceMs?: number;
}

export interface DeployOutcome {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** Why the run was stopped early, if it was. */
  stoppedBecause: 'timeout' | 'shutdown' | null;
  /** Could not even start (script missing, not executable). */
  spawnError: string | null;
}

export interface RunningDeploy {
  pid: number | undefined;
  outcome: Promise<DeployOutcome>;
  /** Stop the whole process group: SIGTERM, then SIGKILL after the grace time. */
  stop(reason: 'timeout' | 'shutdown'): void;
}

/** What a started deploy process reports: its pid once known, then how it ended. */
export interface LaunchedProcess {
  readonly pid: number | undefined;
  /** Called once with the pid when the process runs (never, when it could not start). */
  onStarted(listener: (pid: number) => void): void;
  exited: Promise<Pick<DeployOutcome, 'exitCode' | 'signal' | 'spawnError'>>;
}

/** Starts a deploy process (in the launcher helper process, see launcher.ts). */
export interface ProcessLauncher {
  launch(invocation: Pick<DeployInvocation, 'script' | 'args' | 'env' | 'logPath'>): LaunchedProcess;
}

/** Start a deploy and supervise it: time limit, stop on request, the whole process group. */
export function startDeploy(invocation: DeployInvocation, launcher: ProcessLauncher): RunningDeploy {
  const launched = launcher.launch(invocation);
  let stoppedBecause: DeployOutcome['stoppedBecause'] = null;
  let finished = false;
  let killTimer: NodeJS.Timeout | undefined;
  const signalGroup = (signal: NodeJS.Signals): void => {
    if (launched.pid === undefined) return;
    try {
      process.kill(-launched.pid, signal);
    } catch {
      // the group is already gone
    }
  };
  const stop = (reason: 'timeout' | 'shutdown'): void => {
    if (stoppedBecause || finished) return;
    stoppedBecause = reason;
    // A stop requested before the pid is known is carried out as soon as it is.
    if (launched.pid === undefined) launched.onStarted(() => signalGroup('SIGTERM'));
    else signalGroup('SIGTERM');
    killTimer = setTimeout(() => signalGroup('SIGKILL'), invocation.killGraceMs ?? 10_000);
  };
  const timeout = setTimeout(() => stop('timeout'), invocation.timeoutMs);

  const outcome = launched.exited.then((result) => {
    finished = true;
    clearTimeout(timeout);
    // The script is gone; make sure nothing it started outlives it.
    if (stoppedBecause) signalGroup('SIGKILL');
    if (killTimer) clearTimeout(killTimer);
    return { ...result, stoppedBecause: result.spawnError ? null : stoppedBecause };
  });
  return {
    get pid() {
      return launched.pid;
    },
    outcome,
    stop,
  };
}
