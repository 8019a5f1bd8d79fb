/**
 * The push payload: JSON, or form-encoded with the JSON in a `payload` field (GitHub's and Gitea's
 * "application/x-www-form-urlencoded" content type). Only the fields routing needs are validated.
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

/** Decode the body into a JSON value; throws MalformedPayload on anything that is not. */
export function decodeBody(rawBody: Buffer, contentType: string | undefined): unknown {
  // Pushes are nearly always pure ASCII; for ASCII, latin1 decoding gives the very same string
  // as UTF-8 at a quarter of the cost (a copy instead of a validating decode).
  const text = isAscii(rawBody) ? rawBody.toString('latin1') : rawBody.toString('utf8');
  let json = text;
  if ((contentType ?? '').toLowerCase().startsWith('application/x-www-form-urlencoded')) {
    const payload = new URLSearchParams(text).get('payload');
    if (payload === null) throw new MalformedPayload('form body without a payload field');
    json = payload;
  }
  try {
    return JSON.parse(json) as unknown;
  } catch {
    throw new MalformedPayload('body is not valid JSON');
  }
}

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

/** Index just after the string whose opening quote is at `start`. */
function stringEnd(buf: Buffer, start: number): number {
  let from = start + 1;
  for (;;) {
    const quote = buf.indexOf(QUOTE, from);
    if (quote < 0) throw notJson();
    let backslashes = 0;
    while (buf[quote - 1 - backslashes] === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return quote + 1;
    from = quote + 1;
  }
}

/** Index just after the JSON value starting at `i`. */
function valueEnd(buf: Buffer, i: number): number {
  const first = buf[i];
  if (first === QUOTE) return stringEnd(buf, i);
  if (first === OPEN_OBJECT || first === OPEN_ARRAY) {
    const closers: number[] = [];
    for (; i < buf.length; i++) {
      const c = buf[i]!;
      if (c === QUOTE) i = stringEnd(buf, i) - 1;
      else if (c === OPEN_OBJECT) closers.push(CLOSE_OBJECT);
      else if (c === OPEN_ARRAY) closers.push(CLOSE_ARRAY);
      else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
        if (closers.pop() !== c) throw notJson();
        if (closers.length === 0) return i + 1;
      }
    }
    throw notJson();
  }
  // A number or a literal: up to the next delimiter, checked by JSON.parse (a few bytes).
  let end = i;
  while (end < buf.length && !isSpace(buf[end]) && buf[end] !== COMMA && buf[end] !== CLOSE_OBJECT && buf[end] !== CLOSE_ARRAY) end++;
  if (end === i) throw notJson();
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
 * skipped), or the whole decoded body when it is not an object. Throws MalformedPayload.
 */
export function scanTopLevel(buf: Buffer, names: readonly string[]): unknown {
  let i = skipSpace(buf, 0);
  if (buf[i] !== OPEN_OBJECT) return decodeBody(buf, 'application/json');
  const wanted = new Set(names);
  const found: Record<string, unknown> = {};
  i = skipSpace(buf, i + 1);
  if (buf[i] === CLOSE_OBJECT) i++;
  else {
    for (;;) {
      if (buf[i] !== QUOTE) throw notJson();
      const keyEnd = stringEnd(buf, i);
      const key = parseJson(buf.toString('utf8', i, keyEnd)) as string;
      i = skipSpace(buf, keyEnd);
      if (buf[i] !== COLON) throw notJson();
      const start = skipSpace(buf, i + 1);
      i = valueEnd(buf, start);
      if (wanted.has(key)) found[key] = parseJson(buf.toString('utf8', start, i));
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

/** The members routing needs, from a body of either content type. */
export function readPushFields(rawBody: Buffer, contentType: string | undefined): unknown {
  const form = (contentType ?? '').toLowerCase().startsWith('application/x-www-form-urlencoded');
  return form ? decodeBody(rawBody, contentType) : scanTopLevel(rawBody, ['ref', 'after']);
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
