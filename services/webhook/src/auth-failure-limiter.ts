/**
 * Rate limit on failed authentication, per client address: once an address has had `limit`
 * answers of 401 within a minute, its further failures are answered 429 (with Retry-After) until
 * the minute is over.
 *
 * It never refuses a request that authenticates. GitHub sends every hook's deliveries from the same
 * few addresses, and the documented setup (one hook per team on one repository) makes every push
 * reach the other teams' hooks too, where it fails; anyone can also point a hook with a wrong
 * secret at this server. A limit that refused by address before authenticating would let those
 * failures lock out genuine deliveries, so the decision is taken on the answer: only a request that
 * has already failed authentication is turned into 429.
 *
 * The counts live in this process (MemoryFailureCounter) or, with WEBHOOK_DATABASE_URL, in
 * PostgreSQL (postgresFailureCounter: table webhook.auth_failures through services/shared/rate-limit.ts),
 * where every replica counts against one budget. The decision is the same either way.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import { AppError } from '../../shared/errors.js';
import { rateLimitHit, type RateLimitHitRow } from '../../shared/rate-limit.js';

const WINDOW_MS = 60_000;

/** One failure counted: the key's count within its window, and the milliseconds left of that window. */
export interface FailureCount {
  count: number;
  msLeft: number;
}

export interface FailureCounter {
  hit(key: string, windowMs: number): FailureCount | Promise<FailureCount>;
}

/** Fixed windows in this process' memory (one webhook process). */
export class MemoryFailureCounter implements FailureCounter {
  private readonly failures = new Map<string, { count: number; resetAt: number }>();
  private nextSweep: number;

  constructor(private readonly now: () => number = Date.now) {
    this.nextSweep = now() + WINDOW_MS;
  }

  hit(key: string, windowMs: number): FailureCount {
    const time = this.now();
    this.sweep(time);
    let entry = this.failures.get(key);
    if (!entry || entry.resetAt <= time) {
      entry = { count: 0, resetAt: time + windowMs };
      this.failures.set(key, entry);
    }
    entry.count++;
    return { count: entry.count, msLeft: entry.resetAt - time };
  }

  private sweep(time: number): void {
    if (time < this.nextSweep) return;
    for (const [key, entry] of this.failures) if (entry.resetAt <= time) this.failures.delete(key);
    this.nextSweep = time + WINDOW_MS;
  }
}

/** Fixed windows in PostgreSQL (webhook.auth_failures, the database's clock): one budget for every replica. */
export function postgresFailureCounter(pool: Pick<pg.Pool, 'query'>): FailureCounter {
  return {
    async hit(key, windowMs) {
      const statement = rateLimitHit('webhook.auth_failures', key, windowMs);
      const { rows } = await pool.query<RateLimitHitRow>(statement.text, statement.values);
      return { count: Number(rows[0]!.hits), msLeft: Math.max(0, Number(rows[0]!.ttl)) };
    },
  };
}

/** One count per server, kept by app.ts' error handler for every route. */
export class AuthFailureLimiter {
  constructor(
    private readonly limit: number,
    private readonly counter: FailureCounter = new MemoryFailureCounter(),
    private readonly logger?: Logger,
  ) {}

  /**
   * The error to answer with: a failure that is not a 401 unchanged; a 401 counted against the
   * client's address and turned into 429 (with Retry-After, and the 401's headers) beyond the limit.
   * A promise when the count is kept in the database; if the database cannot count, the 401 stands.
   */
  judge(error: unknown, clientAddress: string | undefined): unknown {
    if (!(error instanceof AppError) || error.statusCode !== 401) return error;
    const counted = this.counter.hit(clientAddress ?? 'unknown', WINDOW_MS);
    if (!(counted instanceof Promise)) return this.decide(error, counted);
    return counted.then(
      (count) => this.decide(error, count),
      (failure: unknown) => {
        this.logger?.warn({ err: failure }, 'could not count a failed authentication; answering 401');
        return error;
      },
    );
  }

  private decide(error: AppError, { count, msLeft }: FailureCount): AppError {
    if (count <= this.limit) return error;
    // The 401's own headers stay: one refused before its body was read still closes the connection.
    return new AppError('TOO_MANY_REQUESTS', 'too many failed authentication attempts; try again later', {
      headers: { ...error.headers, 'Retry-After': String(Math.max(1, Math.ceil(msLeft / 1000))) },
    });
  }
}
