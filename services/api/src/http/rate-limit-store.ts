import type { FastifyRateLimitStore, FastifyRateLimitStoreCtor } from '@fastify/rate-limit';
import { query, type Queryable } from '../db/pool.js';

/**
 * @fastify/rate-limit's store in PostgreSQL (table http.rate_limits, migration 029): the change limit
 * counts against one budget whichever API process a request reaches (docs/api.md "Rate limit",
 * docs/infra.md on replicas). A fixed window per key, like the plugin's own in-memory store: one
 * statement increments the key's count, or starts a new window when the old one has ended, and
 * answers the count and the milliseconds left; concurrent requests are serialised on the row.
 * Expired rows are deleted a few at a time by the same statement, so the table holds about one row
 * per active caller.
 */
export function postgresRateLimitStore(db: Queryable): FastifyRateLimitStoreCtor {
  class PostgresStore implements FastifyRateLimitStore {
    incr(key: string, callback: (error: Error | null, result?: { current: number; ttl: number }) => void, timeWindow: number): void {
      query(db, increment(key, timeWindow)).then(
        ({ rows }) => {
          const row = rows[0] as { hits: number; ttl: number };
          callback(null, { current: row.hits, ttl: Math.max(0, Math.ceil(Number(row.ttl))) });
        },
        (error: unknown) => callback(error as Error),
      );
    }

    child(): FastifyRateLimitStore {
      return new PostgresStore();
    }
  }
  return PostgresStore;
}

function increment(key: string, windowMs: number) {
  return {
    text: `
      WITH upkeep AS (
        DELETE FROM http.rate_limits e
        WHERE e.key IN (SELECT x.key FROM http.rate_limits x WHERE x.window_ends <= now() - interval '1 minute' AND x.key <> $1::text ORDER BY x.window_ends LIMIT 20 FOR UPDATE SKIP LOCKED)
      )
      INSERT INTO http.rate_limits AS r (key, hits, window_ends)
      VALUES ($1::text, 1, clock_timestamp() + make_interval(secs => $2::int / 1000.0))
      ON CONFLICT (key) DO UPDATE SET
        hits = CASE WHEN r.window_ends <= clock_timestamp() THEN 1 ELSE r.hits + 1 END,
        window_ends = CASE WHEN r.window_ends <= clock_timestamp() THEN excluded.window_ends ELSE r.window_ends END
      RETURNING r.hits, extract(epoch FROM (r.window_ends - clock_timestamp())) * 1000 AS ttl`,
    values: [key, windowMs],
  };
}
