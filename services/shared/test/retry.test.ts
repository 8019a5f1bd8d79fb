import { describe, expect, it } from 'vitest';
import { backoffDelay, retry, RetryError } from '../retry.js';

/** The shared retry: exponential backoff with jitter, a deadline, and no retry of what waiting cannot fix. */

class Transient extends Error {}

describe('retry', () => {
  it('doubles the delay per attempt up to the cap, and takes off at most half of it at random', () => {
    expect([1, 2, 3, 4, 5, 6].map((n) => backoffDelay(n, { initialDelayMs: 100, maxDelayMs: 1000, random: () => 0.999_999 }))).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect([1, 2, 3, 4, 5, 6].map((n) => backoffDelay(n, { initialDelayMs: 100, maxDelayMs: 1000, random: () => 0 }))).toEqual([50, 100, 200, 400, 500, 500]);
  });

  it('tries a transient failure again until it succeeds', async () => {
    const waits: number[] = [];
    const result = await retry(
      async (attempt) => {
        if (attempt < 4) throw new Transient(`attempt ${attempt}`);
        return 'up';
      },
      { deadlineMs: 5_000, initialDelayMs: 10, retryable: (e) => e instanceof Transient, onRetry: ({ delayMs }) => waits.push(delayMs) },
    );
    expect(result).toBe('up');
    expect(waits).toHaveLength(3);
    waits.forEach((delay, i) => expect(delay).toBeGreaterThanOrEqual(5 * 2 ** i));
  });

  it('throws a failure it may not retry at once, after one attempt', async () => {
    let attempts = 0;
    const refused = new Error('400 Bad Request');
    await expect(
      retry(
        async () => {
          attempts++;
          throw refused;
        },
        { deadlineMs: 5_000, initialDelayMs: 10, retryable: (e) => e instanceof Transient },
      ),
    ).rejects.toBe(refused);
    expect(attempts).toBe(1);
  });

  it('gives up when the next attempt would start after the deadline, saying how often and how long it tried', async () => {
    const started = Date.now();
    const error = await retry(
      async (attempt) => {
        throw new Transient(`connect ECONNREFUSED (attempt ${attempt})`);
      },
      { deadlineMs: 300, initialDelayMs: 20, maxDelayMs: 80, retryable: (e) => e instanceof Transient },
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RetryError);
    expect(Date.now() - started).toBeLessThanOrEqual(400);
    const { attempts, message } = error as RetryError;
    expect(attempts).toBeGreaterThanOrEqual(4);
    expect(message).toMatch(new RegExp(`^gave up after ${attempts} attempts in 0\\.\\d s: connect ECONNREFUSED \\(attempt ${attempts}\\)$`));
  });
});
