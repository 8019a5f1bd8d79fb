import pg from 'pg';
import type { Logger } from 'pino';
import { withTransaction as transaction } from '../../../shared/db/transaction.js';
import type { AppError } from '../../../shared/errors.js';
import { fromDatabaseError } from './errors.js';

export type Db = pg.Pool;
export type DbClient = pg.PoolClient;

/** Anything that runs a query: the pool or a client inside a transaction. */
export type Queryable = Pick<pg.Pool, 'query'>;

/**
 * One statement as every query module of the API returns it: values are always parameters, never
 * spliced into the text.
 */
export interface Query {
  text: string;
  values: unknown[];
  /** Rows as arrays rather than objects (pg's rowMode), for queries returning many rows. */
  rowMode?: 'array';
  /**
   * A named prepared statement: each connection parses and plans it once, not at every run. For the
   * statements of hot paths whose planning costs as much as their work (a CTE of several writes, a
   * lock reading a snapshot); the text must be the same at every call (the values are parameters).
   * On the embedded database each connection has its own names (db/pglite-server.ts).
   */
  name?: string;
}

/**
 * Runs one statement on the pool or a transaction's client; a database failure leaves as the API's
 * error (db/errors.ts: a conflict, invalid input, an unreachable database), anything else unchanged.
 * The one way services run their queries. `refused`, when given, names the failures that are the
 * request's fault in this statement's own words (a CQL2 filter the database cannot evaluate); it is
 * asked first, and what it leaves goes the common way.
 */
export async function query(db: Queryable, statement: Query, refused?: (error: unknown) => AppError | undefined): Promise<pg.QueryResult> {
  try {
    return await db.query(statement);
  } catch (error) {
    throw refused?.(error) ?? fromDatabaseError(error) ?? error;
  }
}

/**
 * Session settings of the API's own connections (not the worker's), sent in the startup packet so they
 * cost no round trip. Measured with EXPLAIN (ANALYZE, BUFFERS) on a 10 000-feature page
 * (bench/api.bench.ts):
 * - jit off: the page's cost estimate passes jit_above_cost, and compiling took ~80 ms of a query that
 *   runs in ~200 ms without it. The API's queries are short; JIT never paid off on them.
 * - work_mem 16MB: sorting a page of 10 000 stored features (about 4.5 MB) spilled to disk at the
 *   default 4 MB ("external merge"), doubling the query's time. Per sort, per connection: at most
 *   pool size × 16 MB.
 */
export const API_SESSION_SETTINGS: Readonly<Record<string, string>> = { jit: 'off', work_mem: '16MB' };

export function createPool(connectionString: string, options: { max?: number; logger?: Logger; settings?: Readonly<Record<string, string>> } = {}): pg.Pool {
  const settings = Object.entries(options.settings ?? {});
  const pool = new pg.Pool({
    connectionString,
    max: options.max ?? 10,
    ...(settings.length ? { options: settings.map(([name, value]) => `-c ${name}=${value}`).join(' ') } : {}),
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
 * Run `work` in one transaction on one connection (services/shared/db/transaction.ts: a connection
 * whose ROLLBACK failed is discarded). `actor` becomes the transaction-local setting app.actor, which
 * the history trigger records. A database failure leaves as the API's error, as from query().
 */
export async function withTransaction<T>(db: Db, work: (client: DbClient) => Promise<T>, options: { actor?: string | null } = {}): Promise<T> {
  const actor = options.actor;
  try {
    return await transaction(db, async (client) => {
      if (actor) await client.query("SELECT set_config('app.actor', $1::text, true)", [actor]);
      return work(client);
    });
  } catch (error) {
    throw fromDatabaseError(error) ?? error;
  }
}
