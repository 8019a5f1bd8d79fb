/**
 * The push payload: JSON, or form-encoded with the JSON in a `payload` field (GitHub's and Gitea's
 * "application/x-www-form-urlencoded" content type). Only the fields routing needs are validated.
 *
 * Arrays and objects nest at most MAX_JSON_DEPTH levels (services/shared/json-shape.ts), checked as
 * the body is scanned, before anything is parsed.
 *
 * A JSON object body is not turned into a string and parsed as a whole: scanTopLevel walks its
 * structure in the buffer (strings are skipped with a byte search, so a 1 MB delivery costs a
 * fraction of a millisecond instead of a string copy and a full parse) and decodes only the
 * top-level members asked for. The structure is still checked to the end — an unterminated body,
 * a trailing comma or a stray byte after the object is malformed (400) — and only top-level
 * members count, so a `ref` nested anywhere else is never mistaken for the pushed one; with a
 * repeated member the last one wins, as with JSON.parse.
 */
import { isAscii } from 'node:buffer';
import { z } from 'zod';
import { MAX_JSON_DEPTH, shapeViolation } from '../../shared/json-shape.js';
import { setImmediate as nextTurn } from 'node:timers/promises';

/** `after` of a deleted branch: forty zeros (or sixty-four in SHA-256 repositories). */
export const isDeletionCommit = (sha: string): boolean => /^0+$/.test(sha);

const PushSchema = z.looseObject({
  ref: z.string().min(1).max(1024),
  after: z.string().regex(/^([0-9a-f]{40}|[0-9a-f]{64})$/i, 'a 40 or 64 character commit id'),
});

export type PushPayload = z.infer<typeof PushSchema>;

export class MalformedPayload extends Error {
  override readonly name = 'MalformedPayload';
}

/**
 * A form-encoded push (`payload=<JSON>`) is decoded and parsed whole, in one block of the event loop:
 * URLSearchParams alone takes about 200 ms for 25 MiB. So such a body is at most this large; a larger
 * push must come as application/json, which is scanned in slices (scanSteps).
 */
export const MAX_FORM_BODY_BYTES = 1024 * 1024;
/** Arrays and objects in a form payload, at most, as in the API's bodies (its parse stays near 20 ms). */
const MAX_FORM_CONTAINERS = 100_000;

/** Decode the body into a JSON value; throws MalformedPayload on anything that is not. */
export function decodeBody(rawBody: Buffer, contentType: string | undefined): unknown {
  // Pushes are nearly always pure ASCII; for ASCII, latin1 decoding gives the very same string
  // as UTF-8 at a quarter of the cost (a copy instead of a validating decode).
  const form = (contentType ?? '').toLowerCase().startsWith('application/x-www-form-urlencoded');
  if (form && rawBody.length > MAX_FORM_BODY_BYTES) {
    throw new MalformedPayload(`a form-encoded push is at most ${MAX_FORM_BODY_BYTES / 1024 / 1024} MiB; send larger ones as application/json`);
  }
  const text = isAscii(rawBody) ? rawBody.toString('latin1') : rawBody.toString('utf8');
  let json = text;
  if (form) {
    const payload = new URLSearchParams(text).get('payload');
    if (payload === null) throw new MalformedPayload('form body without a payload field');
    json = payload;
  }
  const violation = shapeViolation(json, 0, { maxDepth: MAX_JSON_DEPTH, maxMembers: Number.MAX_SAFE_INTEGER, maxContainers: MAX_FORM_CONTAINERS });
  if (violation?.problem === 'containers') throw new MalformedPayload(`body has more than ${MAX_FORM_CONTAINERS} arrays and objects`);
  if (violation) throw tooDeep();
  try {
    return JSON.parse(json) as unknown;
  } catch {
    throw new MalformedPayload('body is not valid JSON');
  }
}

const tooDeep = (): MalformedPayload => new MalformedPayload(`body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`);

