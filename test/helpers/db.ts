/**
 * A real PostGIS database for a test file, migrated and empty.
 *
 * - TEST_DATABASE_URL set (CI: a throwaway PostgreSQL 15 + PostGIS cluster, superuser): every test
 *   file gets its own database, created from a template that is migrated once per set of migration
 *   files (`fp_template_<hash>`, built under an advisory lock so parallel workers never race) and
 *   dropped when the file is done.
 * - Unset: embedded PGlite + PostGIS. One database process per vitest worker slot and test run
 *   (pglite-daemon.ts), reused by every file of that slot; each file starts from a clean state (all
 *   application schemas dropped and re-migrated).
 *
 *   const db = await createTestDatabase();   // in beforeAll
 *   await db.close();                        // in afterAll
 *   db.pool / db.url                         // for the app under test and direct SQL
 *   await db.reset({ migrate: false })       // an empty database, e.g. to test migrations
 *
 * Call it once per test file: in PGlite mode every call in the same worker returns the same database
 * (and resets it).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrate, readMigrations } from '../../services/api/src/db/migrate.js';

export interface TestDatabase {
  kind: 'postgres' | 'pglite';
  url: string;
  /** A pool for direct SQL in tests (kept small: PGlite serialises anyway). */
  pool: pg.Pool;
  /** Drop every application schema; re-apply the migrations unless migrate is false. */
  reset(options?: { migrate?: boolean }): Promise<void>;
  close(): Promise<void>;
}

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = join(here, '../..');

export async function createTestDatabase(options: { migrate?: boolean } = {}): Promise<TestDatabase> {
  const adminUrl = process.env.TEST_DATABASE_URL;
  const database = adminUrl ? await createPostgresDatabase(adminUrl) : await connectPGlite();
  try {
    if (database.kind === 'pglite' || options.migrate === false) await database.reset(options);
  } catch (error) {
    await database.close();
    throw error;
  }
  return database;
}

/** Every schema that is not PostgreSQL's or PostGIS's own belongs to the application. */
async function dropApplicationSchemas(pool: pg.Pool): Promise<void> {
  const { rows } = await pool.query<{ name: string }>(`
    SELECT nspname AS name FROM pg_namespace
    WHERE nspname NOT IN ('public', 'information_schema', 'tiger', 'tiger_data', 'topology')
      AND nspname NOT LIKE 'pg\\_%'`);
  if (rows.length === 0) return;
  await pool.query(`DROP SCHEMA ${rows.map((r) => pg.escapeIdentifier(r.name)).join(', ')} CASCADE`);
}

function makeDatabase(kind: TestDatabase['kind'], url: string, cleanup: () => Promise<void>): TestDatabase {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => undefined);
  return {
    kind,
    url,
    pool,
    async reset(options = {}) {
      await dropApplicationSchemas(pool);
      if (options.migrate !== false) await migrate(pool);
    },
    async close() {
      await pool.end();
      await cleanup();
    },
  };
}

// --- PostgreSQL: a database per file from a migrated template --------------------------------------

const TEMPLATE_LOCK_KEY = 7_346_120_916;

async function createPostgresDatabase(adminUrl: string): Promise<TestDatabase> {
  const migrationsHash = createHash('sha256')
    .update(readMigrations().map((m) => `${m.name}:${m.checksum}`).join('\n'))
    .digest('hex')
    .slice(0, 12);
  const template = `fp_template_${migrationsHash}`;
  const name = `fp_test_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query('SELECT pg_advisory_lock($1::bigint)', [TEMPLATE_LOCK_KEY]);
    const existing = await admin.query<{ datistemplate: boolean }>('SELECT datistemplate FROM pg_database WHERE datname = $1::text', [template]);
    if (!existing.rows[0]?.datistemplate) {
      // Absent, or left half-built by an interrupted run: build it from scratch.
      if (existing.rows[0]) await admin.query(`DROP DATABASE ${pg.escapeIdentifier(template)} WITH (FORCE)`);
      await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(template)}`);
      const templatePool = new pg.Pool({ connectionString: withDatabase(adminUrl, template), max: 1 });
      try {
        await migrate(templatePool);
      } finally {
        await templatePool.end();
      }
      await admin.query(`ALTER DATABASE ${pg.escapeIdentifier(template)} IS_TEMPLATE true`);
      // Templates of earlier migration sets are obsolete now.
      const stale = await admin.query<{ datname: string }>("SELECT datname FROM pg_database WHERE datname LIKE 'fp\\_template\\_%' AND datname <> $1::text", [template]);
      for (const { datname } of stale.rows) {
        await admin.query(`ALTER DATABASE ${pg.escapeIdentifier(datname)} IS_TEMPLATE false`).catch(() => undefined);
        await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(datname)}`).catch(() => undefined);
      }
    }
    await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)} TEMPLATE ${pg.escapeIdentifier(template)}`);
  } finally {
    await admin.query('SELECT pg_advisory_unlock($1::bigint)', [TEMPLATE_LOCK_KEY]).catch(() => undefined);
    await admin.end();
  }
  return makeDatabase('postgres', withDatabase(adminUrl, name), async () => {
    const cleaner = new pg.Client({ connectionString: adminUrl });
    await cleaner.connect();
    try {
      await cleaner.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
    } finally {
      await cleaner.end();
    }
  });
}

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

// --- PGlite: one database process per worker slot and run -----------------------------------------

async function connectPGlite(): Promise<TestDatabase> {
  // Forks of one vitest run share its main process as parent; the slot id is unique among the
  // forks running at the same time, so (parent, slot) names one database nobody else is using now.
  const slot = process.env.VITEST_POOL_ID ?? process.env.VITEST_WORKER_ID ?? '0';
  const registry = join(tmpdir(), `fp-test-pglite-${process.ppid}-${slot}.json`);
  const url = (await reuseDaemon(registry)) ?? (await spawnDaemon(registry));
  return makeDatabase('pglite', url, async () => undefined);
}

async function reuseDaemon(registry: string): Promise<string | undefined> {
  if (!existsSync(registry)) return undefined;
  try {
    const { url, pid } = JSON.parse(readFileSync(registry, 'utf8')) as { url: string; pid: number };
    process.kill(pid, 0);
    const probe = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
    await probe.connect();
    await probe.end();
    return url;
  } catch {
    rmSync(registry, { force: true });
    return undefined;
  }
}

function spawnDaemon(registry: string): Promise<string> {
  return new Promise((resolve, reject) => {
    // Not the fork's stderr: the daemon outlives this fork, and an inherited pipe would keep vitest
    // waiting for it to close. Its output goes to a log file beside the registry instead.
    const logFile = `${registry}.${Date.now()}.log`;
    const log = openSync(logFile, 'a');
    const child = spawn(process.execPath, ['--import', 'tsx', join(here, 'pglite-daemon.ts'), registry, String(process.ppid), logFile], {
      cwd: repoRoot,
      detached: true,
      stdio: ['ignore', 'pipe', log],
    });
    let output = '';
    closeSync(log);
    const fail = (error: Error) => reject(new Error(`${error.message} (log: ${logFile})`));
    child.once('error', fail);
    child.once('exit', (code) => fail(new Error(`the PGlite test database exited with ${code} before listening`)));
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
      const newline = output.indexOf('\n');
      if (newline < 0) return;
      child.removeAllListeners('exit');
      child.stdout!.destroy();
      child.unref();
      try {
        resolve((JSON.parse(output.slice(0, newline)) as { url: string }).url);
      } catch (error) {
        reject(error as Error);
      }
    });
  });
}
