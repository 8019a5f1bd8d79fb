import { isUtf8 } from 'node:buffer';
import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib';
import type { FastifyInstance, FastifyRequest, preParsingAsyncHookHandler } from 'fastify';
import { AppError } from '../../../shared/errors.js';
import { LONE_SURROGATE } from '../../../shared/features/schema.js';
import { MAX_JSON_DEPTH, shapeViolation } from '../../../shared/json-shape.js';
import type { Hook } from './fastify.js';
import { fieldName } from './validate.js';
import { setImmediate as nextTurn } from 'node:timers/promises';

export const BODY_LIMIT_BYTES = 1024 * 1024;
export { MAX_JSON_DEPTH };
/**
 * An object in a request body may have at most this many members (docs/api.md, "Limits"). The largest
 * object the API reads has 11 (a feature's properties); unknown members are refused anyway, and this
 * refuses a body of a hundred thousand of them before it is parsed and copied.
 */
export const MAX_JSON_MEMBERS = 1000;
/**
 * Arrays and objects in one body, at most (docs/api.md, "Limits"); a position is an array, so this is
 * also the most positions a geometry may have. A 0.95 MB polygon at six decimals has 45 000. Parsing
 * costs about 150 ns per array and twice that per object, plus the garbage collector's copying of them:
 * a megabyte of `[]` or `{}` (350 000 of them) held the event loop for up to 110 ms; 100 000 keep a
 * body's parse near 20 ms.
 */
export const MAX_JSON_CONTAINERS = 100_000;
export const JSON_MEDIA_TYPES = ['application/json', 'application/geo+json'];

export interface JsonBodyOptions {
  /** The media types taken (415 for any other); JSON_MEDIA_TYPES by default. */
  types?: readonly string[];
  /** Headers of the 415 answer (Accept-Post, Accept-Patch); Accept-Post of JSON_MEDIA_TYPES by default. */
  acceptHeaders?: Record<string, string>;
  /** A request without a body passes with request.body undefined (else it is a 400). */
  optional?: boolean;
}

/**
 * The one reader of request bodies (app.ts installs it for every route): the bytes, at most the
 * route's body limit (1 MiB, imports 32 MiB; Fastify answers 413 past it, http/problem.ts words it),
 * inflated when the client compressed them (gzip, deflate, br; the inflated bytes count against the
 * same limit), whatever the media type. What a route takes is its own choice: jsonBody() for JSON.
 */
