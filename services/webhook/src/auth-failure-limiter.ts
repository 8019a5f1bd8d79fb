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
import type { NextFunction, Request, Response } from 'express';
import { AppError } from '../../shared/errors.js';

const WINDOW_MS = 60_000;

export function authFailureLimiter(limit: number, now: () => number = Date.now) {
  const failures = new Map<string, { count: number; resetAt: number }>();
  let nextSweep = now() + WINDOW_MS;

  const sweep = (time: number): void => {
    if (time < nextSweep) return;
    for (const [key, entry] of failures) if (entry.resetAt <= time) failures.delete(key);
    nextSweep = time + WINDOW_MS;
  };

  /** Error middleware: counts every 401 and turns those beyond the limit into 429. */
  return (error: unknown, req: Request, _res: Response, next: NextFunction): void => {
    if (!(error instanceof AppError) || error.statusCode !== 401) return next(error);
    const key = req.ip ?? 'unknown';
    const time = now();
    sweep(time);
    let entry = failures.get(key);
    if (!entry || entry.resetAt <= time) {
      entry = { count: 0, resetAt: time + WINDOW_MS };
      failures.set(key, entry);
    }
    entry.count++;
    if (entry.count <= limit) return next(error);
    next(
      new AppError('TOO_MANY_REQUESTS', 'too many failed authentication attempts; try again later', {
        headers: { 'Retry-After': String(Math.ceil((entry.resetAt - time) / 1000)) },
      }),
    );
  };
}
