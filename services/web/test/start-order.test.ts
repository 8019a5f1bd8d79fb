import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { freePort } from '../../shared/testing/ports.js';
import { ensureWebBuild } from '../launch.js';

/**
 * `npm start` starts the web app only once the API is ready (listening, which it does after its
 * database is open and migrated): the map never answers before the API it reads from exists.
 */
const repoRoot = join(import.meta.dirname, '../../..');
let db: TestDatabase;
let dir: string;

beforeAll(async () => {
  ensureWebBuild();
  db = await createTestDatabase();
  dir = mkdtempSync(join(tmpdir(), 'start-order-'));
}, 600_000);
afterAll(async () => {
  await db?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('npm start', () => {
  it('starts the web server after the API listens, and the map answers', async () => {
    const [apiPort, webPort] = [await freePort(), await freePort()];
    const child = spawn('npm', ['start', '--silent'], {
      cwd: repoRoot,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, LOG_LEVEL: 'info', DATABASE_URL: db.url, DATA_DIR: dir, PORT: String(apiPort), WEB_PORT: String(webPort), START_WEBHOOK: 'false', WORKER_ENABLED: 'false' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      const deadline = Date.now() + 120_000;
      let status = 0;
      while (Date.now() < deadline && status !== 200) {
        status = await fetch(`http://127.0.0.1:${webPort}/`).then((r) => r.status, () => 0);
        if (status !== 200) await new Promise((r) => setTimeout(r, 250));
      }
      expect(status, output).toBe(200);
      const lines = output.split('\n');
      const apiListening = lines.findIndex((l) => l.includes('"msg":"api listening"'));
      const webListening = lines.findIndex((l) => /Server listening on http/.test(l));
      expect(apiListening, output).toBeGreaterThanOrEqual(0);
      expect(webListening, output).toBeGreaterThan(apiListening);
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  }, 300_000);
});
