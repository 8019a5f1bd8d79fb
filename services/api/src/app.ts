import type { IncomingMessage, ServerResponse } from 'node:http';
import type { IdentityApi } from '@ory/kratos-client';
import express, { type Express } from 'express';
import rateLimit from 'express-rate-limit';
import type { Logger } from 'pino';
import { authenticate } from './auth/middleware.js';
import type { DevKeys } from './auth/dev-keys.js';
import { devTokenRoutes } from './auth/dev-token-route.js';
import { forwardAuthRoutes } from './auth/forward-route.js';
import type { Authenticator } from '../../shared/principal.js';
import type { ApiConfig } from './config.js';
import { pendingMigrations, readMigrations } from './db/migrate.js';
import type { Db } from './db/pool.js';
import { AppError } from '../../shared/errors.js';
import { featureRoutes } from './features/routes.js';
import { createFeatureService } from './features/service.js';
import { allowedOrigins as corsOrigins, cors } from './http/cors.js';
import { featureCreateFastPath } from './features/create-fast-path.js';
import { featureReadFastPath } from './features/read-fast-path.js';
import { idempotentCreate } from './http/idempotency.js';
import { originCheckForCookieWrites } from './http/csrf.js';
import { changeLimitKey, oncePerRequest, trustFunction } from './http/rate-limit-key.js';
import { notFoundHandler, problemHandler } from './http/problem.js';
import { openApiRoutes } from './openapi.js';
import { createCollectionExtents } from './ogcapi/extent.js';
import { ogcApiRoutes } from './ogcapi/routes.js';
import { createCheckService } from './qc/checks.js';
import { checkRoutes } from './qc/checks-routes.js';
import { createClaimService } from './qc/claims.js';
import { claimRoutes } from './qc/claims-routes.js';
import { createNoticeService } from './qc/notices.js';
import { noticeRoutes } from './qc/notices-routes.js';
import { mountQc } from './qc/routes.js';
import { createDecisionService } from './qc/decisions.js';
import { createQcService } from './qc/service.js';
import { createTileService } from './tiles/service.js';
import { tileRoutes } from './tiles/routes.js';
import { tileFastPath } from './tiles/fast-path.js';
import { importRoutes } from './imports/routes.js';
import { createImportService } from './imports/service.js';
import { createUserRecorder, recordingCallers } from './users/recorder.js';
import { userRoutes } from './users/routes.js';
import { createUserService } from './users/service.js';

export interface AppDependencies {
  db: Db;
  config: Pick<ApiConfig, 'rateLimit'> & Partial<Pick<ApiConfig, 'cors' | 'qc' | 'assurance'>>;
  authenticator: Authenticator;
  /** Kratos admin API for role changes (PUT /api/users/:id/role); without it they answer 503. */
  identityAdmin?: IdentityApi | undefined;
  logger: Logger;
  /** Injected for tests of time-dependent behaviour; the API reads time through it only. */
  clock?: () => Date;
  /** The development signing key (only without AUTH_JWKS_URL, outside production): enables POST /api/dev/token. */
  devKeys?: DevKeys | undefined;
  /** Refuses the development token route even when keys are handed in. */
  production?: boolean;
  /**
   * Answer a plain single-feature GET and a plain create without Express (features/read-fast-path.ts,
   * features/create-fast-path.ts). On by default; tests turn it off to compare both answers.
   */
  fastPaths?: boolean;
}

