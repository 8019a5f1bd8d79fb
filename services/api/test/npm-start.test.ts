import { eventually } from '../../../test/helpers/wait.js';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { npmStart } from '../../../test/helpers/npm-start.js';
import { API_NODE_FLAGS } from '../../shared/node-flags.js';

/**
 * `npm start` as a user runs it (F10): the API and the webhook server in child processes, signals
 * passed on, graceful stops, also while starting; a crashed service restarted with backoff.
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

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** A process's command line, as the kernel has it (/proc/<pid>/cmdline). */
const commandLine = (pid: number): string[] => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);

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
      const apiUrl = await eventually('platform ready', () => /"api":"(http:\/\/localhost:\d+)\/api\/features"/.exec(run.output())?.[1], 90_000);
      expect((await fetch(`${apiUrl}/healthz`)).status).toBe(200);
      expect(run.output()).toMatch(/SECRET_MAIN=[0-9a-f]{64}/);
      const pids = pidsIn(run.output())!;
      expect(Object.keys(pids).sort()).toEqual(['api', 'webhook']);
      // The API runs with the V8 flags the image's command gives it (services/shared/node-flags.ts).
      expect(commandLine(pids.api!)).toEqual(expect.arrayContaining([...API_NODE_FLAGS]));

      run.child.kill('SIGTERM');
      await run.exited;
      await eventually('the services to exit', () => (Object.values(pids).some(isAlive) ? undefined : true), 30_000);
      await expect(fetch(`${apiUrl}/healthz`)).rejects.toThrow();
      // Graceful: each service logged its own stop and exited 0.
      expect(run.output()).toMatch(/"service":"webhook","code":0,"msg":"service stopped"/);
      expect(run.output()).toMatch(/"service":"api","code":0,"msg":"service stopped"/);
    } finally {
      run.killAll();
    }
  }, 150_000);

  it('stops cleanly when the signal comes during start-up, releasing the embedded data folder', async () => {
    const dataDir = join(dir, 'data-2');
    const run = npmStart({ PORT: '0', DATA_DIR: dataDir, START_WEBHOOK: 'false' });
    try {
      const pids = await eventually('the services to start', () => pidsIn(run.output()), 60_000);
      // The embedded database is being created: the lock file shows the API holds the folder.
      await eventually('the data folder lock', () => (existsSync(join(dataDir, 'pglite.pid')) ? true : undefined), 60_000);
      expect(run.output()).not.toContain('platform ready');
      run.child.kill('SIGTERM');
      await run.exited;
      await eventually('the API to exit', () => (isAlive(pids.api!) ? undefined : true), 150_000);
      expect(run.output(), run.output()).toMatch(/"service":"api","code":0,"msg":"service stopped"/);
      expect(existsSync(join(dataDir, 'pglite.pid'))).toBe(false);
    } finally {
      run.killAll();
    }
  }, 300_000);

  describe('when a service crashes after the platform is ready', () => {
    /** The platform on the test database, without the web app (not what is tested here). */
    const start = (name: string, env: Record<string, string> = {}): ReturnType<typeof npmStart> =>
      npmStart({
        DATABASE_URL: db.url,
        PORT: '0',
        DATA_DIR: join(dir, `data-${name}`),
        START_WEB: 'false',
        WEBHOOK_PORT: '0',
        WEBHOOK_STATE_DIR: join(dir, `webhook-state-${name}`),
        DEPLOY_ROOT: join(dir, `sites-${name}`),
        ...env,
      });
    const apiUrlIn = (output: string): string | undefined => /"api":"(http:\/\/localhost:\d+)\/api\/features"/.exec(output)?.[1];
    /** The platform's lines about one service's crashes and restarts, parsed. */
    const crashes = (output: string): Array<{ code: number | null; signal: string | null; crashes: number; restartInMs: number }> =>
      output
        .split('\n')
        .filter((l) => l.includes('"msg":"service exited unexpectedly; restarting it"'))
        .map((l) => JSON.parse(l) as { code: number | null; signal: string | null; crashes: number; restartInMs: number });
    const restarts = (output: string): Array<{ pid: number; port?: number }> =>
      output
        .split('\n')
        .filter((l) => l.includes('"msg":"service restarted"'))
        .map((l) => JSON.parse(l) as { pid: number; port: number });
    const restarting = (output: string): Array<{ pid: number }> =>
      output
        .split('\n')
        .filter((l) => l.includes('"msg":"service restarting"'))
        .map((l) => JSON.parse(l) as { pid: number });

    it('restarts the killed API on the port it had while the webhook server keeps running, and still stops cleanly', async () => {
      const run = start('crash-1');
      try {
        const apiUrl = await eventually('platform ready', () => apiUrlIn(run.output()), 90_000);
        const pids = pidsIn(run.output())!;
        process.kill(pids.api!, 'SIGKILL');

        const [restarted] = await eventually('the API to be restarted', () => (restarts(run.output()).length ? restarts(run.output()) : undefined), 60_000);
        expect(run.child.exitCode, run.output()).toBeNull();
        expect(isAlive(pids.webhook!)).toBe(true);
        expect(crashes(run.output())).toEqual([expect.objectContaining({ code: null, signal: 'SIGKILL', crashes: 1, restartInMs: 1000 })]);
        expect(run.output()).toMatch(/"level":50,.*"service":"api","code":null,"signal":"SIGKILL".*"msg":"service exited unexpectedly; restarting it"/);
        expect(run.output()).toMatch(/"level":40,.*"service":"api","pid":\d+.*"msg":"service restarting"/);
        expect(restarted!.pid).not.toBe(pids.api);
        expect(commandLine(restarted!.pid)).toEqual(expect.arrayContaining([...API_NODE_FLAGS]));
        // Started with PORT=0, it comes back on the port it was given the first time.
        expect(`http://localhost:${restarted!.port}`).toBe(apiUrl);
        expect((await fetch(`${apiUrl}/healthz`)).status).toBe(200);

        run.child.kill('SIGTERM');
        expect(await run.exited, run.output()).toBe(0);
        await eventually('the services to exit', () => (isAlive(restarted!.pid) || isAlive(pids.webhook!) ? undefined : true), 30_000);
        expect(run.output()).toMatch(/"service":"webhook","code":0,"msg":"service stopped"/);
        expect(run.output()).toMatch(/"service":"api","code":0,"msg":"service stopped"/);
      } finally {
        run.killAll();
      }
    }, 150_000);

    it('waits twice as long before restarting after a second crash in a row as after the first', async () => {
      const run = start('crash-2');
      try {
        const apiUrl = await eventually('platform ready', () => apiUrlIn(run.output()), 90_000);
        process.kill(pidsIn(run.output())!.api!, 'SIGKILL');
        // The restarted API is killed again as soon as it is spawned, before it could heal.
        const [again] = await eventually('the first restart', () => (restarting(run.output()).length ? restarting(run.output()) : undefined), 60_000);
        process.kill(again!.pid, 'SIGKILL');

        await eventually('the second restart', () => (restarts(run.output()).length ? true : undefined), 60_000);
        expect(crashes(run.output()).map((c) => [c.crashes, c.restartInMs])).toEqual([
          [1, 1000],
          [2, 2000],
        ]);
        expect((await fetch(`${apiUrl}/healthz`)).status).toBe(200);
        run.child.kill('SIGTERM');
        expect(await run.exited, run.output()).toBe(0);
      } finally {
        run.killAll();
      }
    }, 150_000);

    it('does not restart a service that exits with a configuration error: it stops the others and exits 2', async () => {
      // The webhook server reads its targets file at every start: broken after the first, its restart
      // cannot succeed.
      const targetsFile = join(dir, 'targets-crash-3.yaml');
      copyFileSync(join(repoRoot, 'config/targets.yaml'), targetsFile);
      const run = start('crash-3', { TARGETS_FILE: targetsFile });
      try {
        await eventually('platform ready', () => apiUrlIn(run.output()), 90_000);
        const pids = pidsIn(run.output())!;
        writeFileSync(targetsFile, 'targets: []\n');
        process.kill(pids.webhook!, 'SIGKILL');

        expect(await run.exited, run.output()).toBe(2);
        expect(run.output()).toMatch(/"service":"webhook","code":2,"msg":"service exited with a configuration error; not restarting it, stopping the others"/);
        expect(restarting(run.output())).toHaveLength(1); // the one after the SIGKILL, which then failed
        expect(run.output()).toMatch(/"service":"api","code":0,"msg":"service stopped"/);
        await eventually('the API to exit', () => (isAlive(pids.api!) ? undefined : true), 30_000);
      } finally {
        run.killAll();
      }
    }, 150_000);
  });
});
