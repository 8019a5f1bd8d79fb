/**
 * The webhook server's Express app, built from its dependencies (no listening, no signals here).
 * POST /webhook is answered by a node:http listener in front of it (fast-path.ts) unless
 * `fastPath: false`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { AppError, sendProblem } from '../../shared/errors.js';
import { AuthFailureLimiter, authFailureLimiter } from './auth-failure-limiter.js';
import { BodyBudget, BodyReader, InflateBudget } from './body.js';
import type { WebhookConfig } from './config.js';
import type { Deployer } from './deployments/deployer.js';
import type { DeploymentStore } from './deployments/store.js';
import { deploymentsRouter } from './routes/deployments.js';
import { webhookFastPath } from './fast-path.js';
import { webhookAcknowledger } from './routes/webhook.js';
import type { SecretBook } from './secret-book.js';
import { speculativeDigests } from './streaming-digest.js';

export interface WebhookAppDeps {
  config: Pick<
    WebhookConfig,
    'targets' | 'unmatchedBranchStatus' | 'maxBodyBytes' | 'inflateBudgetBytes' | 'bodyBudgetBytes' | 'adminToken' | 'authFailuresPerMinute' | 'trustProxy'
  >;
  secrets: SecretBook;
  deployer: Pick<Deployer, 'submit'>;
  store: DeploymentStore;
  logger: Logger;
  /**
   * Answer POST /webhook without Express (fast-path.ts). On by default; tests turn it off to
   * compare both answers.
   */
  fastPath?: boolean;
}

export function createApp(deps: WebhookAppDeps): express.Express {
  const { config, logger } = deps;
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', config.trustProxy);
  app.set('etag', false);

  // Liveness for container health checks and load balancers: no secrets, no state, no auth.
  app.get('/health', (_req, res) => {
    res.json({ status: 'ok' });
  });

  // One body budget per server, shared by every request (the fast path's and Express' alike).
  const bodies = new BodyReader(
    config.maxBodyBytes,
    new InflateBudget(config.inflateBudgetBytes),
    speculativeDigests(config.targets, deps.secrets),
    new BodyBudget(config.bodyBudgetBytes),
  );
  const acknowledge = webhookAcknowledger({ ...deps, bodies });
  app.post('/webhook', async (req, res) => {
    const answer = await acknowledge(req, res, () => req.ip);
    res.status(answer.status).json(answer.body);
  });
  app.all('/webhook', methodNotAllowed('POST'));
  app.use(deploymentsRouter({ adminToken: config.adminToken, store: deps.store }));
  app.all(['/deployments', '/deployments/:id'], methodNotAllowed('GET'));

  app.use((_req: Request, _res: Response) => {
    throw new AppError('NOT_FOUND', 'no such endpoint');
  });
  // After authentication has failed, never before: see auth-failure-limiter.ts.
  const limiter = new AuthFailureLimiter(config.authFailuresPerMinute);
  app.use(authFailureLimiter(limiter));
  app.use((error: unknown, req: Request, res: Response, _next: NextFunction) => {
    const problem = toAppError(error);
    if (problem === undefined) logger.error({ err: error, path: req.path }, 'request failed');
    sendProblem(res, problem);
  });

  if (deps.fastPath ?? true) {
    const fast = webhookFastPath({ acknowledge, limiter, trustProxy: app.get('trust proxy fn') as (address: string, hop: number) => boolean, logger });
    // In front of Express: the app function calls app.handle for every request, so the fast path
    // sees each one first and hands all it does not answer to Express unchanged. (app.handle is
    // Express' entry point, missing from its type definitions; services/api/src/app.ts does the same.)
    const internals = app as unknown as { handle(req: IncomingMessage, res: ServerResponse, done?: unknown): void };
    const handle = internals.handle.bind(app);
    internals.handle = (req, res, done) => fast(req, res, () => handle(req, res, done));
  }
  return app;
}

function methodNotAllowed(allowed: string) {
  return (_req: Request, res: Response): void => {
    res.setHeader('Allow', allowed);
    throw new AppError('METHOD_NOT_ALLOWED', `use ${allowed}`);
  };
}

/** Everything that is not an AppError is an internal error that leaks nothing. */
function toAppError(error: unknown): AppError | undefined {
  return error instanceof AppError ? error : undefined;
}
