/**
 * The webhook server's Express app, built from its dependencies (no listening, no signals here).
 */
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { AppError, sendProblem } from '../../shared/errors.js';
import { authFailureLimiter } from './auth-failure-limiter.js';
import { rawBody } from './body.js';
import type { WebhookConfig } from './config.js';
import type { DeployQueue } from './deployments/queue.js';
import type { DeploymentStore } from './deployments/store.js';
import { deploymentsRouter } from './routes/deployments.js';
import { webhookHandler } from './routes/webhook.js';
import type { SecretBook } from './secret-book.js';

export interface WebhookAppDeps {
  config: Pick<
    WebhookConfig,
    'targets' | 'unmatchedBranchStatus' | 'maxBodyBytes' | 'adminToken' | 'authFailuresPerMinute' | 'trustProxy'
  >;
  secrets: SecretBook;
  queue: DeployQueue;
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

  app.use(authFailureLimiter(config.authFailuresPerMinute));

  app.post('/webhook', rawBody(config.maxBodyBytes), webhookHandler(deps));
  app.all('/webhook', methodNotAllowed('POST'));
  app.use(deploymentsRouter({ adminToken: config.adminToken, store: deps.store }));
  app.all(['/deployments', '/deployments/:id'], methodNotAllowed('GET'));

  app.use((_req: Request, _res: Response) => {
    throw new AppError('NOT_FOUND', 'no such endpoint');
  });
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

/** Body-parser errors carry a `type`; everything unknown is an internal error that leaks nothing. */
function toAppError(error: unknown): AppError | undefined {
  if (error instanceof AppError) return error;
  const type = (error as { type?: string } | null)?.type;
  if (type === 'entity.too.large') return new AppError('PAYLOAD_TOO_LARGE', 'request body is larger than the limit');
  if (type === 'request.aborted' || type === 'request.size.invalid' || type === 'encoding.unsupported' || type === 'charset.unsupported') {
    return new AppError('VALIDATION_FAILED', 'the request body could not be read');
  }
  return undefined;
}
