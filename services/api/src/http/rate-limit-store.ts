import type { FastifyRateLimitStore, FastifyRateLimitStoreCtor } from '@fastify/rate-limit';
import { rateLimitHit, type RateLimitHitRow } from '../../../shared/rate-limit.js';
import { query, type Queryable } from '../db/pool.js';

/**
 * @fastify/rate-limit's store in PostgreSQL (table http.rate_limits, migration 029): the change limit
 * counts against one budget whichever API process a request reaches (docs/api.md "Rate limit",
 * docs/infra.md on replicas). A fixed window per key, like the plugin's own in-memory store: one
 * statement increments the key's count, or starts a new window when the old one has ended, and
 * answers the count and the milliseconds left; concurrent requests are serialised on the row.
 * Expired rows are deleted a few at a time by the same statement, so the table holds about one row
 * per active caller. The statement is services/shared/rate-limit.ts', shared with the login app.
 */
export function postgresRateLimitStore(db: Queryable): FastifyRateLimitStoreCtor {
  class PostgresStore implements FastifyRateLimitStore {
    incr(key: string, callback: (error: Error | null, result?: { current: number; ttl: number }) => void, timeWindow: number): void {
      query(db, rateLimitHit('http.rate_limits', key, timeWindow)).then(
        ({ rows }) => {
          const row = rows[0] as RateLimitHitRow;
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
