import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import type { Logger } from 'pino';

/**
 * Numbered SQL migrations (services/api/migrations/NNN_name.sql), applied in order.
 *
 * - Each file runs in its own transaction together with the row recording it, so a failure leaves
 *   no half-applied file.
 * - Each transaction first takes a transaction-scoped advisory lock, then checks whether the file is
 *   already recorded: two processes migrating at once serialise, and the second finds nothing to do.
 *   Running migrate twice is a no-op.
 * - A recorded file whose content changed afterwards is an error: the database no longer matches
 *   the code, and silently skipping it would hide that.
 */
export const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), '../../migrations');

/** An arbitrary constant shared by every migrator of this schema (pg advisory locks take a bigint). */
const MIGRATION_LOCK_KEY = 7_346_120_915;
const MIGRATION_FILE = /^(\d{3,})_[a-z0-9_]+\.sql$/;

export interface Migration {
  name: string;
  sql: string;
  checksum: string;
}

export class MigrationError extends Error {
  override readonly name = 'MigrationError';
}

export function readMigrations(dir: string = MIGRATIONS_DIR): Migration[] {
  const files = readdirSync(dir).filter((f) => f.endsWith('.sql'));
  const bad = files.filter((f) => !MIGRATION_FILE.test(f));
  if (bad.length > 0) throw new MigrationError(`migration file names must look like 001_name.sql: ${bad.join(', ')}`);
  return files.sort().map((name) => {
    const sql = readFileSync(join(dir, name), 'utf8');
    return { name, sql, checksum: createHash('sha256').update(sql).digest('hex') };
  });
}

const BOOTSTRAP = `
  CREATE SCHEMA IF NOT EXISTS metadata;
  CREATE TABLE IF NOT EXISTS metadata.schema_migrations (
    name text PRIMARY KEY,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
  )`;

/** Apply every pending migration; returns the names applied by this call. */
export async function migrate(pool: pg.Pool, options: { dir?: string; logger?: Logger; signal?: AbortSignal } = {}): Promise<string[]> {
  const migrations = readMigrations(options.dir);
  const applied: string[] = [];
  const client = await pool.connect();
  try {
    // The common case at start-up, every file recorded unchanged, costs one query instead of five
    // per file; anything else (a pending or a changed file) takes the locked path below.
    if (await allRecorded(client, migrations)) return applied;
    for (const migration of migrations) {
      // A stop requested meanwhile ends the run between files, each of which is all or nothing.
      if (options.signal?.aborted) break;
      await client.query('BEGIN');
      try {
        await client.query('SELECT pg_advisory_xact_lock($1::bigint)', [MIGRATION_LOCK_KEY]);
        await client.query(BOOTSTRAP);
        const recorded = await client.query<{ checksum: string }>(
          'SELECT checksum FROM metadata.schema_migrations WHERE name = $1::text',
          [migration.name],
        );
        if (recorded.rows[0]) {
          if (recorded.rows[0].checksum !== migration.checksum) {
            throw new MigrationError(`migration ${migration.name} was changed after it was applied; add a new migration instead`);
          }
          await client.query('COMMIT');
          continue;
        }
        const started = performance.now();
        await client.query(migration.sql);
        await client.query('INSERT INTO metadata.schema_migrations (name, checksum) VALUES ($1::text, $2::text)', [migration.name, migration.checksum]);
        await client.query('COMMIT');
        applied.push(migration.name);
        options.logger?.info({ migration: migration.name, ms: Math.round(performance.now() - started) }, 'migration applied');
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        if (error instanceof MigrationError) throw error;
        throw new MigrationError(`migration ${migration.name} failed: ${(error as Error).message}`, { cause: error });
      }
    }
  } finally {
    client.release();
  }
  return applied;
}

async function allRecorded(client: pg.PoolClient, migrations: readonly Migration[]): Promise<boolean> {
  const table = await client.query<{ present: boolean }>("SELECT to_regclass('metadata.schema_migrations') IS NOT NULL AS present");
  if (!table.rows[0]?.present) return false;
  const { rows } = await client.query<{ name: string; checksum: string }>('SELECT name, checksum FROM metadata.schema_migrations');
  const recorded = new Map(rows.map((r) => [r.name, r.checksum]));
  return migrations.every((m) => recorded.get(m.name) === m.checksum);
}

/** Names of migrations not yet applied (all of them when the bookkeeping table does not exist). */
export async function pendingMigrations(db: Pick<pg.Pool, 'query'>, names: readonly string[] = readMigrations().map((m) => m.name)): Promise<string[]> {
  const table = await db.query<{ present: boolean }>("SELECT to_regclass('metadata.schema_migrations') IS NOT NULL AS present");
  if (!table.rows[0]?.present) return [...names];
  const { rows } = await db.query<{ name: string }>('SELECT name FROM metadata.schema_migrations');
  const done = new Set(rows.map((r) => r.name));
  return names.filter((n) => !done.has(n));
}
