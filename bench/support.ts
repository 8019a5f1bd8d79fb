/**
 * What the benchmarks share: a scratch database and the API as its own process, configured by
 * environment variables exactly as in production.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startEmbeddedDatabase } from '../services/api/src/db/embedded.js';
import { API_SESSION_SETTINGS, createPool } from '../services/api/src/db/pool.js';

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

/** `services/api/src/server.ts` as a child process on a free port; resolves once it listens. */
export async function startApiProcess(env: Record<string, string>): Promise<ApiProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/api/src/server.ts'], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? '', PORT: '0', LOG_LEVEL: 'info', RATE_LIMIT_WRITES_PER_MINUTE: '0', ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<string>((resolve, reject) => {
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const match = /"port":(\d+),"database"/.exec(output);
      if (match) resolve(match[1]!);
    });
    child.once('exit', (code) => reject(new Error(`the API exited with ${code}`)));
  });
  child.stdout!.resume();
  return {
    base: `http://127.0.0.1:${port}`,
    child,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}
