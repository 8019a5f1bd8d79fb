/**
 * Real git for the tests: a committer of its own (no system config), and this repository as committed
 * published to a bare repository. Shared by the webhook's deploy tests, the site's deploy test
 * (services/web/test/deploy.test.ts) and the benchmarks.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

const gitEnv = {
  ...process.env,
  GIT_AUTHOR_NAME: 'Test',
  GIT_AUTHOR_EMAIL: 'test@example.org',
  GIT_COMMITTER_NAME: 'Test',
  GIT_COMMITTER_EMAIL: 'test@example.org',
  GIT_CONFIG_NOSYSTEM: '1',
};

export function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, env: gitEnv, encoding: 'utf8' }).trim();
}

/**
 * This repository as committed on the current branch (`git archive HEAD`), as a fresh repository in
 * `work` (created here) with one branch `main`, pushed to a new bare repository `bare` (an absolute
 * path): what the site's deploy test and benchmark deploy from.
 */
export function publishCommittedProject(work: string, bare: string): void {
  mkdirSync(work);
  execFileSync('sh', ['-c', `git -C "${repoRoot}" archive HEAD | tar -x -C "${work}"`]);
  git(work, 'init', '-q', '-b', 'main');
  git(work, 'add', '-A');
  git(work, 'commit', '-qm', 'the site');
  git(work, 'init', '-q', '--bare', bare);
  git(work, 'push', '-q', bare, 'main');
}