/** The JSON text of a ref of 1 024 characters, each written as a 6-byte \u escape, fits in this. */
const MAX_ROUTED_VALUE_BYTES = 8 * 1024;

const MAX_SCALAR_BYTES = 1000;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

const isSpace = (c: number | undefined): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
const notJson = (): MalformedPayload => new MalformedPayload('body is not valid JSON');

function skipSpace(buf: Buffer, i: number): number {
  while (isSpace(buf[i])) i++;
  return i;
}

/**
 * Where the scan stands: it yields (to let the event loop run) once it has passed `yieldAt`, so a
 * body at the 25 MiB limit is walked in slices of SLICE_BYTES, not in one block of 200 ms.
 */
interface Progress {
  yieldAt: number;
}
const SLICE_BYTES = 1024 * 1024;
type Steps<T> = Generator<void, T, void>;

function* maybeYield(progress: Progress, i: number): Steps<void> {
  if (i < progress.yieldAt) return;
  progress.yieldAt = i + SLICE_BYTES;
  yield;
}

/** Index just after the string whose opening quote is at `start`. */
function* stringEnd(buf: Buffer, start: number, progress: Progress): Steps<number> {
  let from = start + 1;
  for (;;) {
    const quote = buf.indexOf(QUOTE, from);
    if (quote < 0) throw notJson();
    let backslashes = 0;
    while (buf[quote - 1 - backslashes] === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return quote + 1;
    from = quote + 1;
    yield* maybeYield(progress, from);
  }
}

/** Index just after the JSON value starting at `i`; a value longer than `maxBytes` is refused as soon as it is. */
function* valueEnd(buf: Buffer, i: number, progress: Progress, maxBytes = Infinity, tooLong: () => Error = notJson): Steps<number> {
  const start = i;
  const first = buf[i];
  if (first === QUOTE) {
    const end = yield* stringEnd(buf, i, progress);
    if (end - start > maxBytes) throw tooLong();
    return end;
  }
  if (first === OPEN_OBJECT || first === OPEN_ARRAY) {
    const closers: number[] = [];
    for (; i < buf.length; i++) {
      if (i - start > maxBytes) throw tooLong();
      if (i >= progress.yieldAt) yield* maybeYield(progress, i);
      const c = buf[i]!;
      if (c === QUOTE) i = (yield* stringEnd(buf, i, progress)) - 1;
      else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
        // The member's own level plus the top-level object: at most MAX_JSON_DEPTH in all.
        if (closers.length + 1 >= MAX_JSON_DEPTH) throw tooDeep();
        closers.push(c === OPEN_OBJECT ? CLOSE_OBJECT : CLOSE_ARRAY);
      } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
        if (closers.pop() !== c) throw notJson();
        if (closers.length === 0) return i + 1;
      }
    }
    throw notJson();
  }
  // A number or a literal: up to the next delimiter, checked by JSON.parse; no number of a push is
  // longer than MAX_SCALAR_BYTES (as Jackson's maxNumberLength, a thousand digits).
  let end = i;
  const limit = Math.min(buf.length, i + Math.min(maxBytes, MAX_SCALAR_BYTES) + 1);
  while (end < limit && !isSpace(buf[end]) && buf[end] !== COMMA && buf[end] !== CLOSE_OBJECT && buf[end] !== CLOSE_ARRAY) end++;
  if (end === i) throw notJson();
  if (end - start > maxBytes) throw tooLong();
  if (end - start > MAX_SCALAR_BYTES) throw new MalformedPayload(`body has a number longer than ${MAX_SCALAR_BYTES} characters`);
  parseJson(buf.toString('latin1', i, end));
  return end;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw notJson();
  }
}

/**
 * The top-level members `names` of a JSON object body (others are checked for structure and
 * skipped). Throws MalformedPayload. The walk yields after each slice of the body (see Progress).
 */
