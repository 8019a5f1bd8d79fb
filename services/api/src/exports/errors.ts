/**
 * A transient failure (network error, timeout, HTTP 5xx or 429, SMTP 4xx): the job queue should retry
 * the same job later with backoff. Permanent problems are not thrown but returned as an outcome
 * (`failed`, `conflict`) so they are recorded once instead of being retried forever.
 */
export class RetryableExportError extends Error {
  override readonly name = 'RetryableExportError';
  /** A server-suggested delay (Retry-After), when there was one. */
  readonly retryAfterMs?: number;

  constructor(message: string, options: { cause?: unknown; retryAfterMs?: number } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    if (options.retryAfterMs !== undefined) this.retryAfterMs = options.retryAfterMs;
  }
}

export function isRetryableStatus(status: number): boolean {
  return status >= 500 || status === 429 || status === 408;
}

/** Parse a Retry-After header given in seconds; dates and garbage are ignored. */
export function retryAfterMs(header: string | null): number | undefined {
  if (header === null || !/^\d{1,6}$/.test(header.trim())) return undefined;
  return Number(header.trim()) * 1000;
}
