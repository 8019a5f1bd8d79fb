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
 */
import { AppError } from '../../shared/errors.js';

const WINDOW_MS = 60_000;

/** One count per server, kept by app.ts' error handler for every route. */
export class AuthFailureLimiter {
  private readonly failures = new Map<string, { count: number; resetAt: number }>();
  private nextSweep: number;

  constructor(
    private readonly limit: number,
    private readonly now: () => number = Date.now,
  ) {
    this.nextSweep = now() + WINDOW_MS;
  }

  /**
   * The error to answer with: a failure that is not a 401 unchanged; a 401 counted against the
   * client's address and turned into 429 (with Retry-After, and the 401's headers) beyond the limit.
   */
  judge(error: unknown, clientAddress: string | undefined): unknown {
    if (!(error instanceof AppError) || error.statusCode !== 401) return error;
    const key = clientAddress ?? 'unknown';
    const time = this.now();
    this.sweep(time);
    let entry = this.failures.get(key);
    if (!entry || entry.resetAt <= time) {
      entry = { count: 0, resetAt: time + WINDOW_MS };
      this.failures.set(key, entry);
    }
    entry.count++;
    if (entry.count <= this.limit) return error;
    // The 401's own headers stay: one refused before its body was read still closes the connection.
    return new AppError('TOO_MANY_REQUESTS', 'too many failed authentication attempts; try again later', {
      headers: { ...error.headers, 'Retry-After': String(Math.ceil((entry.resetAt - time) / 1000)) },
    });
  }

  private sweep(time: number): void {
    if (time < this.nextSweep) return;
    for (const [key, entry] of this.failures) if (entry.resetAt <= time) this.failures.delete(key);
    this.nextSweep = time + WINDOW_MS;
  }
}
