/**
 * The webhook's PostgreSQL (WEBHOOK_DATABASE_URL): one small pool, and the webhook's own schema
 * `webhook` migrated at start (migrations/NNN_*.sql, by services/shared/db/migrate.ts under the
 * set's advisory lock, so replicas starting at once migrate once). The role it connects as needs
 * no more than its own schema: docs/webhook.md "More than one replica".
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { Logger } from 'pino';
import { migrateSet, type MigrationSet } from '../../shared/db/migrate.js';

export const WEBHOOK_MIGRATIONS: MigrationSet = {
  dir: join(dirname(fileURLToPath(import.meta.url)), '../migrations'),
  schema: 'webhook',
  lockKey: 7_346_120_931,
};

/** Connect, migrate the webhook's schema, and hand the pool over (the caller ends it). */
export async function openWebhookDatabase(url: string, logger: Logger): Promise<pg.Pool> {
  const pool = new pg.Pool({
    connectionString: url,
    // Pushes of one target wait for each other on the lane lock; a handful of connections suffice.
    max: 5,
    connectionTimeoutMillis: 10_000,
    application_name: 'webhook',
  });
  // A connection lost while idle (database restart) or checked out must not crash the process; the
  // query on it fails and its caller handles that.
  pool.on('error', (error) => logger.warn({ err: error.message }, 'idle database connection failed'));
  pool.on('connect', (client) => client.on('error', (error) => logger.warn({ err: error.message }, 'database connection failed')));
  try {
    await migrateSet(pool, WEBHOOK_MIGRATIONS, { logger });
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw error;
  }
  return pool;
}
