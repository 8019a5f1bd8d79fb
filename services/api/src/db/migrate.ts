import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import type { Logger } from 'pino';
import { migrateSet, MigrationError, readMigrations as readMigrationSet, type Migration } from '../../../shared/db/migrate.js';

/**
 * Numbered SQL migrations (services/api/migrations/NNN_name.sql), applied in order by the runner
 * every package's schema shares (services/shared/db/migrate.ts: each file in its own transaction with
 * the row recording it, under a transaction-scoped advisory lock, so two processes migrating at once
 * serialise; running it twice is a no-op; a recorded file changed afterwards is an error). The API's
 * bookkeeping table is metadata.schema_migrations.
 */
export const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), '../../migrations');

/** An arbitrary constant shared by every migrator of this schema (pg advisory locks take a bigint). */
const MIGRATION_LOCK_KEY = 7_346_120_915;

export { MigrationError, type Migration };

export function readMigrations(dir: string = MIGRATIONS_DIR): Migration[] {
  return readMigrationSet(dir);
}

/** Apply every pending migration; returns the names applied by this call. */
export function migrate(pool: pg.Pool, options: { dir?: string; logger?: Logger; signal?: AbortSignal } = {}): Promise<string[]> {
  return migrateSet(pool, { dir: options.dir ?? MIGRATIONS_DIR, schema: 'metadata', lockKey: MIGRATION_LOCK_KEY }, options);
}

/** Names of migrations not yet applied (all of them when the bookkeeping table does not exist). */
export async function pendingMigrations(db: Pick<pg.Pool, 'query'>, names: readonly string[] = readMigrations().map((m) => m.name)): Promise<string[]> {
  const table = await db.query<{ present: boolean }>("SELECT to_regclass('metadata.schema_migrations') IS NOT NULL AS present");
  if (!table.rows[0]?.present) return [...names];
  const { rows } = await db.query<{ name: string }>('SELECT name FROM metadata.schema_migrations');
  const done = new Set(rows.map((r) => r.name));
  return names.filter((n) => !done.has(n));
}
