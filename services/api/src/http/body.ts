import { isUtf8 } from 'node:buffer';
import express, { type Request, type RequestHandler } from 'express';
import { AppError } from '../../../shared/errors.js';
import { LONE_SURROGATE } from '../../../shared/features/schema.js';
import { MAX_JSON_DEPTH, shapeViolation } from '../../../shared/json-shape.js';
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
  /** A request without a body passes with req.body undefined (else it is a 400). */
  optional?: boolean;
}

/**
 * Body handling for JSON endpoints, the one reader of every JSON body of the API: the media type and
 * its charset are checked before anything is read (415), the body is capped at 1 MiB (413) and read
 * as bytes, then parseJsonBody turns them into a value or a 400. The reader's own errors (size, aborted
 * request, Content-Encoding) are translated in http/problem.ts.
 */
export function jsonBody(options: JsonBodyOptions = {}): RequestHandler[] {
  const types = [...(options.types ?? JSON_MEDIA_TYPES)];
  const acceptHeaders = options.acceptHeaders ?? { 'Accept-Post': JSON_MEDIA_TYPES.join(', ') };
  const requireJson: RequestHandler = (req, _res, next) => {
    if (!hasBody(req)) {
      if (options.optional) return next();
      return next(new AppError('VALIDATION_FAILED', 'a JSON request body is required', { fields: [{ field: '(body)', message: 'is required' }] }));
    }
    if (!req.is(types)) {
      return next(new AppError('UNSUPPORTED_MEDIA_TYPE', `Content-Type must be ${types.join(' or ')}, not ${req.get('content-type') ?? '(none)'}`, { headers: acceptHeaders }));
    }
    const charset = charsetOf(req.get('content-type'));
    if (charset !== undefined && charset !== 'utf-8') {
      return next(new AppError('UNSUPPORTED_MEDIA_TYPE', `the request body must be UTF-8, not ${charset.slice(0, 40)}`, { headers: acceptHeaders }));
    }
    next();
  };
  const read = express.raw({ limit: BODY_LIMIT_BYTES, type: types });
  const parse: RequestHandler = (req, _res, next) => {
    if (!Buffer.isBuffer(req.body)) return next(); // no body (optional)
    readJsonValue(req.body).then((value) => {
      req.body = value;
      next();
    }, next);
  };
  return [requireJson, read, parse];
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

function hasBody(req: Request): boolean {
  return req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] !== undefined && req.headers['content-length'] !== '0');
}
