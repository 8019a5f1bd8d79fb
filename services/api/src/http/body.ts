import express, { type RequestHandler } from 'express';
import { AppError } from '../../../shared/errors.js';
import { LONE_SURROGATE } from '../../../shared/features/schema.js';
import { fieldName } from './validate.js';

export const BODY_LIMIT_BYTES = 1024 * 1024;
export const JSON_MEDIA_TYPES = ['application/json', 'application/geo+json'];

/**
 * Body handling for JSON endpoints: the media type is checked before anything is read (415), the
 * body is capped at 1 MiB (413) and parsed strictly (objects and arrays only; malformed → 400).
 * The parser's own errors are translated in http/problem.ts.
 */
export function jsonBody(): RequestHandler[] {
  const requireJson: RequestHandler = (req, _res, next) => {
    if (req.is(JSON_MEDIA_TYPES)) return next();
    if (!hasBody(req)) return next(new AppError('VALIDATION_FAILED', 'a JSON request body is required', { fields: [{ field: '(body)', message: 'is required' }] }));
    next(
      new AppError('UNSUPPORTED_MEDIA_TYPE', `Content-Type must be ${JSON_MEDIA_TYPES.join(' or ')}, not ${req.get('content-type') ?? '(none)'}`, {
        headers: { 'Accept-Post': JSON_MEDIA_TYPES.join(', ') },
      }),
    );
  };
  const refuseLoneSurrogates: RequestHandler = (req, _res, next) => next(loneSurrogateError(req.body));
  return [requireJson, express.json({ limit: BODY_LIMIT_BYTES, type: JSON_MEDIA_TYPES, strict: true }), refuseLoneSurrogates];
}

/** The 400 for a parsed body holding a lone surrogate, else undefined. */
export function loneSurrogateError(body: unknown): AppError | undefined {
  const path = loneSurrogatePath(body, []);
  if (path === undefined) return undefined;
  const field = fieldName(path) || '(body)';
  const message = 'contains a lone surrogate (\\ud800-\\udfff without its pair), which is not valid Unicode';
  return new AppError('VALIDATION_FAILED', `invalid request body: ${field}: ${message}`, { fields: [{ field, message }] });
}

/**
 * Where a JSON value holds a lone UTF-16 surrogate (a "\ud800" escape without its pair), in a string
 * or a member name. It has no UTF-8 form, so it would reach the database as U+FFFD, changed without a
 * word; every JSON body is checked here, whatever the route's schema.
 */
export function loneSurrogatePath(value: unknown, path: PropertyKey[]): PropertyKey[] | undefined {
  if (typeof value === 'string') return LONE_SURROGATE.test(value) ? path : undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = loneSurrogatePath(value[i], [...path, i]);
      if (found) return found;
    }
    return undefined;
  }
  if (value !== null && typeof value === 'object') {
    for (const [key, member] of Object.entries(value)) {
      if (LONE_SURROGATE.test(key)) return [...path, key];
      const found = loneSurrogatePath(member, [...path, key]);
      if (found) return found;
    }
  }
  return undefined;
}

function hasBody(req: express.Request): boolean {
  return req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] !== undefined && req.headers['content-length'] !== '0');
}
