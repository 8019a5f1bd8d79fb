import { describe, expect, it } from 'vitest';
import { doing, step, until, type StepResult } from '../../rehearsal/steps.js';

/** No step may hang the rehearsal: each has a deadline, and its failure says what it waited for (docs/rehearsal.md). */
describe("a rehearsal step's deadline", () => {
  it('fails a step that never finishes, naming what it waited for and its containers’ last lines', async () => {
    const results: StepResult[] = [];
    const began = Date.now();
    const ok = await step(
      results,
      '8 a step whose browser call never returns',
      async () => {
        doing('the logout page to close');
        await new Promise(() => undefined);
        return 'never';
      },
      { limitMs: 300, logs: () => 'login: last line' },
    );
    expect(ok).toBe(false);
    expect(Date.now() - began).toBeLessThan(5_000);
    expect(results).toEqual([expect.objectContaining({ step: '8 a step whose browser call never returns', ok: false })]);
    expect(results[0]!.detail).toBe('not finished within 0.3 s, waiting for the logout page to close; login: last line');
  });

  it('names the wait of until() it is in, and the rehearsal goes on with the next step', async () => {
    const results: StepResult[] = [];
    await step(results, '4b waits for mail', () => until('the reviewers’ mail', async () => undefined, 60_000).then(() => 'arrived'), { limitMs: 400 });
    const next = await step(results, '4c the next step', async () => 'done');
    expect(results.map((r) => [r.ok, r.detail])).toEqual([
      [false, 'not finished within 0.4 s, waiting for the reviewers’ mail'],
      [true, 'done'],
    ]);
    expect(next).toBe(true);
  });

  it('passes a step that finishes in time, and a step’s own error stays its message', async () => {
    const results: StepResult[] = [];
    await step(results, '2 quick', async () => 'fine', { limitMs: 1_000 });
    await step(results, '3 broken', async () => {
      throw new Error('GET answered 500');
    }, { limitMs: 1_000 });
    expect(results.map((r) => [r.ok, r.detail])).toEqual([
      [true, 'fine'],
      [false, 'GET answered 500'],
    ]);
  });
});
