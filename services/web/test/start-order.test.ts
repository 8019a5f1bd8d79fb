import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { npmStart } from '../../../test/helpers/npm-start.js';
import { eventually } from '../../../test/helpers/wait.js';
import { freePort } from '../../shared/testing/ports.js';
import { ensureWebBuild } from '../launch.js';

/**
 * `npm start` starts the web app only once the API is ready (listening, which it does after its
 * database is open and migrated): the map never answers before the API it reads from exists.
 */
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
    const run = npmStart({ DATABASE_URL: db.url, DATA_DIR: dir, PORT: String(apiPort), WEB_PORT: String(webPort), START_WEBHOOK: 'false', WORKER_ENABLED: 'false' });
    try {
      const mapAnswers = () => fetch(`http://127.0.0.1:${webPort}/`).then((r) => r.status === 200, () => false);
      const answered = await eventually('the map to answer', mapAnswers, 120_000, 250).catch(() => false);
      expect(answered, run.output()).toBe(true);
      const output = run.output();
      const lines = output.split('\n');
      const apiListening = lines.findIndex((l) => l.includes('"msg":"api listening"'));
      const webListening = lines.findIndex((l) => /Server listening on http/.test(l));
      expect(apiListening, output).toBeGreaterThanOrEqual(0);
      expect(webListening, output).toBeGreaterThan(apiListening);
    } finally {
      run.child.kill('SIGTERM');
      await run.exited;
      run.killAll();
    }
  }, 300_000);
});
