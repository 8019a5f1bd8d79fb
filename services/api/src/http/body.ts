import express, { type RequestHandler } from 'express';
import { AppError } from '../../../shared/errors.js';

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
  return [requireJson, express.json({ limit: BODY_LIMIT_BYTES, type: JSON_MEDIA_TYPES, strict: true })];
}

function hasBody(req: express.Request): boolean {
  return req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] !== undefined && req.headers['content-length'] !== '0');
}
