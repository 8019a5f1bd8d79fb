import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { lacks, requirements } from '../../../test/helpers/requirements.js';

/**
 * The stand-alone QC worker's health check (`worker-main --health`, the qc-worker container's), as
 * real processes on a real database: healthy only while a worker of this host beats its heartbeat.
 */
const REPO = join(import.meta.dirname, '../../..');
const missing = lacks('the QC worker health check tests', requirements.postgres('the stand-alone worker needs PostgreSQL'));

let db: TestDatabase;
beforeAll(async () => {
  if (!missing) db = await createTestDatabase();
}, 120_000);
afterAll(async () => {
  await db?.close();
});

function worker(args: string[], env: Record<string, string>) {
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/api/src/qc/worker-main.ts', ...args], {
    cwd: REPO,
    env: { PATH: process.env.PATH ?? '', NODE_ENV: 'production', DATABASE_URL: db.url, LOG_LEVEL: 'silent', WORKER_HEARTBEAT_MS: '500', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<{ code: number | null; output: string }>((resolve) => child.once('exit', (code) => resolve({ code, output })));
  return { child, exited };
}

describe.skipIf(missing)('the QC worker\'s health check', () => {
  it('is unhealthy (exit 1) with no worker running, healthy (exit 0) while one beats, and unhealthy again three beats after it stopped', async () => {
    await db.pool.query('DELETE FROM qc.worker_processes');
    expect((await worker(['--health'], {}).exited).code).toBe(1);

    const running = worker([], {});
    await expect.poll(async () => (await worker(['--health'], {}).exited).code, { timeout: 30_000, interval: 500 }).toBe(0);

    running.child.kill('SIGKILL'); // no clean unregistering: only the heartbeat's age tells
    await running.exited;
    await expect.poll(async () => (await worker(['--health'], {}).exited).code, { timeout: 30_000, interval: 500 }).toBe(1);
  }, 90_000);
});
