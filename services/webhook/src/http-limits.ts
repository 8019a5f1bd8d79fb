/**
 * The webhook's HTTP server and its limits on connections and time, which bound what a crowd of
 * slow senders can hold besides memory (memory is bounded by the body budget, body.ts):
 *
 * - at most `maxConnections` open connections (WEBHOOK_MAX_CONNECTIONS): Node closes the next one
 *   as soon as it is accepted, before a byte of it is read;
 * - a whole request, head and body, within `requestTimeoutMs` (WEBHOOK_REQUEST_TIMEOUT_SECONDS):
 *   then Node answers 408 and closes the connection, and the body's share of the budget is given
 *   back (body.ts, on the response's close). The head alone within 20 s, or the request timeout if
 *   that is shorter. Node checks both every `connectionsCheckingInterval` (30 s by default, which
 *   could nearly double a short timeout): here a quarter of the request timeout, at most 5 s.
 */
import { createServer, type RequestListener, type Server } from 'node:http';
import type { Logger } from 'pino';
import type { WebhookConfig } from './config.js';

const HEADERS_TIMEOUT_MS = 20_000;
/** Refused connections are logged as a count at most this often (a flood must not flood the log). */
const DROP_LOG_INTERVAL_MS = 10_000;

export function createWebhookHttpServer(listener: RequestListener, config: Pick<WebhookConfig, 'maxConnections' | 'requestTimeoutMs'>, logger: Logger): Server {
  const requestTimeout = config.requestTimeoutMs;
  const server = createServer(
    {
      requestTimeout,
      headersTimeout: Math.min(HEADERS_TIMEOUT_MS, requestTimeout),
      connectionsCheckingInterval: Math.max(250, Math.min(5_000, Math.floor(requestTimeout / 4))),
    },
    listener,
  );
  server.maxConnections = config.maxConnections;
  let dropped = 0;
  let reportAt = 0;
  server.on('drop', () => {
    dropped++;
    const now = Date.now();
    if (now < reportAt) return;
    logger.warn({ refused: dropped, maxConnections: config.maxConnections }, 'connections refused: WEBHOOK_MAX_CONNECTIONS reached');
    dropped = 0;
    reportAt = now + DROP_LOG_INTERVAL_MS;
  });
  return server;
}