/** The API as an Express app built from its dependencies; server.ts listens, tests use port 0. */
export function createApp(given: AppDependencies): Express {
  // Every part that asks who the caller is (the change limit's key, the fast paths, the routers) gets
  // one answer per request.
  const deps = { ...given, authenticator: oncePerRequest(given.authenticator) };
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false); // feature ETags are versions, set by the routes
  app.set('query parser', 'simple');
  // Read by the second-factor guard (auth/assurance.ts); reviewer and admin when unset.
  if (deps.config.assurance) app.locals.assurance = deps.config.assurance;

  const migrationNames = readMigrations().map((m) => m.name);
  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  app.get('/readyz', async (_req, res) => {
    let pending: string[];
    try {
      pending = await pendingMigrations(deps.db, migrationNames);
    } catch (error) {
      throw new AppError('SERVICE_UNAVAILABLE', 'the database is not reachable', { cause: error });
    }
    if (pending.length > 0) throw new AppError('SERVICE_UNAVAILABLE', `the database is not migrated: pending ${pending.join(', ')}`);
    res.json({ status: 'ready' });
  });

  app.use('/api', (_req, res, next) => {
    res.setHeader('X-Content-Type-Options', 'nosniff');
    next();
  });
  // Before the rate limit: preflights are answered here and never count as changes.
  const allowedOrigins = deps.config.cors?.origins ?? [];
  app.use('/api', cors({ origins: allowedOrigins }));
  // Whose X-Forwarded-For names the client (API_TRUST_PROXY); req.ip and the change limit's key agree.
  const trustProxy = trustFunction(deps.config.rateLimit.trustProxy ?? []);
  app.set('trust proxy', trustProxy);
  const changeLimit =
    deps.config.rateLimit.writesPerMinute > 0
      ? rateLimit({
          windowMs: 60_000,
          limit: deps.config.rateLimit.writesPerMinute,
          // Imports (POST /api/imports…) have limits of their own (imports/routes.ts): a file of 10 000
          // features is one request, and its checks and retries must not use up the edits' budget.
          skip: (req) => req.method === 'GET' || req.method === 'HEAD' || req.method === 'OPTIONS' || /^\/api\/imports(?:\/|\?|$)/.test(req.originalUrl),
          // The caller's own budget, else the client address (http/rate-limit-key.ts); computed from
          // Node's request alone, so the create fast path, which has no Express request, counts under the same key.
          keyGenerator: changeLimitKey({ authenticator: deps.authenticator, trustProxy }),
          // X-Forwarded-For is read on purpose, from trusted proxies only (the key generator above).
          validate: { xForwardedForHeader: false },
          standardHeaders: 'draft-7',
          legacyHeaders: false,
          handler: (_req, _res, next) => next(new AppError('TOO_MANY_REQUESTS', 'too many changes; retry in a minute', { headers: { 'Retry-After': '60' } })),
        })
      : undefined;
  if (changeLimit) app.use(['/api', '/ogcapi'], changeLimit); // one budget for changes through either API
  app.use('/api', openApiRoutes());
  // Every /api route below: the caller once (and recorded in users.users on first sight), then the CSRF
  // Origin check for cookie-authenticated changes. Routers' own authenticate() reuse this answer.
  const userRecorder = createUserRecorder(deps.db, deps.logger);
  const authenticator = recordingCallers(deps.authenticator, userRecorder);
  app.use('/api', authenticate(authenticator), originCheckForCookieWrites({ origins: allowedOrigins }));
  // Writes through /api/features change the /ogcapi collections' extents too.
  const extents = createCollectionExtents(deps.db);
  const features = createFeatureService(deps.db, { onWrite: extents.invalidate });
  // Mounted first among the /api routers (most traffic, and no other router shares its paths; a path it
  // does not route, such as /api/features/{id}/reviews, falls through to the routers below).
  app.use('/api/features', authenticate(deps.authenticator), featureRoutes(features, { beforeCreate: [idempotentCreate(deps.db, { logger: deps.logger })] }));
  app.use('/api/auth', forwardAuthRoutes({ origins: allowedOrigins }));
  app.use('/api/dev', devTokenRoutes({ keys: deps.devKeys, production: deps.production ?? false }));
  app.use('/api/users', userRoutes(createUserService({ db: deps.db, logger: deps.logger, identityAdmin: deps.identityAdmin, recorder: userRecorder })));
  const claims = createClaimService(deps.db);
  const qcOptions = { maxAttempts: deps.config.qc?.maxAttempts ?? 12 };
  mountQc(app, {
    service: createQcService(deps.db, { ...qcOptions, beforeDecision: claims.assertMayDecide }),
    decisions: createDecisionService(deps.db, qcOptions),
    authenticator: deps.authenticator,
  });
  app.use('/api/qc', claimRoutes(claims), checkRoutes(createCheckService(deps.db, { cityExtent: deps.config.qc?.cityExtent })), noticeRoutes(createNoticeService(deps.db)));
  const tiles = createTileService(deps.db);
  app.use('/api/tiles', tileRoutes(tiles));
  app.use('/api/imports', importRoutes(createImportService(deps.db, { onWrite: extents.invalidate }), { demo: !(deps.production ?? false) }));
  app.use('/ogcapi', ogcApiRoutes({ db: deps.db, authenticator: recordingCallers(deps.authenticator, userRecorder), origins: allowedOrigins, extents }));
  app.use(notFoundHandler);
  app.use(problemHandler(deps.logger));

  if (deps.fastPaths ?? true) {
    // In front of Express: the app function calls app.handle for every request, so the fast path sees
    // each one first and hands all it does not answer to Express unchanged.
    const fastRead = featureReadFastPath({ service: features, authenticator, allowedOrigins: corsOrigins(allowedOrigins) });
    const fastCreate = featureCreateFastPath({
      service: features,
      authenticator: deps.authenticator,
      record: (principal) => userRecorder.record(principal),
      allowedOrigins: corsOrigins(allowedOrigins),
      rateLimit: changeLimit,
      logger: deps.logger,
    });
    // (app.handle is Express' documented-in-source entry point, missing from its type definitions.)
    const internals = app as unknown as { handle(req: IncomingMessage, res: ServerResponse, done?: unknown): void };
    const handle = internals.handle.bind(app);
    const fastTile = tileFastPath({ tiles, authenticator, allowedOrigins: corsOrigins(allowedOrigins) });
    internals.handle = (req, res, done) => fastCreate(req, res, () => fastRead(req, res, () => fastTile(req, res, () => handle(req, res, done))));
  }
  return app;
}
