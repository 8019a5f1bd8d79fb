/**
 * Rate limit on failed authentication, per client address: after `limit` answers of 401 within a
 * minute, that address gets 429 (before its body is read) until the minute is over. Successful
 * requests are never counted, so a burst of genuine deliveries is never throttled.
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

  return (req: Request, res: Response, next: NextFunction): void => {
    const key = req.ip ?? 'unknown';
    const time = now();
    sweep(time);
    const entry = failures.get(key);
    if (entry && entry.resetAt > time && entry.count >= limit) {
      res.setHeader('Retry-After', String(Math.ceil((entry.resetAt - time) / 1000)));
      throw new AppError('TOO_MANY_REQUESTS', 'too many failed authentication attempts; try again later');
    }
    res.on('finish', () => {
      if (res.statusCode !== 401) return;
      const current = failures.get(key);
      const at = now();
      if (!current || current.resetAt <= at) failures.set(key, { count: 1, resetAt: at + WINDOW_MS });
      else current.count++;
    });
    next();
  };
}
