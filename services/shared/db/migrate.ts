/**
 * Numbered SQL migrations (`NNN_name.sql` in one folder), applied in order, for any package's own
 * schema (the webhook's `webhook` schema; the same rules as the API's runner, services/api/src/db/migrate.ts).
 *
 * - Each file runs in its own transaction together with the row recording it, so a failure leaves
 *   no half-applied file.
 * - Each transaction first takes a transaction-scoped advisory lock (the set's own key), then checks
 *   whether the file is already recorded: two processes migrating at once serialise, and the second
 *   finds nothing to do. Running migrate twice is a no-op. The lock is transaction-scoped, so this
 *   works through a pooler in transaction mode too.
 * - A recorded file whose content changed afterwards is an error: the database no longer matches
 *   the code, and silently skipping it would hide that.
 * - The bookkeeping table is `<schema>.schema_migrations`. The schema is created only when it does
 *   not exist: a role that owns an existing schema needs no CREATE right on the database.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type pg from 'pg';
import type { Logger } from 'pino';
import { withTransaction } from './transaction.js';

export interface MigrationSet {
  /** The folder of `NNN_name.sql` files. */
  dir: string;
  /** The schema the set owns; its bookkeeping table is `<schema>.schema_migrations`. A constant of the code. */
  schema: string;
  /** An advisory lock key of this set's own (pg advisory locks take a bigint). */
  lockKey: number;
}

export interface Migration {
  name: string;
  sql: string;
  checksum: string;
}

export class MigrationError extends Error {
  override readonly name = 'MigrationError';
}

const MIGRATION_FILE = /^(\d{3,})_[a-z0-9_]+\.sql$/;
/** A schema name the code chooses, written into the SQL as it is (never input). */
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export function readMigrations(dir: string): Migration[] {
  const files = readdirSync(dir).filter((f) => f.endsWith('.sql'));
  const bad = files.filter((f) => !MIGRATION_FILE.test(f));
  if (bad.length > 0) throw new MigrationError(`migration file names must look like 001_name.sql: ${bad.join(', ')}`);
  return files.sort().map((name) => {
    const sql = readFileSync(join(dir, name), 'utf8');
    return { name, sql, checksum: createHash('sha256').update(sql).digest('hex') };
  });
}

/** Apply every pending migration of `set`; returns the names applied by this call. */
export async function migrateSet(
  pool: pg.Pool,
  set: MigrationSet,
  options: { logger?: Logger; signal?: AbortSignal } = {},
): Promise<string[]> {
  if (!SCHEMA_NAME.test(set.schema)) throw new MigrationError(`not a schema name: ${set.schema}`);
  const migrations = readMigrations(set.dir);
  const table = `${set.schema}.schema_migrations`;
  // One round trip, in the first file's locked transaction: the schema only when missing, then the ledger.
  let bootstrapped = false;
  const bootstrap = `
    DO $$ BEGIN IF to_regnamespace('${set.schema}') IS NULL THEN CREATE SCHEMA ${set.schema}; END IF; END $$;
    CREATE TABLE IF NOT EXISTS ${table} (
      name text PRIMARY KEY,
      checksum text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`;
  const applied: string[] = [];
  // The common case at start-up, every file recorded unchanged, costs two queries instead of five
  // per file; anything else (a pending or a changed file) takes the locked path below.
  if (await allRecorded(pool, set.schema, migrations)) return applied;
  for (const migration of migrations) {
    // A stop requested meanwhile ends the run between files, each of which is all or nothing.
    if (options.signal?.aborted) break;
    let ms: number | undefined;
    try {
      ms = await withTransaction(pool, async (client) => {
        await client.query('SELECT pg_advisory_xact_lock($1::bigint)', [set.lockKey]);
        if (!bootstrapped) {
          await client.query(bootstrap);
          bootstrapped = true;
        }
        const recorded = await client.query<{ checksum: string }>(`SELECT checksum FROM ${table} WHERE name = $1::text`, [migration.name]);
        if (recorded.rows[0]) {
          if (recorded.rows[0].checksum !== migration.checksum) {
            throw new MigrationError(`migration ${migration.name} was changed after it was applied; add a new migration instead`);
          }
          return undefined;
        }
        const started = performance.now();
        await client.query(migration.sql);
        await client.query(`INSERT INTO ${table} (name, checksum) VALUES ($1::text, $2::text)`, [migration.name, migration.checksum]);
        return performance.now() - started;
      });
    } catch (error) {
      if (error instanceof MigrationError) throw error;
      throw new MigrationError(`migration ${migration.name} failed: ${(error as Error).message}`, { cause: error });
    }
    if (ms === undefined) continue; // recorded before, or by another process meanwhile
    applied.push(migration.name);
    options.logger?.info({ migration: migration.name, schema: set.schema, ms: Math.round(ms) }, 'migration applied');
  }
  return applied;
}

async function allRecorded(db: Pick<pg.Pool, 'query'>, schema: string, migrations: readonly Migration[]): Promise<boolean> {
  const table = await db.query<{ present: boolean }>(`SELECT to_regclass('${schema}.schema_migrations') IS NOT NULL AS present`);
  if (!table.rows[0]?.present) return false;
  const { rows } = await db.query<{ name: string; checksum: string }>(`SELECT name, checksum FROM ${schema}.schema_migrations`);
  const recorded = new Map(rows.map((r) => [r.name, r.checksum]));
  return migrations.every((m) => recorded.get(m.name) === m.checksum);
}
