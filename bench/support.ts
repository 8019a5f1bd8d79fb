/**
 * What the benchmarks share: a scratch database and the API as its own process, configured by
 * environment variables exactly as in production.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import pg from 'pg';
import { startEmbeddedDatabase } from '../services/api/src/db/embedded.js';
import { API_SESSION_SETTINGS, createPool } from '../services/api/src/db/pool.js';
import { API_NODE_FLAGS } from '../services/shared/node-flags.js';

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..');

export interface BenchDatabase {
  url: string;
  /** What the figures were measured on, for the printed report. */
  kind: string;
  close(): Promise<void>;
}

/**
 * BENCH_DATABASE_URL (or TEST_DATABASE_URL): a fresh database `fp_bench_<label>_<pid>` on that
 * server, dropped on close. Neither set: an in-memory PGlite.
 */
export async function openBenchDatabase(label: string): Promise<BenchDatabase> {
  const adminUrl = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
  if (!adminUrl) {
    const embedded = await startEmbeddedDatabase();
    return { url: embedded.url, kind: 'PGlite (embedded, in memory)', close: () => embedded.close() };
  }
  const name = `fp_bench_${label}_${process.pid}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
  const version = (await admin.query<{ server_version: string }>('SHOW server_version')).rows[0]!.server_version;
  await admin.end();
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    kind: `PostgreSQL ${version}`,
    async close() {
      const cleaner = new pg.Client({ connectionString: adminUrl });
      await cleaner.connect();
      await cleaner.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
      await cleaner.end();
    },
  };
}

/**
 * A pool for a benchmark's raw-SQL baseline, with the session settings the API's own connections
 * have on a PostgreSQL server (db/pool.ts API_SESSION_SETTINGS: work_mem 16MB, jit off), so a
 * baseline query runs as the API's statement does. With PostgreSQL's default 4 MB, the sort inside
 * a dense tile's ST_AsMVT (25 000 features, about 6 MB) spills to disk, and the baseline was 10 %
 * slower for that alone. The embedded PGlite gets no settings, as the API gives it none.
 */
export function baselinePool(database: BenchDatabase, max = 2): pg.Pool {
  return createPool(database.url, { max, ...(database.kind.startsWith('PostgreSQL') ? { settings: API_SESSION_SETTINGS } : {}) });
}

export interface ApiProcess {
  base: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

export interface ServerProcessOptions {
  /** Node's arguments: flags, then the entry file (or `-e` and source). */
  args: string[];
  cwd: string;
  env: Record<string, string>;
  /** Matches the process's stdout once it listens; its first group is the port. */
  listening: RegExp;
}

/**
 * A server as a child process of its own (so its CPU time and memory are its own, readable from
 * /proc): resolves once a line on its stdout names the port. The environment is `env` and PATH only.
 */
export async function startServerProcess(options: ServerProcessOptions): Promise<ApiProcess> {
  const child = spawn(process.execPath, options.args, {
    cwd: options.cwd,
    env: { PATH: process.env.PATH ?? '', ...options.env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<string>((resolve, reject) => {
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const match = options.listening.exec(output);
      if (match) resolve(match[1]!);
    });
    child.once('exit', (code) => reject(new Error(`${options.args.join(' ').slice(0, 80)} exited with ${code}`)));
  });
  child.stdout!.resume();
  return {
    base: `http://127.0.0.1:${port}`,
    child,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

/** Idle memory is read this long after a fresh process's one GET (framework and node-flags benchmarks)… */
export const RSS_SETTLE_MS = 2_000;
/** …and again once this long has passed since it, when V8's memory reducer has had its turn. */
export const RSS_IDLE_MS = 30_000;

export interface Load {
  path: string;
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  body?: string;
}

export interface Sample {
  perSecond: number;
  /** The server process's CPU time (user + system, every thread) per answered request, µs. */
  cpuMicros: number;
}

/**
 * `seconds` of autocannon (keep-alive, no gzip asked for) against one server process, and that
 * process's CPU time over the same span from /proc. Any non-2xx answer or error throws: a benchmark
 * of failures measures nothing.
 */
export async function loadServer(server: ApiProcess, load: Load, { seconds, connections }: { seconds: number; connections: number }): Promise<Sample> {
  const pid = server.child.pid!;
  const cpuBefore = processCpuMicros(pid);
  const result = await autocannon({
    url: `${server.base}${load.path}`,
    method: load.method ?? 'GET',
    ...(load.headers ? { headers: load.headers } : {}),
    ...(load.body ? { body: load.body } : {}),
    connections,
    duration: seconds,
  });
  const cpu = processCpuMicros(pid) - cpuBefore;
  if (result.non2xx > 0 || result.errors > 0 || result.requests.total === 0) {
    throw new Error(`${load.method ?? 'GET'} ${server.base}${load.path}: ${result.non2xx} non-2xx answers, ${result.errors} errors, ${result.requests.total} requests`);
  }
  return { perSecond: result.requests.total / result.duration, cpuMicros: cpu / result.requests.total };
}

/** The line services/api/src/boot.ts logs once the API listens (before and after the Fastify move). */
const API_LISTENING = /"port":(\d+),"database"/;

/** The environment every benchmark's API process starts from; `env` adds to it and wins. */
const apiEnv = (env: Record<string, string>): Record<string, string> => ({ PORT: '0', LOG_LEVEL: 'info', RATE_LIMIT_WRITES_PER_MINUTE: '0', ...env });

/** `services/api/src/server.ts` as a child process on a free port; resolves once it listens. */
export function startApiProcess(env: Record<string, string>): Promise<ApiProcess> {
  return startServerProcess({ args: [...API_NODE_FLAGS, '--import', 'tsx', 'services/api/src/server.ts'], cwd: repoRoot, env: apiEnv(env), listening: API_LISTENING });
}

/**
 * The API as its image runs it (infra/docker/api.Dockerfile): plain `node` with the API's V8 flags
 * (services/shared/node-flags.ts) on the JavaScript that `buildApi` compiled, no TypeScript loader in
 * the process. `nodeArgs` go before the entry (--cpu-prof); `v8Flags` replaces the API's flags (to
 * measure what they do: bench/node-flags.bench.ts).
 */
export function startBuiltApiProcess(
  build: BuiltApi,
  env: Record<string, string>,
  nodeArgs: string[] = [],
  { v8Flags = API_NODE_FLAGS }: { v8Flags?: readonly string[] } = {},
): Promise<ApiProcess> {
  return startServerProcess({ args: [...v8Flags, ...nodeArgs, 'services/api/src/server.js'], cwd: build.dir, env: apiEnv(env), listening: API_LISTENING });
}

export interface BuiltApi {
  /** The folder standing for the image's /app: the compiled tree, package.json, node_modules. */
  dir: string;
  remove(): void;
}

/**
 * The API's source tree under `sourceRoot` compiled as the image's build stage compiles it
 * (infra/docker/build.ts: services/shared, services/api and config, types stripped file by file),
 * into a temporary folder with the checkout's package.json and a link to this checkout's
 * node_modules. Why compiled: under tsx the process also holds the loader (its hooks thread, the
 * transformed sources), which the image does not, and which would count in the API's memory.
 */
export async function buildApi(sourceRoot: string, label: string): Promise<BuiltApi> {
  // Loaded here, not at the top: the other benchmarks need no esbuild.
  const { buildTree } = await import('../infra/docker/build.js');
  const dir = mkdtempSync(join(tmpdir(), `bench-${label}-`));
  await buildTree(sourceRoot, ['services/shared', 'services/api', 'config'], dir);
  copyFileSync(join(sourceRoot, 'package.json'), join(dir, 'package.json'));
  symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'), 'dir');
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface Worktree {
  dir: string;
  commit: string;
  remove(): void;
}

/**
 * A `git worktree` of this repository at `commit` (detached, in a temporary folder) with this
 * checkout's node_modules linked in, for benchmarks that run an earlier version beside the current
 * one on the same machine at the same time. `remove()` deletes it and its entry in .git/worktrees.
 * The linked node_modules must hold what that commit imports (true while package.json only grew).
 */
export function addWorktree(commit: string): Worktree {
  const dir = join(mkdtempSync(join(tmpdir(), 'bench-worktree-')), 'tree');
  const git = (...args: string[]) => {
    const run = spawnSync('git', args, { cwd: repoRoot, encoding: 'utf8' });
    if (run.status !== 0) throw new Error(`git ${args.join(' ')}: ${run.stderr.trim()}`);
    return run.stdout.trim();
  };
  try {
    git('worktree', 'add', '--detach', dir, commit);
  } catch (error) {
    rmSync(dirname(dir), { recursive: true, force: true });
    throw error;
  }
  symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'), 'dir');
  return {
    dir,
    commit: git('-C', dir, 'rev-parse', '--short', 'HEAD'),
    remove() {
      if (existsSync(dir)) git('worktree', 'remove', '--force', dir);
      rmSync(dirname(dir), { recursive: true, force: true });
      git('worktree', 'prune');
    },
  };
}

/** CPU time (user + system, all threads) a process has used so far, in µs (Linux: /proc/<pid>/stat). */
export function processCpuMicros(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The fields after the command name in parentheses (which may hold spaces): state is the first,
  // utime the 12th and stime the 13th (proc(5) fields 14 and 15), in clock ticks.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / CLOCK_TICKS;
}

const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** A process's resident set size now, in MiB (Linux: VmRSS). */
export function residentMiB(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) / 1024 : Number.NaN;
}
