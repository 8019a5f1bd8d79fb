/**
 * Helpers for the deploy tests: real git repositories served over file:// URLs holding the fixture
 * site, a runner for scripts/deploy-branch.sh, and cleanup of every fixture site a test started.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { git } from '../../../../test/helpers/git.js';
import { eventually } from '../../../../test/helpers/wait.js';

export { git, publishCommittedProject } from '../../../../test/helpers/git.js';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');
export const deployScript = join(repoRoot, 'scripts/deploy-branch.sh');
export const rollbackScript = join(repoRoot, 'scripts/host/rollback.sh');
export const restartFixtureSite = join(repoRoot, 'services/webhook/test/support/restart-fixture-site.sh');
export const recordDeployScript = join(repoRoot, 'services/webhook/test/support/record-deploy.sh');
const fixtureSite = join(repoRoot, 'test/fixtures/site');

export function makeTempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `${prefix}-`));
}

/** A working repository with the fixture site committed on main; `url` is its file:// clone URL. */
export class FixtureRepo {
  readonly url: string;

  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true });
    git(dir, 'init', '--quiet', '--initial-branch=main');
    for (const file of ['package.json', 'package-lock.json', 'build.mjs', 'server.mjs', 'VERSION', 'vendor/fixture-dep-1.0.0.tgz']) {
      mkdirSync(dirname(join(dir, file)), { recursive: true });
      cpSync(join(fixtureSite, file), join(dir, file));
    }
    git(dir, 'add', '-A');
    git(dir, 'commit', '--quiet', '-m', 'fixture site');
    this.url = `file://${dir}`;
  }

  /** Commit file changes (null deletes) on a branch (created from main when new); returns the commit. */
  commit(branch: string, files: Record<string, string | null>, message = 'change'): string {
    const branches = git(this.dir, 'branch', '--list', '--format=%(refname:short)').split('\n');
    git(this.dir, 'checkout', '--quiet', ...(branches.includes(branch) ? [branch] : ['-b', branch, 'main']));
    for (const [name, content] of Object.entries(files)) {
      const path = join(this.dir, name);
      if (content === null) rmSync(path, { force: true });
      else {
        mkdirSync(dirname(path), { recursive: true });
        writeFileSync(path, content);
      }
    }
    git(this.dir, 'add', '-A');
    git(this.dir, 'commit', '--quiet', '--allow-empty', '-m', message);
    return git(this.dir, 'rev-parse', 'HEAD');
  }

  head(branch: string): string {
    return git(this.dir, 'rev-parse', `refs/heads/${branch}`);
  }
}

export interface ScriptResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Start a script in its own process group (like the webhook server does) and collect its output. */
export function startScript(
  file: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): { child: ChildProcess; done: Promise<ScriptResult> } {
  const child = spawn(file, args, { env: { ...process.env, ...env }, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const done = new Promise<ScriptResult>((resolveDone) => {
    child.on('close', (code, signal) => resolveDone({ code, signal, stdout, stderr }));
  });
  return { child, done };
}

export function runScript(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<ScriptResult> {
  return startScript(file, args, env).done;
}

/** Environment for deploy-branch.sh in tests: the fixture restart command and a private npm cache. */
export function deployEnv(root: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    RESTART_COMMAND: restartFixtureSite,
    HEALTH_TIMEOUT_SECONDS: '10',
    npm_config_cache: join(root, 'npm-cache'),
    ...extra,
  };
}

/** The release names under deploys/, oldest first. */
export function releasesOf(deployDir: string): string[] {
  const dir = join(deployDir, 'deploys');
  return existsSync(dir) ? readdirSync(dir).sort() : [];
}

export function liveRelease(deployDir: string): string | null {
  try {
    return execFileSync('readlink', [join(deployDir, 'live')], { encoding: 'utf8' }).trim();
  } catch {
    return null;
  }
}

export async function fetchBuild(port: number): Promise<{ version: string; port: string; content: string[] }> {
  const response = await fetch(`http://127.0.0.1:${port}/build.json`);
  if (!response.ok) throw new Error(`site on ${port} answered ${response.status}`);
  return (await response.json()) as { version: string; port: string; content: string[] };
}

/** Kill every fixture site started under `root` (pid files written by restart-fixture-site.sh). */
export function stopFixtureSites(root: string): void {
  if (!existsSync(root)) return;
  const walk = (dir: string, depth: number): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isFile() && /^site-.*\.pid$/.test(entry.name)) {
        const pid = Number(readFileSync(path, 'utf8').trim());
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      } else if (entry.isDirectory() && !entry.isSymbolicLink() && depth < 3 && entry.name !== 'deploys') {
        walk(path, depth + 1);
      }
    }
  };
  walk(root, 0);
}

/** A free TCP port on loopback (bound and released; good enough for tests on one machine). */
export { freePort } from '../../../shared/testing/ports.js';

/**
 * The webhook tests' wait: test/helpers/wait.ts (vi.waitFor) with the arguments in this suite's order;
 * `check` is asked every 50 ms until it gives a value (not undefined, null or false).
 */
export function waitFor<T>(check: () => T | undefined | null | false | Promise<T | undefined | null | false>, timeoutMs = 10_000, what = 'condition'): Promise<T> {
  return eventually(what, check, timeoutMs);
}
