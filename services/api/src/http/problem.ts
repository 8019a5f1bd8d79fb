import { STATUS_CODES } from 'node:http';
import type { ErrorRequestHandler, RequestHandler } from 'express';
import type { Logger } from 'pino';
import { fromDatabaseError } from '../db/errors.js';
import { AppError, sendProblem } from '../../../shared/errors.js';
import { requestIdOf } from './server.js';

/**
 * The one error middleware: every failure leaves as application/problem+json (RFC 9457) with
 * status, code, title, detail and, for validation failures, the offending fields. Only AppError
 * messages are shown; anything else is logged with its stack and answered with a bare 500.
 */

/** body-parser / http-errors failures, by their `type`, as our codes. */
const PARSER_ERRORS: Record<string, { code: string; detail: string }> = {
  'entity.too.large': { code: 'PAYLOAD_TOO_LARGE', detail: 'the request body exceeds 1 MiB' },
  'entity.parse.failed': { code: 'MALFORMED_JSON', detail: 'the request body is not valid JSON (an object was expected)' },
  'entity.verify.failed': { code: 'MALFORMED_JSON', detail: 'the request body could not be verified' },
  'charset.unsupported': { code: 'UNSUPPORTED_MEDIA_TYPE', detail: 'the request body must be UTF-8' },
  'encoding.unsupported': { code: 'UNSUPPORTED_MEDIA_TYPE', detail: 'unsupported Content-Encoding' },
  'request.aborted': { code: 'BAD_REQUEST', detail: 'the request was aborted' },
  'request.size.invalid': { code: 'BAD_REQUEST', detail: 'the request body length does not match Content-Length' },
};

export function toAppError(error: unknown): AppError | undefined {
  if (error instanceof AppError) return error;
  const database = fromDatabaseError(error);
  if (database) return database;
  const httpError = error as { type?: unknown; status?: unknown; expose?: unknown } | null;
  const status = typeof httpError?.status === 'number' ? httpError.status : undefined;
  if (typeof httpError?.type === 'string' && PARSER_ERRORS[httpError.type]) {
    const known = PARSER_ERRORS[httpError.type]!;
    return new AppError(known.code, known.detail, { statusCode: status ?? 400, cause: error });
  }
  // Other client errors raised by Express itself (e.g. an undecodable %-escape in the path).
  if (status !== undefined && status >= 400 && status < 500) {
    return new AppError('BAD_REQUEST', STATUS_CODES[status] ?? 'bad request', { statusCode: status, cause: error });
  }
  return undefined;
}

export function problemHandler(logger: Logger): ErrorRequestHandler {
  return (error, req, res, _next) => {
    const appError = toAppError(error);
    const status = appError?.statusCode ?? 500;
    if (!appError || status >= 500) logger.error({ err: error, reqId: requestIdOf(req), method: req.method, url: req.originalUrl }, 'request failed');
    if (res.headersSent) {
      res.destroy();
      return;
    }
    sendProblem(res, appError);
  };
}

export const notFoundHandler: RequestHandler = (req, _res, next) => {
  next(new AppError('NOT_FOUND', `no route for ${req.method} ${req.path}`));
};
