import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { aFeature, useTestApi, type TestResponse } from '../../../test/helpers/api.js';

/**
 * Property: whatever a client sends — random JSON, a valid feature with parts replaced by junk,
 * geometry of random shape, malformed text under any media type, random query strings and ids —
 * the answer is a success or a 4xx problem+json, never a 5xx, and never leaks internals.
 * FUZZ_RUNS scales the number of cases per property (default 400; 6 properties ≈ 2 400 requests).
 */
const RUNS = Number(process.env.FUZZ_RUNS ?? 400);

const { api } = useTestApi();
let token: string;
let existingId: string;

beforeAll(async () => {
  token = await api.tokenFor('admin', 'fuzzer');
  const created = await api.request('POST', '/api/features', { token, body: aFeature({ id: 'fuzz-target' }) });
  existingId = created.json.id as string;
});

function expectNoServerError(response: TestResponse, input: unknown): void {
  const shown = typeof input === 'string' ? input.slice(0, 300) : JSON.stringify(input)?.slice(0, 300);
  expect(response.status, `${response.status} for ${shown}: ${response.text.slice(0, 300)}`).toBeLessThan(500);
  if (response.status >= 400) {
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(typeof response.json?.code).toBe('string');
    // Stack frames, file paths and PostgreSQL's own wording never reach a client (input may be echoed).
    expect(response.text).not.toMatch(/\bat [\w.<>]+ \(|node_modules|\.ts:\d+|syntax error at|relation "|violates|SQLSTATE|lwgeom/);
  }
}

const hostileString = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('', ' ', '\u0000', 'a\u0000b', '\ud800', '\udfff\ud800', "'; DROP TABLE features.features; --", '%00', '../..', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', 'x'.repeat(300), '+', '+49 30', '١٢٣'),
);
const hostileNumber = fc.oneof(
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(0, -0, 180, -180, 90, -90, 180.0000001, 1e308, -1e308, 5e-324, Number.MAX_SAFE_INTEGER),
  fc.integer(),
);
const junk: fc.Arbitrary<unknown> = fc.oneof(fc.jsonValue({ maxDepth: 3 }), hostileString, hostileNumber, fc.constant(null));

const position = fc.oneof(
  fc.tuple(fc.double({ min: -180, max: 180, noNaN: true }), fc.double({ min: -90, max: 90, noNaN: true })),
  fc.array(hostileNumber, { maxLength: 4 }),
  junk,
);
const ring = fc.oneof(
  // Closed rings of random points: often self-intersecting, sometimes valid.
  fc.array(fc.tuple(fc.integer({ min: -180, max: 180 }), fc.integer({ min: -90, max: 90 })), { minLength: 3, maxLength: 8 }).map((points) => [...points, points[0]!]),
  fc.array(position, { maxLength: 6 }),
);
const geometry = fc.oneof(
  fc.record({ type: fc.constant('Point'), coordinates: position }),
  fc.record({ type: fc.constant('LineString'), coordinates: fc.array(position, { maxLength: 5 }) }),
  fc.record({ type: fc.constant('Polygon'), coordinates: fc.array(ring, { maxLength: 3 }) }),
  fc.record({ type: fc.constant('MultiPolygon'), coordinates: fc.array(fc.array(ring, { maxLength: 2 }), { maxLength: 3 }) }),
  fc.record({ type: fc.oneof(hostileString, fc.constantFrom('GeometryCollection', 'MultiPoint')), coordinates: junk }),
  junk,
);
const properties = fc.record(
  {
    name: fc.oneof(hostileString, junk),
    kategorie: fc.oneof(fc.constantFrom('friedhof', 'blumenbeet', 'denkmal'), hostileString, junk),
    adresse: fc.oneof(hostileString, junk),
    telefon: fc.oneof(fc.stringMatching(/^\+?[0-9 -]{1,20}$/), hostileString, junk),
    version: junk,
    [String('__proto__')]: junk,
    constructor: junk,
  },
  { requiredKeys: [] },
);
const featureBody = fc.oneof(
  fc.record({ type: fc.oneof(fc.constant('Feature'), hostileString), id: fc.oneof(hostileString, junk), geometry, properties }, { requiredKeys: [] }),
  // Mostly valid features with one part made hostile.
  fc.tuple(fc.constantFrom('type', 'id', 'geometry', 'properties', 'extra'), junk).map(([key, value]) => ({ ...aFeature(), [key]: value })),
  fc.record({ type: fc.constant('Feature'), geometry, properties: fc.constant({ name: 'ok', kategorie: 'denkmal' }) }),
  junk,
);

/** Percent-encode every UTF-8 byte (lone surrogates become U+FFFD, as any client would send them). */
const percentEncode = (s: string): string => [...Buffer.from(s, 'utf8')].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');

describe('hostile input never causes a 5xx', () => {
  it('POST bodies', async () => {
    await fc.assert(
      fc.asyncProperty(featureBody, async (body) => {
        expectNoServerError(await api.request('POST', '/api/features', { token, body }), body);
      }),
      { numRuns: RUNS },
    );
  });

  it('PUT bodies on an existing feature', async () => {
    await fc.assert(
      fc.asyncProperty(featureBody, fc.option(fc.oneof(hostileString.filter((s) => /^[\x20-\x7e]*$/.test(s)), fc.constantFrom('"1"', '*', 'W/"1"'))), async (body, ifMatch) => {
        const headers: Record<string, string> = ifMatch === null ? {} : { 'if-match': ifMatch };
        expectNoServerError(await api.request('PUT', `/api/features/${existingId}`, { token, body, headers }), body);
      }),
      { numRuns: RUNS },
    );
  });

  it('raw bodies under any media type', async () => {
    const contentType = fc.oneof(
      fc.constantFrom('application/json', 'application/geo+json', 'application/json; charset=utf-16', 'text/plain', 'application/json; charset=x', '*/*', 'application/'),
      hostileString.filter((s) => /^[\x20-\x7e]+$/.test(s)),
    );
    const raw = fc.oneof(fc.string({ unit: 'binary', maxLength: 200 }), fc.json().map((j) => j.slice(0, Math.max(1, j.length - 1))), fc.json());
    await fc.assert(
      fc.asyncProperty(raw, contentType, async (rawBody, type) => {
        expectNoServerError(await api.request('POST', '/api/features', { token, rawBody, headers: { 'content-type': type } }), rawBody);
      }),
      { numRuns: RUNS },
    );
  });

  it('list query strings', async () => {
    const numberText = fc.oneof(hostileNumber.map(String), fc.constantFrom('1e400', '-0', '.5', '5.', '+3', '0x1F', ' 1', 'NaN', 'Infinity', ''));
    const bbox = fc.oneof(fc.array(numberText, { minLength: 0, maxLength: 6 }).map((parts) => parts.join(',')), hostileString);
    const pair = fc.oneof(
      bbox.map((v) => ['bbox', v]),
      fc.oneof(numberText, hostileString).map((v) => ['limit', v]),
      fc.oneof(fc.constantFrom('friedhof', 'denkmal'), hostileString).map((v) => ['kategorie', v]),
      fc.oneof(hostileString, fc.string().map((s) => `c1.${Buffer.from(s).toString('base64url')}`)).map((v) => ['cursor', v]),
      fc.tuple(hostileString, hostileString),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(pair, { maxLength: 4 }), fc.boolean(), async (pairs, encode) => {
        const query = pairs.map(([k, v]) => (encode ? `${percentEncode(k!)}=${percentEncode(v!)}` : `${k}=${v}`)).join('&');
        const path = `/api/features?${query}`.replace(/[\s#]/g, (c) => encodeURIComponent(c));
        let response: TestResponse;
        try {
          response = await api.request('GET', path);
        } catch (error) {
          // fetch itself refuses some URLs (e.g. with raw control characters); the server never saw them.
          if (error instanceof TypeError) return;
          throw error;
        }
        expectNoServerError(response, path);
      }),
      { numRuns: RUNS },
    );
  });

  it('feature ids in paths', async () => {
    await fc.assert(
      fc.asyncProperty(hostileString, fc.constantFrom('GET', 'DELETE', 'GET history'), async (id, operation) => {
        const [method, suffix] = operation === 'GET history' ? ['GET', '/history'] : [operation, ''];
        const response = await api.request(method, `/api/features/${percentEncode(id)}${suffix}`, { token });
        expectNoServerError(response, id);
      }),
      { numRuns: RUNS },
    );
  });
});

/**
 * Property: bodies built from the shapes that cost a parser or a validator the most — nesting of any
 * depth, long arrays of one repeated (often wrong) unit, many members, long patterned strings, long
 * numbers — put at any member of a feature or as the whole body, at any size up to the 1 MiB limit,
 * are answered within a second with a capped answer that is never a 5xx.
 */
describe('hostile bodies of any shape and size up to the limit', () => {
  const LIMIT = 1024 * 1024 - 512;
  const unit = fc.constantFrom('[1,true]', '[]', '{}', '"x"', '1e400', 'null', '[[[[1]]]]', '"\\ud800"', '{"a":1}', '[13.4,52.5]', '[200,100]');
  const fragment = fc.oneof(
    fc.record({ kind: fc.constant('nest' as const), depth: fc.integer({ min: 1, max: LIMIT / 2 }), open: fc.constantFrom('[', '{"a":') }),
    fc.record({ kind: fc.constant('array' as const), unit, count: fc.integer({ min: 1, max: 200_000 }) }),
    fc.record({ kind: fc.constant('members' as const), count: fc.integer({ min: 1, max: 90_000 }) }),
    fc.record({ kind: fc.constant('string' as const), head: fc.constantFrom('1', 'a', ' ', '-', '\\ud800', '\\u0000', '1 '), tail: fc.constantFrom('x', '', '!', ' '), length: fc.integer({ min: 1, max: LIMIT }) }),
    fc.record({ kind: fc.constant('number' as const), digits: fc.integer({ min: 1, max: LIMIT }) }),
  );
  type Fragment = typeof fragment extends fc.Arbitrary<infer T> ? T : never;

  /** The fragment's JSON text, cut to about `room` characters. */
  function render(f: Fragment, room: number): string {
    switch (f.kind) {
      case 'nest': {
        const depth = Math.min(f.depth, Math.floor(room / (f.open.length + 1)));
        return f.open.repeat(depth) + '1' + (f.open === '[' ? ']' : '}').repeat(depth);
      }
      case 'array':
        return `[${Array.from({ length: Math.min(f.count, Math.floor(room / (f.unit.length + 1))) }, () => f.unit).join(',')}]`;
      case 'members':
        return `{${Array.from({ length: Math.min(f.count, Math.floor(room / 12)) }, (_, i) => `"k${i}":1`).join(',')}}`;
      case 'string':
        return `"${f.head.repeat(Math.max(1, Math.floor(Math.min(f.length, room) / f.head.length)))}${f.tail}"`;
      case 'number':
        return '9'.repeat(Math.min(f.digits, room));
    }
  }

  const where = fc.constantFrom('(body)', 'geometry', 'geometry.coordinates', 'properties', 'properties.name', 'properties.telefon', 'properties.kategorie', 'id', 'bbox');

  it('POST /api/features', async () => {
    await fc.assert(
      fc.asyncProperty(fragment, where, async (f, at) => {
        const marker = '"@@HOSTILE@@"';
        const template = JSON.stringify(aFeature());
        let text: string;
        if (at === '(body)') text = render(f, LIMIT);
        else {
          const document = JSON.parse(template) as Record<string, Record<string, unknown>>;
          const [first, second] = at.split('.') as [string, string | undefined];
          if (second === undefined) (document as Record<string, unknown>)[first] = '@@HOSTILE@@';
          else document[first]![second] = '@@HOSTILE@@';
          const shell = JSON.stringify(document);
          text = shell.replace(marker, () => render(f, LIMIT - shell.length));
        }
        const started = performance.now();
        const response = await api.request('POST', '/api/features', { token, rawBody: text, headers: { 'content-type': 'application/json' } });
        const ms = performance.now() - started;
        const shown = `${f.kind} at ${at} (${text.length} characters): ${response.status} in ${ms.toFixed(0)} ms`;
        expectNoServerError(response, shown);
        expect(ms, shown).toBeLessThan(1_000);
        expect(response.text.length, shown).toBeLessThan(64 * 1024);
      }),
      { numRuns: Math.max(20, Math.floor(RUNS / 10)) },
    );
  });
});
