import { vi } from 'vitest';

/**
 * Waits until `probe` gives a value (not undefined, null or false), with vitest's vi.waitFor doing the
 * polling; the error names what was awaited. The suite's one way to wait for something that happens
 * in another process or on a timer.
 */
export function eventually<T>(what: string, probe: () => T | undefined | null | false | Promise<T | undefined | null | false>, timeoutMs = 20_000, intervalMs = 50): Promise<T> {
  return vi.waitFor(
    async () => {
      const value = await probe();
      if (value === undefined || value === null || value === false) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      return value;
    },
    { timeout: timeoutMs, interval: intervalMs },
  );
}
