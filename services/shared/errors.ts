import { STATUS_CODES } from 'node:http';
import type { FastifyReply } from 'fastify';

/**
 * The platform's one error type. Domain code throws an AppError with a named code; the error middleware
 * (services/api/src/http/problem.ts, services/webhook/src/app.ts) turns it into application/problem+json with sendProblem. Anything that is not an AppError is an
 * internal error: logged with its stack, answered with a bare 500 that leaks nothing.
 */
export const ErrorCodes = {
  VALIDATION_FAILED: 400,
  MALFORMED_JSON: 400,
  INVALID_QUERY: 400,
  UNAUTHENTICATED: 401,
  INVALID_TOKEN: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  FEATURE_NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  CONFLICT: 409,
  INVALID_STATE: 409,
  PRECONDITION_FAILED: 412,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  TOO_MANY_REQUESTS: 429,
  INTERNAL: 500,
  SERVICE_UNAVAILABLE: 503,
} as const;

export type ErrorCode = keyof typeof ErrorCodes;

/** One offending field of a validation failure: a JSON-pointer-like path and a message naming it. */
export interface FieldError {
  field: string;
  message: string;
}

export class AppError extends Error {
  override readonly name = 'AppError';
  readonly code: ErrorCode | (string & {});
  readonly statusCode: number;
  readonly fields?: FieldError[];
  /** Extra response headers, e.g. WWW-Authenticate on a 401. */
  readonly headers?: Record<string, string>;

  constructor(
    code: ErrorCode | (string & {}),
    message: string,
    options: { statusCode?: number; fields?: FieldError[]; headers?: Record<string, string>; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.statusCode = options.statusCode ?? (ErrorCodes as Record<string, number>)[code] ?? 500;
    if (options.fields) this.fields = options.fields;
    if (options.headers) this.headers = options.headers;
  }
}

/** An RFC 9457 problem document as every service of the platform answers it. */
export interface ProblemDocument {
  type: 'about:blank';
  title: string;
  status: number;
  code: string;
  detail: string;
  fields?: FieldError[];
}

/**
 * The problem+json body of a failure: an AppError shows its code, message and fields; anything else
 * (undefined here) is an internal error whose details stay in the log, never in the answer.
 */
export function problemDocument(error: AppError | undefined): ProblemDocument {
  if (!error) return { type: 'about:blank', title: STATUS_CODES[500] ?? 'Internal Server Error', status: 500, code: 'INTERNAL', detail: 'an internal error occurred; it has been logged' };
  return {
    type: 'about:blank',
    title: STATUS_CODES[error.statusCode] ?? 'Error',
    status: error.statusCode,
    code: error.code,
    detail: error.message,
    ...(error.fields ? { fields: error.fields } : {}),
  };
}

/** Sends a problem document with the error's headers (WWW-Authenticate, Allow, Retry-After) on a Fastify reply. */
export function sendProblem(reply: FastifyReply, error: AppError | undefined): FastifyReply {
  const body = problemDocument(error);
  for (const [name, value] of Object.entries(error?.headers ?? {})) reply.header(name, value);
  return reply.code(body.status).type('application/problem+json; charset=utf-8').send(JSON.stringify(body));
}
