/**
 * Fixed-window rate-limit counters in PostgreSQL, so that every replica of a service counts against one
 * budget (issue 30). One row per key: its count (`hits`) and the end of its window (`window_ends`).
 * Used by the API's change limit (table http.rate_limits, migration 029, services/api/src/http/
 * rate-limit-store.ts) and the login app's limiters (table login.rate_limits in the login app's own
 * database, identity/src/app/rate-limit-store.ts) and the webhook's failed-authentication limit (table
 * webhook.auth_failures, services/webhook/src/auth-failure-limiter.ts); all three have that shape.
 *
 * Every statement is one atomic statement on the key's row: concurrent hits from any number of
 * processes are serialised on the row by PostgreSQL, and the window is measured by the database's
 * clock, never a replica's.
 */

/** The counter tables; names are fixed here, never taken from input. */
export type RateLimitTable = 'http.rate_limits' | 'login.rate_limits' | 'webhook.auth_failures';
const TABLES: ReadonlySet<string> = new Set<RateLimitTable>(['http.rate_limits', 'login.rate_limits', 'webhook.auth_failures']);

function table(name: RateLimitTable): RateLimitTable {
  if (!TABLES.has(name)) throw new Error(`not a rate-limit table: ${String(name)}`);
  return name;
}

/** The statement's answer: the key's count in its window and the milliseconds left of that window. */
export interface RateLimitHitRow {
  hits: number;
  ttl: number;
}

/**
 * One hit: increments the key's count, or starts a new window of `windowMs` when the old one has
 * ended, and answers `hits` and `ttl` (ms). Expired rows are deleted a few at a time by the same
 * statement (never the key's own row, never a row another hit holds), so the table keeps about one row
 * per active caller without a timer.
 */
export function rateLimitHit(name: RateLimitTable, key: string, windowMs: number): { text: string; values: unknown[] } {
  const t = table(name);
  return {
    text: `
      WITH upkeep AS (
        DELETE FROM ${t} e
        WHERE e.key IN (SELECT x.key FROM ${t} x WHERE x.window_ends <= now() - interval '1 minute' AND x.key <> $1::text ORDER BY x.window_ends LIMIT 20 FOR UPDATE SKIP LOCKED)
      )
      INSERT INTO ${t} AS r (key, hits, window_ends)
      VALUES ($1::text, 1, clock_timestamp() + make_interval(secs => $2::int / 1000.0))
      ON CONFLICT (key) DO UPDATE SET
        hits = CASE WHEN r.window_ends <= clock_timestamp() THEN 1 ELSE r.hits + 1 END,
        window_ends = CASE WHEN r.window_ends <= clock_timestamp() THEN excluded.window_ends ELSE r.window_ends END
      RETURNING r.hits, extract(epoch FROM (r.window_ends - clock_timestamp())) * 1000 AS ttl`,
    values: [key, windowMs],
  };
}

/** Takes one hit back within the key's current window (a request that should not count), never below 0. */
export function rateLimitUndo(name: RateLimitTable, key: string): { text: string; values: unknown[] } {
  const t = table(name);
  return {
    text: `UPDATE ${t} SET hits = greatest(hits - 1, 0) WHERE key = $1::text AND window_ends > clock_timestamp()`,
    values: [key],
  };
}

/** Forgets the key's count. */
export function rateLimitReset(name: RateLimitTable, key: string): { text: string; values: unknown[] } {
  return { text: `DELETE FROM ${table(name)} WHERE key = $1::text`, values: [key] };
}
