/**
 * The feature API as a process of its own, for the infra tests that need it as the stack runs it (its
 * declared environment, its image's command): started with `node`, what it writes kept for failure
 * messages, ready once GET /healthz answers.
 */
import { spawn, type ChildProcess } from 'node:child_process';

/** How long the API may take to answer /healthz (migrations on a fresh database included). */
const START_TIMEOUT_MS = 150_000;

export interface ApiProcess {
  /** http://127.0.0.1:<port> */
  url: string;
  /** What the API wrote to standard output and standard error so far. */
  output(): string;
  /** SIGTERM, resolved once it has exited. */
  stop(): Promise<void>;
}

export interface ApiProcessOptions {
  /** The folder it runs in (the repository, or an image's file set). */
  cwd: string;
  /** Its whole environment: nothing of this process's is passed on. */
  env: NodeJS.ProcessEnv;
  /** The port its environment tells it to listen on (PORT). */
  port: number;
}

/** Runs `node <args>`; resolves once /healthz answers, fails (the process stopped) when it exits first or is not ready in time. */
export async function startApiProcess(args: string[], options: ApiProcessOptions): Promise<ApiProcess> {
  const child: ChildProcess = spawn(process.execPath, args, { cwd: options.cwd, env: options.env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const api: ApiProcess = {
    url: `http://127.0.0.1:${options.port}`,
    output: () => output,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    },
  };
  try {
    for (const deadline = Date.now() + START_TIMEOUT_MS; ; ) {
      if (child.exitCode !== null) throw new Error(`the API exited with ${child.exitCode}: ${output}`);
      if (await fetch(`${api.url}/healthz`).then((r) => r.ok, () => false)) return api;
      if (Date.now() > deadline) throw new Error(`the API did not start: ${output}`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  } catch (error) {
    await api.stop();
    throw error;
  }
}
