import { randomUUID } from 'node:crypto';
import { createServer, STATUS_CODES, type IncomingMessage, type RequestListener, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { AppError, problemDocument } from '../../../shared/errors.js';

/**
 * The API's HTTP server: the documented timeouts, and problem+json also for the answers Node gives
 * before the router sees a request (a malformed request line, an unknown method, headers or URL over
 * 16 KiB, a request that stalls).
 */

/** Documented in docs/api.md ("Limits"): all headers within 10 s, the whole request within 30 s. */
export const HEADERS_TIMEOUT_MS = 10_000;
export const REQUEST_TIMEOUT_MS = 30_000;

export interface ApiServerOptions {
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
  logger?: Logger;
}

export function createApiServer(app: RequestListener, options: ApiServerOptions = {}): Server {
  const requestTimeout = options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS;
  const server = createServer(
    {
      requestTimeout,
      headersTimeout: Math.min(options.headersTimeoutMs ?? HEADERS_TIMEOUT_MS, requestTimeout),
      // Node checks the two timeouts on this interval (30 s by default), so a stalled request used to
      // be cut anywhere between the timeout and the timeout plus 30 s. Once a second keeps it close.
      connectionsCheckingInterval: Math.min(1_000, requestTimeout),
    },
    (req, res) => {
      // Every request gets its id before anything else sees it: the answer carries it (the app's
      // onSend hook, http/fastify.ts answerHeaders), and every log line about the request
      // (problem.ts) names it, so a failure a user reports can be found. Not res.setHeader here: a
      // header set on Node's response before Fastify's writeHead sends Node down its slow path
      // (every header copied into a dictionary, then enumerated again), 3–4 µs per answer.
      (req as IncomingMessage & { id?: string }).id = requestIdFrom(req.headers['x-request-id']);
      app(req, res);
    },
  );
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => answerClientError(error, socket, options.logger));
  return server;
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** A proxy's X-Request-Id when it is a plain token of at most 128 characters, else a new UUID. */
function requestIdFrom(header: string | string[] | undefined): string {
  return typeof header === 'string' && header.length <= 128 && REQUEST_ID.test(header) ? header : randomUUID();
}

/** The id createApiServer gave the request (undefined for an app served some other way). */
export function requestIdOf(req: IncomingMessage): string | undefined {
  return (req as IncomingMessage & { id?: string }).id;
}

/** Node's parser and timeout errors as the status Node would answer with, and our code. */
export function clientErrorStatus(error: NodeJS.ErrnoException): { status: number; code: string; detail: string } {
  switch (error.code) {
    case 'HPE_HEADER_OVERFLOW':
      return { status: 431, code: 'HEADERS_TOO_LARGE', detail: 'the request line and headers exceed 16 KiB' };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { status: 408, code: 'REQUEST_TIMEOUT', detail: 'the request did not arrive in time (headers within 10 s, the whole request within 30 s)' };
    case 'HPE_INVALID_METHOD':
      return { status: 400, code: 'BAD_REQUEST', detail: 'the request method is not one HTTP knows' };
    default:
      return { status: 400, code: 'BAD_REQUEST', detail: 'the request is not well-formed HTTP/1.1' };
  }
}

function answerClientError(error: NodeJS.ErrnoException, socket: Duplex, logger: Logger | undefined): void {
  // A connection the client reset, or one whose answer has begun: nothing can be said any more.
  const pending = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (error.code === 'ECONNRESET' || !socket.writable || pending?.headersSent) {
    socket.destroy();
    return;
  }
  const { status, code, detail } = clientErrorStatus(error);
  logger?.debug({ code: error.code, status }, 'client error before routing');
  const body = JSON.stringify(problemDocument(new AppError(code, detail, { statusCode: status })));
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}\r\n` +
      'Content-Type: application/problem+json; charset=utf-8\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\n` +
      'Connection: close\r\n' +
      '\r\n' +
      body,
  );
}

/** The app readied (its plugins loaded) and its HTTP server, to listen on (boot.ts, tests). */
export async function serveApp(app: FastifyInstance): Promise<Server> {
  await app.ready();
  return app.server;
}
