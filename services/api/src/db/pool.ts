import pg from 'pg';
import type { Logger } from 'pino';

export type Db = pg.Pool;
export type DbClient = pg.PoolClient;

/** Anything that runs a query: the pool or a client inside a transaction. */
export type Queryable = Pick<pg.Pool, 'query'>;

export function createPool(connectionString: string, options: { max?: number; logger?: Logger } = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max: options.max ?? 10,
    // Fail fast instead of queueing forever when the database is gone.
    connectionTimeoutMillis: 10_000,
    application_name: 'feature-api',
  });
  // An idle client losing its connection (database restart) must not crash the process.
  pool.on('error', (error) => options.logger?.warn({ err: error }, 'idle database connection failed'));
  // Nor may a checked-out one: its query fails and the caller handles that, but the client also
  // emits 'error', which would be unhandled without a listener (graphile-worker checks for this).
  pool.on('connect', (client) => {
    client.on('error', (error) => options.logger?.warn({ err: error }, 'database connection failed'));
  });
  return pool;
}

/**
 * Run `work` in one transaction on one connection: everything commits together or nothing does.
 * `actor` becomes the transaction-local setting app.actor, which the history trigger records.
 */
export async function withTransaction<T>(db: Db, work: (client: DbClient) => Promise<T>, options: { actor?: string | null } = {}): Promise<T> {
  const client = await db.connect();
  try {
    await client.query('BEGIN');
    if (options.actor) await client.query("SELECT set_config('app.actor', $1::text, true)", [options.actor]);
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}
