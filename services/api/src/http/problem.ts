import { STATUS_CODES } from 'node:http';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { fromDatabaseError } from '../db/errors.js';
import { AppError, sendProblem } from '../../../shared/errors.js';

/**
 * The one error handler: every failure leaves as application/problem+json (RFC 9457) with status,
 * code, title, detail and, for validation failures, the offending fields. Only AppError messages are
 * shown; anything else is logged with its stack and answered with a bare 500.
 */

/** Fastify's own refusals of a request (before a route's handler runs), as our codes. */
const FASTIFY_ERRORS: Record<string, { code: string; detail: (request: FastifyRequest) => string }> = {
  FST_ERR_CTP_BODY_TOO_LARGE: {
    code: 'PAYLOAD_TOO_LARGE',
    // The route's own words when it has them (imports: "the file exceeds 32 MiB; split it").
    detail: (request) => (request.routeOptions.config as { tooLarge?: string } | undefined)?.tooLarge ?? `the request body exceeds ${(request.routeOptions.bodyLimit ?? 0) / 1024 / 1024} MiB`,
  },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { code: 'UNSUPPORTED_MEDIA_TYPE', detail: () => 'unsupported Content-Type' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { code: 'BAD_REQUEST', detail: () => 'the request body length does not match Content-Length' },
  FST_ERR_CTP_EMPTY_TYPE: { code: 'UNSUPPORTED_MEDIA_TYPE', detail: () => 'the Content-Type is empty' },
  FST_ERR_CTP_INVALID_TYPE: { code: 'UNSUPPORTED_MEDIA_TYPE', detail: () => 'the Content-Type is not valid' },
  FST_ERR_BAD_URL: { code: 'BAD_REQUEST', detail: () => 'the request URL is not valid (a malformed %-escape)' },
  FST_ERR_ASYNC_CONSTRAINT: { code: 'BAD_REQUEST', detail: () => 'bad request' },
};

export function toAppError(error: unknown, request?: FastifyRequest): AppError | undefined {
  if (error instanceof AppError) return error;
  const database = fromDatabaseError(error);
  if (database) return database;
  const fastifyError = error as Partial<FastifyError> | null;
  const known = typeof fastifyError?.code === 'string' ? FASTIFY_ERRORS[fastifyError.code] : undefined;
  const status = typeof fastifyError?.statusCode === 'number' ? fastifyError.statusCode : undefined;
  if (known && request) return new AppError(known.code, known.detail(request), { statusCode: status ?? 400, cause: error });
  // Other client errors raised by Fastify itself, or by the rate limiter's store.
  if (status !== undefined && status >= 400 && status < 500) {
    return new AppError('BAD_REQUEST', STATUS_CODES[status] ?? 'bad request', { statusCode: status, cause: error });
  }
  return undefined;
}

export function problemHandler(logger: Logger) {
  return (error: unknown, request: FastifyRequest, reply: FastifyReply): void => {
    const appError = toAppError(error, request);
    const status = appError?.statusCode ?? 500;
    if (!appError || status >= 500) logger.error({ err: error, reqId: request.id, method: request.method, url: request.url }, 'request failed');
    if (reply.sent || reply.raw.headersSent) {
      reply.raw.destroy();
      return;
    }
    // An answer that failed half-way (a tile's Content-Encoding, a replayed ETag) says nothing of it.
    for (const name of ['content-encoding', 'content-length', 'etag']) reply.removeHeader(name);
    void sendProblem(reply, appError);
  };
}

export function notFoundHandler(request: FastifyRequest, reply: FastifyReply): void {
  const path = request.url.split('?')[0] ?? request.url;
  void sendProblem(reply, new AppError('NOT_FOUND', `no route for ${request.method} ${path}`));
}