export function installBodyReader(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (request, bytes, done) => {
    try {
      done(null, inflated(bytes as Buffer, request.headers['content-encoding'], request.routeOptions.bodyLimit ?? BODY_LIMIT_BYTES));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
}

function inflated(bytes: Buffer, encoding: string | undefined, limit: number): Buffer {
  const coding = encoding?.trim().toLowerCase() ?? 'identity';
  const inflate = coding === 'gzip' || coding === 'x-gzip' ? gunzipSync : coding === 'deflate' ? inflateSync : coding === 'br' ? brotliDecompressSync : undefined;
  if (coding === 'identity') return bytes;
  if (!inflate) throw new AppError('UNSUPPORTED_MEDIA_TYPE', `unsupported Content-Encoding: ${coding.slice(0, 40)}`);
  try {
    return inflate(bytes, { maxOutputLength: limit });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') throw new AppError('PAYLOAD_TOO_LARGE', `the request body exceeds ${limit / 1024 / 1024} MiB`);
    throw new AppError('BAD_REQUEST', `the request body is not valid ${coding} data`, { statusCode: 400, cause: error });
  }
}

/**
 * Body handling for JSON routes (spread into the route's options): the media type and its charset are
 * checked before anything is read (415), the bytes are read by the body reader above, then
 * parseJsonBody turns them into a value or a 400.
 */
export function jsonBody(options: JsonBodyOptions = {}): { preParsing: preParsingAsyncHookHandler; preValidation: Hook } {
  const types = new Set(options.types ?? JSON_MEDIA_TYPES);
  const acceptHeaders = options.acceptHeaders ?? { 'Accept-Post': JSON_MEDIA_TYPES.join(', ') };
  const listed = [...types].join(' or ');
  return {
    preParsing: async (request, _reply, payload) => {
      if (!hasBody(request)) {
        if (options.optional) return payload;
        throw new AppError('VALIDATION_FAILED', 'a JSON request body is required', { fields: [{ field: '(body)', message: 'is required' }] });
      }
      const contentType = request.headers['content-type'];
      if (contentType === undefined || !types.has(mediaTypeOf(contentType))) {
        throw new AppError('UNSUPPORTED_MEDIA_TYPE', `Content-Type must be ${listed}, not ${contentType?.slice(0, 100) ?? '(none)'}`, { headers: acceptHeaders });
      }
      const charset = charsetOf(contentType);
      if (charset !== undefined && charset !== 'utf-8') {
        throw new AppError('UNSUPPORTED_MEDIA_TYPE', `the request body must be UTF-8, not ${charset.slice(0, 40)}`, { headers: acceptHeaders });
      }
      return payload;
    },
    preValidation: async (request) => {
      if (!Buffer.isBuffer(request.body)) return; // no body (optional)
      request.body = await readJsonValue(request.body);
    },
  };
}

/** The media type of a Content-Type, lower case, without parameters. */
function mediaTypeOf(contentType: string): string {
  const end = contentType.indexOf(';');
  return (end === -1 ? contentType : contentType.slice(0, end)).trim().toLowerCase();
}

/**
 * A request body's bytes as a JSON value, in work linear in its length whatever it holds:
 * - UTF-8 only: bytes that are not valid UTF-8 are a 400 naming the member that holds them (they
 *   would otherwise be stored as U+FFFD, changed without a word); a leading BOM is dropped;
 * - an object or an array at the top (a bare scalar is malformed, as with body-parser's strict mode);
 * - at most MAX_JSON_DEPTH levels, MAX_JSON_MEMBERS members per object and MAX_JSON_CONTAINERS arrays
 *   and objects in all, counted on the text before anything is parsed;
 * - no lone UTF-16 surrogate ("\ud800" without its pair) in a string or a member name: it has no UTF-8
 *   form, and PostgreSQL would store U+FFFD instead.
 * Throws AppError (400 MALFORMED_JSON or VALIDATION_FAILED).
 */
export function parseJsonBody(bytes: Buffer): unknown {
  const wellFormed = isUtf8(bytes);
  let text = bytes.toString('utf8');
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  const start = firstNonSpace(text);
  const first = text.charCodeAt(start);
  if (first !== 0x7b && first !== 0x5b) throw malformed();
  const violation = shapeViolation(text, start, { maxDepth: MAX_JSON_DEPTH, maxMembers: MAX_JSON_MEMBERS, maxContainers: MAX_JSON_CONTAINERS });
  if (violation !== undefined) {
    const problem = {
      depth: `nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`,
      members: `has an object with more than ${MAX_JSON_MEMBERS} members`,
      containers: `has more than ${MAX_JSON_CONTAINERS} arrays and objects (a position is an array)`,
    }[violation.problem];
    const message = `${problem} (at character ${violation.at})`;
    throw new AppError('VALIDATION_FAILED', `invalid request body: ${message}`, { fields: [{ field: '(body)', message }] });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw malformed(error);
  }
  if (!wellFormed) {
    // Every malformed sequence became U+FFFD: the first string or name holding one is where it was.
    throw invalidText(findText(value, (s) => s.includes('\ufffd')), 'contains bytes that are not valid UTF-8');
  }
  // A lone surrogate can only come from a \ud800–\udfff escape; most bodies have none, and skip the walk.
  if (SURROGATE_ESCAPE.test(text)) {
    const path = findText(value, (s) => LONE_SURROGATE.test(s));
    if (path !== undefined) throw invalidText(path, 'contains a lone surrogate (\\ud800-\\udfff without its pair), which is not valid Unicode');
  }
  return value;
}

/** Bodies over this size are parsed in a turn of the event loop of their own (readJsonValue). */
const YIELD_OVER_BYTES = 64 * 1024;

/**
 * parseJsonBody, and for a large body a turn of the event loop before what comes next (validation):
 * parsing a body at the size limit takes tens of milliseconds, and so may its validation; apart, no
 * request holds the loop for others as long as both together would.
 */
export async function readJsonValue(bytes: Buffer): Promise<unknown> {
  const value = parseJsonBody(bytes);
  if (bytes.length > YIELD_OVER_BYTES) await nextTurn();
  return value;
}

const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;

function malformed(cause?: unknown): AppError {
  return new AppError('MALFORMED_JSON', 'the request body is not valid JSON (an object was expected)', { statusCode: 400, cause });
}

function invalidText(path: PropertyKey[] | undefined, message: string): AppError {
  const field = (path && fieldName(path)) || '(body)';
  return new AppError('VALIDATION_FAILED', `invalid request body: ${field}: ${message}`, { fields: [{ field, message }] });
}

function firstNonSpace(text: string): number {
  let i = 0;
  for (; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
  }
  return i;
}

/**
 * The path of the first string or member name for which `matches` holds, walking the value with a
 * stack of its own (never the call stack), or undefined.
 */
export function findText(value: unknown, matches: (s: string) => boolean): PropertyKey[] | undefined {
  interface Frame {
    value: unknown;
    key: PropertyKey | undefined;
    parent: Frame | undefined;
  }
  const pathOf = (frame: Frame, last?: PropertyKey): PropertyKey[] => {
    const path: PropertyKey[] = last === undefined ? [] : [last];
    for (let f: Frame | undefined = frame; f?.parent; f = f.parent) path.unshift(f.key!);
    return path;
  };
  const stack: Frame[] = [{ value, key: undefined, parent: undefined }];
  while (stack.length > 0) {
    const frame = stack.pop()!;
    const v = frame.value;
    if (typeof v === 'string') {
      if (matches(v)) return pathOf(frame);
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ value: v[i], key: i, parent: frame });
    } else if (v !== null && typeof v === 'object') {
      const keys = Object.keys(v);
      for (const key of keys) if (matches(key)) return pathOf(frame, key);
      for (let i = keys.length - 1; i >= 0; i--) stack.push({ value: (v as Record<string, unknown>)[keys[i]!], key: keys[i]!, parent: frame });
    }
  }
  return undefined;
}

/** The charset parameter of a Content-Type, lower case and unquoted, or undefined. */
function charsetOf(contentType: string | undefined): string | undefined {
  if (contentType === undefined) return undefined;
  const match = /;\s*charset\s*=\s*("?)([^";\s]*)\1/i.exec(contentType.slice(0, 256));
  return match ? match[2]!.toLowerCase() : undefined;
}

function hasBody(request: FastifyRequest): boolean {
  const { headers } = request;
  return headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0');
}
