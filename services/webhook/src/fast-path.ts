/**
 * POST /webhook answered by a plain node:http listener in front of Express (Express stays for
 * everything else: /health, /deployments, other methods and paths).
 *
 * Why: measured with bench/webhook.bench.ts (20 concurrent signed 1 MB deliveries), Express' part of
 * an acknowledgement — the router walk, swapping the prototypes of Node's request and response (which
 * slows Node's own HTTP and stream code for the whole upload), res.status().json() and the error
 * middleware chain — cost more CPU than the parsing, authentication and queueing of the delivery.
 * Reading and hashing the body is the unavoidable part (the benchmark's baseline); this path adds
 * as little as it can to it.
 *
 * Invariant: this path answers exactly as Express would, byte for byte apart from header order and
 * the Date. The decision is the same code (routes/webhook.ts webhookAcknowledger: body limits,
 * Content-Encoding refusal and capped inflation, one constant-time authentication, the exact-commit
 * and replay rules, logging without secrets); the failed-authentication limiter is the same
 * instance as Express' (one budget per address, counted on the answer); the client address is
 * Express' `req.ip` (the same `trust proxy` function); answers are written as res.json() and the
 * error middleware (sendProblem) write them. Only `POST` on exactly `/webhook` is taken; anything
 * else (a query string, a trailing slash, another method) goes to Express untouched.
 * test/webhook/acknowledgement-without-express.test.ts compares both answers for many requests.
 */
import type { ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import proxyAddress from 'proxy-addr';
import { AppError, sendProblem } from '../../shared/errors.js';
import type { AuthFailureLimiter } from './auth-failure-limiter.js';
import type { Acknowledge, Acknowledgement } from './routes/webhook.js';
import type { FastPath } from '../../shared/http-server.js';


export interface WebhookFastPathOptions {
  acknowledge: Acknowledge;
  limiter: AuthFailureLimiter;
  /** Express' compiled `trust proxy` setting (`app.get('trust proxy fn')`), for the client address. */
  trustProxy: (address: string, hop: number) => boolean;
  logger: Logger;
}

export function webhookFastPath({ acknowledge, limiter, trustProxy, logger }: WebhookFastPathOptions): FastPath {
  return (req, res, fallback) => {
    if (req.method !== 'POST' || req.url !== '/webhook') return fallback();
    // What Express' req.ip is: the address proxy-addr finds with the app's trust function.
    const clientAddress = (): string | undefined => proxyAddress(req, trustProxy);
    acknowledge(req, res, clientAddress)
      // A failure while writing the answer goes the same way as one while deciding it, as in Express.
      .then((answer) => writeJson(res, answer))
      .catch((error: unknown) => {
        const judged = limiter.judge(error, clientAddress());
        const problem = judged instanceof AppError ? judged : undefined;
        // As app.ts' error middleware: only a defect is logged here, and answered 500 without details.
        if (problem === undefined) logger.error({ err: judged, path: '/webhook' }, 'request failed');
        if (res.headersSent) {
          res.destroy();
          return;
        }
        sendProblem(res, problem);
      });
  };
}

/** What Express' res.status(status).json(body) writes (no ETag: app.ts disables it). */
function writeJson(res: ServerResponse, answer: Acknowledgement): void {
  const text = JSON.stringify(answer.body);
  res.statusCode = answer.status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(text));
  res.end(text);
}
