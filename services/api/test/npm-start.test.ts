import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';

/**
 * `npm start` as a user runs it (F10): the API and the webhook server in child processes, signals
 * passed on, graceful stops, also while starting.
 */
const repoRoot = join(import.meta.dirname, '../../..');
let db: TestDatabase;
let dir: string;

beforeAll(async () => {
  db = await createTestDatabase();
  dir = mkdtempSync(join(tmpdir(), 'npm-start-'));
});
afterAll(async () => {
  await db?.close();
  rmSync(dir, { recursive: true, force: true });
});

function npmStart(env: Record<string, string>): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const child = spawn('npm', ['start', '--silent'], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}

async function waitFor<T>(probe: () => T | undefined, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** The children's pids from start.ts's "services starting" line. */
const pidsIn = (output: string): Record<string, number> | undefined => {
  const line = output.split('\n').find((l) => l.includes('"msg":"services starting"'));
  return line ? (JSON.parse(line) as { pids: Record<string, number> }).pids : undefined;
};

describe('npm start', () => {
  it('passes SIGTERM sent to the npm process alone on to the API and the webhook server, which stop gracefully', async () => {
    const run = npmStart({
      DATABASE_URL: db.url,
      PORT: '0',
      DATA_DIR: join(dir, 'data-1'),
      WEBHOOK_PORT: '0',
      WEBHOOK_STATE_DIR: join(dir, 'webhook-state'),
      DEPLOY_ROOT: join(dir, 'sites'),
    });
    try {
      const apiUrl = await waitFor(() => /"api":"(http:\/\/localhost:\d+)\/api\/features"/.exec(run.output())?.[1], 90_000, 'platform ready');
      expect((await fetch(`${apiUrl}/healthz`)).status).toBe(200);
      expect(run.output()).toMatch(/SECRET_MAIN=[0-9a-f]{64}/);
      const pids = pidsIn(run.output())!;
      expect(Object.keys(pids).sort()).toEqual(['api', 'webhook']);

      run.child.kill('SIGTERM');
      await run.exited;
      await waitFor(() => (Object.values(pids).some(isAlive) ? undefined : true), 30_000, 'the services to exit');
      await expect(fetch(`${apiUrl}/healthz`)).rejects.toThrow();
      // Graceful: each service logged its own stop and exited 0.
      expect(run.output()).toMatch(/"service":"webhook","code":0,"msg":"service stopped"/);
      expect(run.output()).toMatch(/"service":"api","code":0,"msg":"service stopped"/);
    } finally {
      run.child.kill('SIGKILL');
    }
  }, 150_000);

  it('stops cleanly when the signal comes during start-up, releasing the embedded data folder', async () => {
    const dataDir = join(dir, 'data-2');
    const run = npmStart({ PORT: '0', DATA_DIR: dataDir, START_WEBHOOK: 'false' });
    try {
      const pids = await waitFor(() => pidsIn(run.output()), 60_000, 'the services to start');
      // The embedded database is being created: the lock file shows the API holds the folder.
      await waitFor(() => (existsSync(join(dataDir, 'pglite.pid')) ? true : undefined), 60_000, 'the data folder lock');
      expect(run.output()).not.toContain('platform ready');
      run.child.kill('SIGTERM');
      await run.exited;
      await waitFor(() => (isAlive(pids.api!) ? undefined : true), 150_000, 'the API to exit');
      expect(run.output(), run.output()).toMatch(/"service":"api","code":0,"msg":"service stopped"/);
      expect(existsSync(join(dataDir, 'pglite.pid'))).toBe(false);
    } finally {
      run.child.kill('SIGKILL');
    }
  }, 300_000);
});
