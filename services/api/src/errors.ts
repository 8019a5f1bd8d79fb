/**
 * The API's one error type. Domain code throws an AppError with a named code; the error middleware
 * (http/problem.ts) turns it into application/problem+json. Anything that is not an AppError is an
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
