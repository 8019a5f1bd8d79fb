import type { ClientRateLimitInfo, Options, Store } from 'express-rate-limit';
import pg from 'pg';
import type { Logger } from 'pino';
import { withTransaction } from '../../../services/shared/db/transaction.js';
import { rateLimitHit, rateLimitReset, rateLimitUndo, type RateLimitHitRow } from '../../../services/shared/rate-limit.js';

/**
 * The login limiters' counters in PostgreSQL (LOGIN_DATABASE_URL, docs/identity.md "Rate limits and
 * replicas"): every replica of the login app counts against one budget, whichever replica a request
 * reaches. An express-rate-limit Store over one table, login.rate_limits, in the login app's own
 * database; each hit is one atomic statement (services/shared/rate-limit.ts, the API's change limit
 * uses the same), the window measured by the database's clock.
 *
 * Why not a store from npm: @acpr/rate-limit-postgresql (the one listed by express-rate-limit) runs
 * its migrations from the constructor without waiting for them (CREATE EXTENSION, CREATE SCHEMA: the
 * app's role would need those rights, and the first hits can come before the tables), takes an
 * exclusive LOCK TABLE on every hit (all limiters' hits in one queue), starts one window for every key
 * at once rather than per client, and brings its own pinned pg and an unmaintained migration runner.
 * rate-limiter-flexible's PostgreSQL store is well kept but is no express-rate-limit Store (the
 * limiters' skip/undo of successful logins and their headers would have to be written again) and
 * measures windows by each replica's clock.
 */

export const LOGIN_RATE_LIMIT_TABLE = 'login.rate_limits';

/**
 * The table, made by the app itself at start (its role owns its database, as Kratos and Hydra migrate
 * theirs): idempotent, under a transaction-scoped advisory lock so that replicas starting together
 * do not race on the catalogue.
 */
const SCHEMA_STATEMENTS = [
  `SELECT pg_advisory_xact_lock(hashtext('login.rate_limits'))`,
  `CREATE SCHEMA IF NOT EXISTS login`,
  `CREATE TABLE IF NOT EXISTS login.rate_limits (key text PRIMARY KEY, hits integer NOT NULL, window_ends timestamptz NOT NULL)`,
  `CREATE INDEX IF NOT EXISTS rate_limits_window_ends_idx ON login.rate_limits (window_ends)`,
  `COMMENT ON TABLE login.rate_limits IS 'The login app''s fixed-window counters (per client address, failed attempts per hashed account), shared by every replica.'`,
];

export async function ensureLoginRateLimitTable(pool: pg.Pool): Promise<void> {
  await withTransaction(pool, async (client) => {
    for (const statement of SCHEMA_STATEMENTS) await client.query(statement);
  });
}

/** The pool the limiters use: small (one statement per login attempt), failing fast when the database is gone. */
export function createLoginRateLimitPool(connectionString: string, logger: Logger): pg.Pool {
  const pool = new pg.Pool({ connectionString, max: 4, connectionTimeoutMillis: 5_000, idleTimeoutMillis: 30_000, application_name: 'login-app' });
  // A dropped idle connection (a database restart) must not end the process; the next query reconnects.
  pool.on('error', (error) => logger.warn({ err: { message: error.message } }, 'login limit database connection failed'));
  return pool;
}

/**
 * One limiter's store. Keys are the limiters' own (`ip:<address>`, `account:<sha256>`): no e-mail
 * address is ever written. A failing database fails the request (express-rate-limit's default,
 * passOnStoreError false): the app answers "Sign-in unavailable" rather than lifting the limit.
 */
export class PostgresRateLimitStore implements Store {
  /** Shared across processes (the limiters' keys already name their kind: `ip:`, `account:`). */
  readonly localKeys = false;
  private windowMs = 60_000;

  constructor(private readonly db: Pick<pg.Pool, 'query'>) {}

  init(options: Options): void {
    this.windowMs = options.windowMs;
  }

  async increment(key: string): Promise<ClientRateLimitInfo> {
    const { rows } = await this.db.query<RateLimitHitRow>(rateLimitHit(LOGIN_RATE_LIMIT_TABLE, key, this.windowMs));
    const row = rows[0]!;
    return { totalHits: row.hits, resetTime: new Date(Date.now() + Math.max(0, Math.ceil(Number(row.ttl)))) };
  }

  async decrement(key: string): Promise<void> {
    await this.db.query(rateLimitUndo(LOGIN_RATE_LIMIT_TABLE, key));
  }

  async resetKey(key: string): Promise<void> {
    await this.db.query(rateLimitReset(LOGIN_RATE_LIMIT_TABLE, key));
  }
}
