/**
 * The replica rehearsal's processes: each service started as the npm script starts it (`node --import
 * tsx <entry>`, without npm and tsx's own wrapper processes in between), in a process group of its own,
 * and under `setpriv --pdeathsig KILL` where util-linux has it, so that nothing outlives the test even
 * when the test process itself is killed before its afterAll runs.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** The entry points of package.json's scripts (`npm run api`, `npm run worker`, `npm run webhook`). */
export const ENTRY = {
  api: 'services/api/src/server.ts',
  worker: 'services/api/src/qc/worker-main.ts',
  webhook: 'services/webhook/src/server.ts',
} as const;

export interface ServiceProcess {
  name: string;
  pid: number;
  /** The port it listens on (from its "listening" log line), 0 for a process that serves nothing. */
  port: number;
  /** Its recent output, stdout and stderr (the last 5 000 lines). */
  log: string[];
  /** SIGTERM to its process group, SIGKILL after `graceMs`; resolves once it has exited. */
  stop(graceMs?: number): Promise<void>;
}

const LOG_LINES = 5_000;

let pdeathsig: boolean | undefined;
/** Whether util-linux's setpriv here knows --pdeathsig (2.33 and later). */
function hasPdeathsig(): boolean {
  pdeathsig ??= spawnSync('setpriv', ['--pdeathsig', 'KILL', '--', 'true']).status === 0;
  return pdeathsig;
}

function groupAlive(child: ChildProcess): boolean {
  try {
    process.kill(-child.pid!, 0);
    return true;
  } catch {
    return false;
  }
}

function endGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-child.pid!, signal);
  } catch {
    // the group is gone already
  }
}

/** `node --import tsx <entry>` (a service of this repository), as startProcess starts it. */
export function startService(name: string, entry: string, env: Record<string, string>, ready: RegExp, timeoutMs?: number): Promise<ServiceProcess> {
  return startProcess(name, [process.execPath, '--import', 'tsx', entry], env, ready, timeoutMs);
}

/**
 * Starts `argv` in the repository with exactly `env` (plus PATH) and resolves once a line of its
 * output matches `ready` (its first group, when there is one, is the port). Rejects when it exits or
 * does not get ready within `timeoutMs`, with the end of its output.
 */
export async function startProcess(name: string, argv: string[], env: Record<string, string>, ready: RegExp, timeoutMs = 90_000): Promise<ServiceProcess> {
  const command = hasPdeathsig() ? ['setpriv', '--pdeathsig', 'KILL', '--', ...argv] : argv;
  const child = spawn(command[0]!, command.slice(1), {
    cwd: REPO,
    env: { PATH: process.env.PATH ?? '', ...env },
    // A group of its own: stopping ends whatever it started too.
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const log: string[] = [];
  let matched: RegExpExecArray | null = null;
  let onReady: (() => void) | undefined;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  for (const stream of [child.stdout!, child.stderr!]) {
    let rest = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      const lines = (rest + chunk).split('\n');
      rest = lines.pop() ?? '';
      for (const line of lines) {
        log.push(line.slice(0, 4_000));
        if (log.length > LOG_LINES) log.shift();
        if (!matched) {
          matched = ready.exec(line);
          if (matched) onReady?.();
        }
      }
    });
  }
  const stop = async (graceMs = 5_000) => {
    if (child.exitCode === null && child.signalCode === null) {
      endGroup(child, 'SIGTERM');
      const killer = setTimeout(() => endGroup(child, 'SIGKILL'), graceMs);
      await exited;
      clearTimeout(killer);
    }
    // Anything it left in its group, until the group is gone: a killed process lingers until it is
    // reaped, and a stop that returned before that let the check after it see the group (failed once).
    endGroup(child, 'SIGKILL');
    for (let i = 0; i < 100 && groupAlive(child); i++) await delay(50);
  };
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${name} not ready within ${timeoutMs / 1000} s`)), timeoutMs);
      onReady = () => {
        clearTimeout(timer);
        resolve();
      };
      if (matched) onReady();
      void exited.then(() => {
        clearTimeout(timer);
        reject(new Error(`${name} exited with ${child.exitCode ?? child.signalCode} before it was ready`));
      });
    });
  } catch (error) {
    await stop(1_000);
    throw new Error(`${(error as Error).message}: ${log.slice(-6).join(' | ')}`);
  }
  const found = matched as RegExpExecArray | null;
  return { name, pid: child.pid!, port: found?.[1] ? Number(found[1]) : 0, log, stop };
}
