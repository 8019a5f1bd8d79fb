import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Retry with exponential backoff and jitter, up to a deadline: for one-shot jobs that call a service
 * which may still be starting (the OAuth2 clients sync against Hydra, the GeoServer provisioning).
 *
 * Only what `retryable` accepts is tried again (a refused connection, a timeout, a 5xx); anything else
 * (a 4xx, a bug) is thrown at once, since waiting will not change the answer. The delay before attempt
 * n+1 is `min(maxDelayMs, initialDelayMs · 2^(n-1))`, of which a random half is taken off ("equal
 * jitter": several jobs that started together do not knock in step, and no delay is near zero). No
 * attempt starts after the deadline: when the next delay would pass it, the last error is thrown
 * wrapped in a RetryError that says how many attempts were made over how long.
 */

export interface RetryOptions {
  /** Milliseconds from the first attempt after which no attempt starts. */
  deadlineMs: number;
  /** Delay before the second attempt, before jitter (default 250 ms). */
  initialDelayMs?: number;
  /** Largest delay between two attempts, before jitter (default 10 s). */
  maxDelayMs?: number;
  /** Whether an error is worth another attempt. */
  retryable: (error: unknown) => boolean;
  /** Called before each wait (for a log line). */
  onRetry?: (info: { attempt: number; delayMs: number; error: unknown }) => void;
  /** Tests: a fixed random source in [0, 1). */
  random?: () => number;
}

export class RetryError extends Error {
  override readonly name = 'RetryError';
  constructor(
    readonly attempts: number,
    readonly elapsedMs: number,
    readonly lastError: unknown,
  ) {
    super(`gave up after ${attempts} attempt${attempts === 1 ? '' : 's'} in ${(elapsedMs / 1000).toFixed(1)} s: ${errorMessage(lastError)}`, { cause: lastError });
  }
}

export function errorMessage(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  // Node's fetch hides the socket error (ECONNREFUSED …) in its cause.
  const cause = error.cause instanceof Error ? ` (${error.cause.message})` : '';
  return `${error.message}${cause}`;
}

/** The delay before attempt `attempt + 1`, jitter included. */
export function backoffDelay(attempt: number, options: Pick<RetryOptions, 'initialDelayMs' | 'maxDelayMs' | 'random'> = {}): number {
  const ceiling = Math.min(options.maxDelayMs ?? 10_000, (options.initialDelayMs ?? 250) * 2 ** (attempt - 1));
  return Math.round(ceiling / 2 + (options.random ?? Math.random)() * (ceiling / 2));
}

export async function retry<T>(operation: (attempt: number) => Promise<T>, options: RetryOptions): Promise<T> {
  const start = Date.now();
  for (let attempt = 1; ; attempt++) {
    try {
      return await operation(attempt);
    } catch (error) {
      if (!options.retryable(error)) throw error;
      const delayMs = backoffDelay(attempt, options);
      const elapsedMs = Date.now() - start;
      if (elapsedMs + delayMs > options.deadlineMs) throw new RetryError(attempt, elapsedMs, error);
      options.onRetry?.({ attempt, delayMs, error });
      await sleep(delayMs);
    }
  }
}

/** An HTTP status that may change by waiting: the server is starting, overloaded or behind a proxy that is. */
export function isTransientStatus(status: number): boolean {
  return status >= 500 && status <= 599;
}
