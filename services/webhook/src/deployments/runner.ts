/**
 * Runs the deploy script for one deployment: its own process group (so a time limit or shutdown
 * stops npm and everything under it), stdout and stderr into the deployment's log file. The
 * process itself is started by a ProcessLauncher (launcher.ts) from the launcher plan (what runs is
 * fixed by invocation.ts); supervision (time limit, stop) happens here. Whenever the script ends,
 * the launcher ends its whole process group, so no build outlives its deploy.
 */

export interface StartRequest {
  /** The target key; the launcher looks up script, fixed arguments and environment by it. */
  key: string;
  branch: string;
  commit: string;
  logPath: string;
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
  /** Signal the deploy's whole process group. */
  signal(signal: 'SIGTERM' | 'SIGKILL'): void;
  exited: Promise<Pick<DeployOutcome, 'exitCode' | 'signal' | 'spawnError'>>;
}

/** Starts a deploy process (in the launcher helper process, see launcher.ts). */
export interface ProcessLauncher {
  launch(request: StartRequest): LaunchedProcess;
}

export interface Supervision {
  timeoutMs: number;
  /** Time between SIGTERM and SIGKILL when the run is stopped. */
  killGraceMs?: number;
}

/** Start a deploy and supervise it: time limit, stop on request, the whole process group. */
export function startDeploy(request: StartRequest, supervision: Supervision, launcher: ProcessLauncher): RunningDeploy {
  const launched = launcher.launch(request);
  let stoppedBecause: DeployOutcome['stoppedBecause'] = null;
  let finished = false;
  let killTimer: NodeJS.Timeout | undefined;
  const stop = (reason: 'timeout' | 'shutdown'): void => {
    if (stoppedBecause || finished) return;
    stoppedBecause = reason;
    // A stop requested before the pid is known is carried out as soon as it is.
    if (launched.pid === undefined) launched.onStarted(() => launched.signal('SIGTERM'));
    else launched.signal('SIGTERM');
    killTimer = setTimeout(() => launched.signal('SIGKILL'), supervision.killGraceMs ?? 10_000);
  };
  const timeout = setTimeout(() => stop('timeout'), supervision.timeoutMs);

  const outcome = launched.exited.then((result) => {
    finished = true;
    clearTimeout(timeout);
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
