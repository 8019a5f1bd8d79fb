/**
 * The webhook server's Express app, built from its dependencies (no listening, no signals here).
 */
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { AppError, sendProblem } from '../../shared/errors.js';
import { authFailureLimiter } from './auth-failure-limiter.js';
import { InflateBudget, rawBody } from './body.js';
import type { WebhookConfig } from './config.js';
import type { Deployer } from './deployments/deployer.js';
import type { DeploymentStore } from './deployments/store.js';
import { deploymentsRouter } from './routes/deployments.js';
import { webhookHandler } from './routes/webhook.js';
import type { SecretBook } from './secret-book.js';
import { speculativeDigests } from './streaming-digest.js';

export interface WebhookAppDeps {
  config: Pick<
    WebhookConfig,
    'targets' | 'unmatchedBranchStatus' | 'maxBodyBytes' | 'inflateBudgetBytes' | 'adminToken' | 'authFailuresPerMinute' | 'trustProxy'
  >;
  secrets: SecretBook;
  deployer: Pick<Deployer, 'submit'>;
  store: DeploymentStore;
  logger: Logger;
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

  const digestWhileReading = speculativeDigests(config.targets, deps.secrets);
  app.post('/webhook', rawBody(config.maxBodyBytes, new InflateBudget(config.inflateBudgetBytes), digestWhileReading), webhookHandler(deps));
  app.all('/webhook', methodNotAllowed('POST'));
  app.use(deploymentsRouter({ adminToken: config.adminToken, store: deps.store }));
  app.all(['/deployments', '/deployments/:id'], methodNotAllowed('GET'));

  app.use((_req: Request, _res: Response) => {
    throw new AppError('NOT_FOUND', 'no such endpoint');
  });
  // After authentication has failed, never before: see auth-failure-limiter.ts.
  app.use(authFailureLimiter(config.authFailuresPerMinute));
  app.use((error: unknown, req: Request, res: Response, _next: NextFunction) => {
    const problem = toAppError(error);
    if (problem === undefined) logger.error({ err: error, path: req.path }, 'request failed');
    sendProblem(res, problem);
  });
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
