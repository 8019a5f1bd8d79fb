/**
 * Runs the deploy script for one deployment: no shell, exactly four arguments, its own process
 * group (so a time limit or shutdown stops npm and everything under it), stdout and stderr into
 * the deployment's log file.
 */
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

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

export function startDeploy(invocation: DeployInvocation): RunningDeploy {
  mkdirSync(dirname(invocation.logPath), { recursive: true });
  const logFd = openSync(invocation.logPath, 'a', 0o640);
  writeSync(logFd, `${new Date().toISOString()} ${invocation.script} ${JSON.stringify(invocation.args)}\n`);
  let child: ReturnType<typeof spawn>;
  try {
    child = spawn(invocation.script, [...invocation.args], {
      env: invocation.env,
      detached: true, // its own process group, killed as a whole
      stdio: ['ignore', logFd, logFd],
      shell: false,
    });
  } catch (error) {
    // Synchronous refusals (e.g. an argument Node cannot pass) are failed deploys, not crashes.
    writeSync(logFd, `could not start the deploy script: ${(error as Error).message}\n`);
    closeSync(logFd);
    const outcome: DeployOutcome = { exitCode: null, signal: null, stoppedBecause: null, spawnError: (error as Error).message };
    return { pid: undefined, outcome: Promise.resolve(outcome), stop: () => undefined };
  }
  closeSync(logFd);

  let stoppedBecause: DeployOutcome['stoppedBecause'] = null;
  let killTimer: NodeJS.Timeout | undefined;
  const signalGroup = (signal: NodeJS.Signals): void => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, signal);
    } catch {
      // the group is already gone
    }
  };
  const stop = (reason: 'timeout' | 'shutdown'): void => {
    if (stoppedBecause || child.exitCode !== null || child.signalCode !== null) return;
    stoppedBecause = reason;
    signalGroup('SIGTERM');
    killTimer = setTimeout(() => signalGroup('SIGKILL'), invocation.killGraceMs ?? 10_000);
  };
  const timeout = setTimeout(() => stop('timeout'), invocation.timeoutMs);

  const outcome = new Promise<DeployOutcome>((resolve) => {
    child.once('error', (error) => {
      clearTimeout(timeout);
      resolve({ exitCode: null, signal: null, stoppedBecause: null, spawnError: error.message });
    });
    child.once('exit', (exitCode, signal) => {
      clearTimeout(timeout);
      // The script is gone; make sure nothing it started outlives it.
      if (stoppedBecause) signalGroup('SIGKILL');
      if (killTimer) clearTimeout(killTimer);
      resolve({ exitCode, signal, stoppedBecause, spawnError: null });
    });
  });
  return { pid: child.pid, outcome, stop };
}
