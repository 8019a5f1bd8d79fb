/**
 * The webhook server's Fastify app, built from its dependencies (no listening, no signals here).
 *
 * Request path: Node's HTTP server (http-limits.ts: connection cap, request and header timeouts;
 * malformed requests are answered by Node itself, below) → Fastify's router → one plugin per
 * feature: `routes/webhook.ts` (POST /webhook, the acknowledgement) and `routes/deployments.ts`
 * (GET /deployments, admin) → the error handler here, which counts failed authentication
 * (auth-failure-limiter.ts) and answers application/problem+json.
 *
 * Request bodies are never read by Fastify: no content-type parser consumes them. POST /webhook
 * reads its body itself (body.ts: the exact bytes, for the HMAC, under the body budget), and every
 * other route ignores it, as before the move.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import proxyAddress from 'proxy-addr';
import { AppError, sendProblem } from '../../shared/errors.js';
import { AuthFailureLimiter, type FailureCounter } from './auth-failure-limiter.js';
import type { WebhookConfig } from './config.js';
import type { Deployer } from './deployments/deployer.js';
import type { DeploymentJournal } from './deployments/journal.js';
import { createWebhookHttpServer } from './http-limits.js';
import { deploymentRoutes } from './routes/deployments.js';
import { webhookRoutes } from './routes/webhook.js';
import type { SecretBook } from './secret-book.js';

export interface WebhookAppDeps {
  config: Pick<
    WebhookConfig,
    | 'targets'
    | 'unmatchedBranchStatus'
    | 'maxBodyBytes'
    | 'inflateBudgetBytes'
    | 'bodyBudgetBytes'
    | 'adminToken'
    | 'authFailuresPerMinute'
    | 'trustProxy'
    | 'maxConnections'
    | 'requestTimeoutMs'
  >;
  secrets: SecretBook;
  deployer: Pick<Deployer, 'submit'>;
  /** Where GET /deployments reads: the file journal, or PostgreSQL shared by every replica. */
  journal: Pick<DeploymentJournal, 'get' | 'list'>;
  /** Where failed authentications are counted; default: this process' memory. */
  failureCounter?: FailureCounter;
  logger: Logger;
}

export type WebhookApp = FastifyInstance<Server, IncomingMessage, ServerResponse>;

/** Paths and parameters are no longer than a request head may be (Node's 16 KiB). */
const MAX_PARAM_LENGTH = 16 * 1024;

export function createApp(deps: WebhookAppDeps): WebhookApp {
  const { config, logger } = deps;
  const app: WebhookApp = Fastify({
    serverFactory: (handler) => createWebhookHttpServer(handler, config, logger),
    trustProxy: trustFunction(config.trustProxy),
    // No request log: a line per delivery costs more than the rest of the acknowledgement, and
    // the routes log what matters (without secrets) themselves.
    logger: false,
    // As Express routed: case-insensitive, a trailing slash ignored (/webhook/ is /webhook).
    routerOptions: { caseSensitive: false, ignoreTrailingSlash: true, maxParamLength: MAX_PARAM_LENGTH },
    // A path that is not valid percent-encoding names no endpoint.
    frameworkErrors: (_error, _request, reply) => void sendProblem(reply, new AppError('NOT_FOUND', 'no such endpoint')),
  });
  // What Node answers before routing stays Node's: a malformed request, a head over the size limit
  // or a request timeout gets Node's bare 400/431/408 with Connection: close. Fastify's listener
  // would answer them in JSON, even on a connection whose response has already begun.
  app.server.removeAllListeners('clientError');

  // Nothing is parsed for the routes: POST /webhook reads the exact bytes itself (body.ts), and
  // whatever else arrives with a body is never looked at.
  // The media types providers send are named as well as caught by '*': Fastify caches the parser it
  // finds for a Content-Type only when it is registered under that type, and would otherwise parse
  // the header again on every delivery to fall through to the catch-all.
  const readNothing = (_request: unknown, _payload: unknown, done: (error: null) => void) => done(null);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(['application/json', 'application/x-www-form-urlencoded'], readNothing);
  app.addContentTypeParser('*', readNothing);

  // After authentication has failed, never before: see auth-failure-limiter.ts. One count for
  // every route (a wrong admin token counts like a wrong signature).
  // With a database the count is one query away: the answer is sent when it is known.
  const limiter = new AuthFailureLimiter(config.authFailuresPerMinute, deps.failureCounter, logger);
  const answer = (judged: unknown, request: FastifyRequest, reply: FastifyReply): void => {
    const problem = toAppError(judged);
    if (problem === undefined) logger.error({ err: judged, path: request.url.split('?')[0] }, 'request failed');
    if (reply.raw.headersSent) reply.raw.destroy();
    else void sendProblem(reply, problem);
  };
  app.setErrorHandler((error, request, reply) => {
    const judged = limiter.judge(error, request.ip);
    if (judged instanceof Promise) void judged.then((decided) => answer(decided, request, reply));
    else answer(judged, request, reply);
  });
  app.setNotFoundHandler(() => {
    throw new AppError('NOT_FOUND', 'no such endpoint');
  });

  // Liveness for container health checks and load balancers: no secrets, no state, no auth.
  app.get('/health', async () => ({ status: 'ok' }));
  void app.register(webhookRoutes(deps));
  void app.register(deploymentRoutes({ adminToken: config.adminToken, journal: deps.journal }));
  return app;
}


/**
 * WEBHOOK_TRUST_PROXY with the meaning it has always had (Express' `trust proxy`): true trusts every
 * proxy, a number that many hops, anything else a comma-separated list of addresses, subnets or
 * proxy-addr's names (loopback, linklocal, uniquelocal). Fastify alone would trust no hop for a number.
 */
function trustFunction(setting: boolean | number | string): (address: string, hop: number) => boolean {
  if (setting === true) return () => true;
  if (setting === false) return () => false;
  if (typeof setting === 'number') return (_address, hop) => hop < setting;
  return proxyAddress.compile(setting.split(',').map((value) => value.trim()));
}

/**
 * The answer to a failure: an AppError as it is; a 4xx of Fastify's own (a Content-Type that is not
 * a media type) as the AppError of its status; anything else is an internal error that leaks nothing.
 */
function toAppError(error: unknown): AppError | undefined {
  if (error instanceof AppError) return error;
  const status = (error as Partial<FastifyError> | null)?.statusCode;
  if (status === 415) return new AppError('UNSUPPORTED_MEDIA_TYPE', 'the Content-Type header is not a media type', { headers: { Connection: 'close' } });
  return undefined;
}
