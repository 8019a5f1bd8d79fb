/**
 * The payload scanner (payload.ts) against JSON.parse: for any JSON object it finds exactly the
 * top-level members JSON.parse would, and it refuses what JSON.parse refuses structurally.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MalformedPayload, scanTopLevel } from '../src/payload.js';

const pick = (value: Record<string, unknown>) =>
  Object.fromEntries(['ref', 'after'].filter((k) => Object.hasOwn(value, k)).map((k) => [k, value[k]]));

describe('scanTopLevel', () => {
  it('finds the same top-level ref and after as JSON.parse, for any JSON object and any indentation', () => {
    const member = fc.oneof(fc.string(), fc.jsonValue());
    fc.assert(
      fc.property(
        fc.dictionary(fc.string(), fc.jsonValue()),
        fc.option(member),
        fc.option(member),
        fc.constantFrom(undefined, 0, 2, '\t'),
        (rest, ref, after, indent) => {
          const value: Record<string, unknown> = { ...rest };
          if (ref !== null) value.ref = ref;
          if (after !== null) value.after = after;
          const text = JSON.stringify(value, null, indent);
          expect(scanTopLevel(Buffer.from(text), ['ref', 'after'])).toEqual(pick(JSON.parse(text) as Record<string, unknown>));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('takes only top-level members: a ref nested in another member does not count', () => {
    const body = Buffer.from('{"head_commit":{"ref":"refs/heads/evil","after":"x"},"ref":"refs/heads/main","x":["\\"ref\\":1"]}');
    expect(scanTopLevel(body, ['ref', 'after'])).toEqual({ ref: 'refs/heads/main' });
  });

  it('the last of repeated members wins, as with JSON.parse', () => {
    const text = '{"ref":"refs/heads/a","ref":"refs/heads/b"}';
    expect(scanTopLevel(Buffer.from(text), ['ref'])).toEqual({ ref: (JSON.parse(text) as { ref: string }).ref });
  });

  for (const broken of ['{"ref":"refs/heads/main","after":"' + 'a'.repeat(40) + '"', '{"ref":"refs/heads/mäin",}', '{"ref":"a\u0001b"}', '{"ref":"x"} trailing', '{"ref" "x"}', '{"a":[1,2}', '{"a":tru}', '']) {
    it(`refuses ${JSON.stringify(broken).slice(0, 40)}`, () => {
      expect(() => JSON.parse(broken)).toThrow();
      expect(() => scanTopLevel(Buffer.from(broken), ['ref', 'after'])).toThrow(MalformedPayload);
    });
  }
});