function* scanSteps(buf: Buffer, names: readonly string[]): Steps<Record<string, unknown>> {
  const progress: Progress = { yieldAt: SLICE_BYTES };
  let i = skipSpace(buf, 0);
  // A push payload is an object: anything else is refused without parsing it.
  if (buf[i] !== OPEN_OBJECT) throw new MalformedPayload('a push payload must be a JSON object');
  const wanted = new Set(names);
  const found: Record<string, unknown> = {};
  i = skipSpace(buf, i + 1);
  if (buf[i] === CLOSE_OBJECT) i++;
  else {
    for (let members = 1; ; members++) {
      if (members > MAX_TOP_LEVEL_MEMBERS) throw new MalformedPayload(`a push payload has at most ${MAX_TOP_LEVEL_MEMBERS} top-level members`);
      if (i >= progress.yieldAt) yield* maybeYield(progress, i);
      if (buf[i] !== QUOTE) throw notJson();
      const keyEnd = yield* stringEnd(buf, i, progress);
      const key = memberName(buf, i, keyEnd);
      i = skipSpace(buf, keyEnd);
      if (buf[i] !== COLON) throw notJson();
      const start = skipSpace(buf, i + 1);
      if (wanted.has(key)) {
        // The routed members are short strings (PushSchema): a longer value is refused unparsed.
        i = yield* valueEnd(buf, start, progress, MAX_ROUTED_VALUE_BYTES, () => new MalformedPayload(`push payload: ${key}: is longer than any ref or commit id`));
        found[key] = parseJson(buf.toString('utf8', start, i));
      } else {
        i = yield* valueEnd(buf, start, progress);
      }
      i = skipSpace(buf, i);
      if (buf[i] === COMMA) {
        i = skipSpace(buf, i + 1);
        continue;
      }
      if (buf[i] !== CLOSE_OBJECT) throw notJson();
      i++;
      break;
    }
  }
  if (skipSpace(buf, i) !== buf.length) throw notJson();
  return found;
}

/**
 * A member name: its bytes when it has no escape (the common case, without a parse), else JSON's
 * reading of it; a name too long to be a routed one is not decoded at all.
 */
function memberName(buf: Buffer, start: number, end: number): string {
  if (end - start > MAX_NAME_BYTES) return '';
  const raw = buf.subarray(start + 1, end - 1);
  return raw.includes(BACKSLASH) ? (parseJson(buf.toString('utf8', start, end)) as string) : raw.toString('utf8');
}
/**
 * GitHub's and GitLab's push payloads have about twenty top-level members; a body with more than this
 * is not a push, and is refused before each of a million members is read.
 */
const MAX_TOP_LEVEL_MEMBERS = 1000;
/** Routed names ('ref', 'after') are short; even written wholly in \u escapes they fit in this. */
const MAX_NAME_BYTES = 64;

/** scanSteps in one go (for small bodies and tests). */
export function scanTopLevel(buf: Buffer, names: readonly string[]): Record<string, unknown> {
  const steps = scanSteps(buf, names);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/** scanSteps with a turn of the event loop between its slices. */
async function scanTopLevelYielding(buf: Buffer, names: readonly string[]): Promise<Record<string, unknown>> {
  const steps = scanSteps(buf, names);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
    await nextTurn();
  }
}

/** The members routing needs, from a body of either content type. */
export async function readPushFields(rawBody: Buffer, contentType: string | undefined): Promise<unknown> {
  const form = (contentType ?? '').toLowerCase().startsWith('application/x-www-form-urlencoded');
  return form ? decodeBody(rawBody, contentType) : scanTopLevelYielding(rawBody, ['ref', 'after']);
}

/** Validate a decoded body as a push; throws MalformedPayload naming the bad field. */
export function parsePush(body: unknown): PushPayload {
  const result = PushSchema.safeParse(body);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new MalformedPayload(`push payload: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  return result.data;
}
