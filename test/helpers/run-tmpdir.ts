/**
 * One temporary folder per test run (vitest's globalSetup): every `mkdtemp(tmpdir())` of the test
 * files, and of the servers and scripts they start, lands in it through TMPDIR, and it is removed
 * when the run ends, whatever the files left behind (a failed test, a killed server, a folder a test
 * forgot). Before, a run left about 90 folders in /tmp. Mode 1777 with the sticky bit, as /tmp
 * itself: tests that build or serve as other users (runuser, DEPLOY_ISOLATION=users) reach their
 * folders as before.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export default function setup(): () => void {
  // Each of vitest.config.ts' two projects runs the global setup: the first one makes the folder.
  if (process.env.FP_TEST_RUN_TMPDIR !== undefined) return () => undefined;
  const dir = mkdtempSync(join(tmpdir(), 'fp-tests-'));
  chmodSync(dir, 0o1777);
  const previous = process.env.TMPDIR;
  process.env.TMPDIR = dir;
  process.env.FP_TEST_RUN_TMPDIR = dir;
  return () => {
    if (previous === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = previous;
    delete process.env.FP_TEST_RUN_TMPDIR;
    rmSync(dir, { recursive: true, force: true });
  };
}
