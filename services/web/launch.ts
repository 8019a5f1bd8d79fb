/**
 * Starting the built web app as a child process: `npm start` (scripts/start.ts) and the browser tests
 * use it. The site is built first when dist/ is missing or older than its sources (about 40 s on two
 * cores; later starts reuse the build).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const webRoot = dirname(fileURLToPath(import.meta.url));
const repoRoot = join(webRoot, '../..');
/** The built site's standalone Node server. */
export const webEntry = join(webRoot, 'dist/server/entry.mjs');
const entry = webEntry;

/** The newest mtime under `path`, leaving out the names `skip` accepts (and all below them). */
function newestMtime(path: string, skip: (name: string) => boolean = () => false): number {
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  return Math.max(stat.mtimeMs, ...readdirSync(path).filter((name) => !skip(name)).map((name) => newestMtime(join(path, name), skip)));
}

/**
 * What of services/shared the site cannot import: its tests and the test doubles (testing/, which no
 * module under services/web/src nor any shared module it imports reaches). Editing a double does not
 * rebuild the site.
 */
const notForTheSite = (name: string): boolean => name === 'testing' || name === 'test' || name.endsWith('.test.ts');

/**
 * Whether `root`'s dist/ is a whole build of its current sources. The entry file is not proof of
 * a whole build: Astro writes dist/server/entry.mjs early and the manifest chunk it imports only
 * at the end, so a server started from a build in progress fails with ERR_MODULE_NOT_FOUND. What
 * counts is dist/.build-complete, written after a build succeeded.
 */
export function webBuildIsCurrent(root = webRoot, sharedDir = join(repoRoot, 'services/shared')): boolean {
  // One stat, not exists-then-stat: another process may remove the mark as it begins a build.
  const complete = statSync(join(root, 'dist/.build-complete'), { throwIfNoEntry: false });
  if (!complete || !existsSync(join(root, 'dist/server/entry.mjs'))) return false;
  const sources = Math.max(newestMtime(join(root, 'src')), newestMtime(join(root, 'public')), newestMtime(join(root, 'astro.config.mjs')), newestMtime(sharedDir, notForTheSite));
  return complete.mtimeMs > sources;
}

const buildComplete = join(webRoot, 'dist/.build-complete');

/** Builds the site unless dist/ is current; concurrent callers wait for one build (a lock directory). */
export function ensureWebBuild(log: (message: string) => void = () => undefined): void {
  if (webBuildIsCurrent()) return;
  const release = acquireBuildLock(join(webRoot, '.build-lock'), { log });
  try {
    if (webBuildIsCurrent()) return;
    log('building the web app (services/web) …');
    rmSync(buildComplete, { force: true });
    const result = spawnSync(process.execPath, [join(repoRoot, 'node_modules/astro/astro.js'), 'build'], { cwd: webRoot, encoding: 'utf8', env: { ...process.env, ASTRO_TELEMETRY_DISABLED: '1' } });
    if (result.status !== 0) throw new Error(`astro build failed:\n${result.stdout}\n${result.stderr}`);
    writeFileSync(buildComplete, `${new Date().toISOString()}\n`);
  } finally {
    release();
  }
}

/** A lock directory without its owner file is that old before it counts as left behind (the owner writes it right after mkdir). */
const OWNERLESS_GRACE_MS = 10_000;

/**
 * Takes the build lock `lock` (a directory, created atomically by mkdir) and returns its release. The
 * holder writes its pid and host into `lock/owner`; a lock whose holder is gone — on this host, no
 * process with that pid (a build interrupted by Ctrl-C, a killed `npm start`) — is taken over, with a
 * line in the log, instead of failing every later start. A live holder is waited for, up to
 * `timeoutMs`. A lock without an owner file (left by an older version) counts as left behind once it
 * is OWNERLESS_GRACE_MS old. The takeover renames the stale directory away first (rename is atomic:
 * of two processes taking over at once, one wins and the other waits for it).
 */
export function acquireBuildLock(lock: string, options: { timeoutMs?: number; log?: (message: string) => void } = {}): () => void {
  const timeoutMs = options.timeoutMs ?? 180_000;
  const owner = join(lock, 'owner');
  for (let waited = 0; ; waited += 500) {
    try {
      mkdirSync(lock);
      writeFileSync(owner, `${process.pid} ${hostname()}\n`);
      return () => rmSync(lock, { recursive: true, force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const holder = lockHolder(lock);
    if (holder.stale) {
      const aside = `${lock}.stale-${process.pid}-${Date.now()}`;
      try {
        renameSync(lock, aside);
        rmSync(aside, { recursive: true, force: true });
        options.log?.(`took over ${lock}: ${holder.why}`);
        continue;
      } catch {
        // Another process took it over first: wait for that one.
      }
    }
    if (waited > timeoutMs) throw new Error(`another build holds ${lock} (${holder.why}); waited ${Math.round(timeoutMs / 1000)} s`);
    spawnSync('sleep', ['0.5']);
  }
}

function lockHolder(lock: string): { stale: boolean; why: string } {
  let text: string;
  try {
    text = readFileSync(join(lock, 'owner'), 'utf8');
  } catch {
    const stat = statSync(lock, { throwIfNoEntry: false });
    if (!stat) return { stale: false, why: 'released meanwhile' };
    const age = Date.now() - stat.mtimeMs;
    return age > OWNERLESS_GRACE_MS ? { stale: true, why: `no owner recorded and ${Math.round(age / 1000)} s old` } : { stale: false, why: 'being created' };
  }
  const [pidText, host] = text.trim().split(/\s+/);
  const pid = Number(pidText);
  if (!Number.isInteger(pid) || pid <= 0) return { stale: true, why: 'its owner file is unreadable' };
  if (host !== undefined && host !== hostname()) return { stale: false, why: `held by process ${pid} on ${host}` };
  try {
    process.kill(pid, 0);
    return { stale: false, why: `held by running process ${pid}` };
  } catch (error) {
    // EPERM: the process exists but belongs to someone else.
    if ((error as NodeJS.ErrnoException).code === 'EPERM') return { stale: false, why: `held by running process ${pid}` };
    return { stale: true, why: `its process ${pid} is gone` };
  }
}

export interface WebServerProcess {
  url: string;
  child: ChildProcess;
  /** The last 20 000 characters the server printed (for error messages). */
  output(): string;
  close(): Promise<void>;
}

/** Spawns the site's standalone Node server and waits until it answers. `env` is its whole runtime configuration. */
export async function startWebServer(options: { port: number; host?: string; env: Record<string, string>; timeoutMs?: number }): Promise<WebServerProcess> {
  const host = options.host ?? '127.0.0.1';
  let output = '';
  const child = spawn(process.execPath, [entry], {
    cwd: webRoot,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...options.env, PORT: String(options.port), HOST: host },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const keep = (data: Buffer) => (output = (output + data.toString()).slice(-20_000));
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const url = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${options.port}`;
  const close = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  };
  const started = Date.now();
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the web server exited with ${child.exitCode}:\n${output}`);
    try {
      const response = await fetch(`${url}/login`);
      await response.body?.cancel();
      if (response.status < 500) break;
    } catch {
      // not listening yet
    }
    if (Date.now() - started > (options.timeoutMs ?? 30_000)) {
      await close();
      throw new Error(`the web server did not answer on ${url} within ${options.timeoutMs ?? 30_000} ms:\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
  return { url, child, output: () => output, close };
}
