import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

const repoRoot = join(import.meta.dirname, '../..');

export interface NpmStart {
  child: ChildProcess;
  /** Everything it wrote so far, stdout and stderr together. */
  output: () => string;
  exited: Promise<number | null>;
  /** SIGKILL to npm and every service it started, for a test that ends half-way. */
  killAll: () => void;
}

/**
 * `npm start --silent` in this checkout as a user runs it, with `env` over PATH, HOME and
 * LOG_LEVEL=info. npm gets a process group of its own, so `killAll` reaches the services too: killing
 * npm alone once left a web server holding port 4321 for the next run.
 */
export function npmStart(env: Record<string, string>): NpmStart {
  const child = spawn('npm', ['start', '--silent'], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const killAll = (): void => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // the group has already gone
    }
  };
  return { child, output: () => output, exited, killAll };
}
