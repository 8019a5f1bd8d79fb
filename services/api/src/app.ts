import { randomUUID } from 'node:crypto';
import type { IdentityApi } from '@ory/kratos-client';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest, type HookHandlerDoneFunction } from 'fastify';
import type { Logger } from 'pino';
import { passOrRefuse, resolveCaller } from './auth/middleware.js';
import { DEFAULT_ASSURANCE } from './auth/assurance.js';
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
import { BODY_LIMIT_BYTES, installBodyReader } from './http/body.js';
import { cors } from './http/cors.js';
import { originCheckForCookieWrites } from './http/csrf.js';
import { answerHeaders, lazySchemaCompilers, sendJson } from './http/fastify.js';
import { idempotentCreate } from './http/idempotency.js';
import { changeLimitKey, oncePerRequest, trustFunction } from './http/rate-limit-key.js';
import { postgresRateLimitStore } from './http/rate-limit-store.js';
import { notFoundHandler, problemHandler } from './http/problem.js';
import { deferredChildLogger } from './http/request-logger.js';
import { createApiServer, requestIdOf, type ApiServerOptions } from './http/server.js';
import { openApiRoutes } from './openapi.js';
import { createCollectionExtents } from './ogcapi/extent.js';
import { ogcApiRoutes } from './ogcapi/routes.js';
import { createCheckService } from './qc/checks.js';
import { checkRoutes } from './qc/checks-routes.js';
import { createClaimService } from './qc/claims.js';
import { claimRoutes } from './qc/claims-routes.js';
import { createNoticeService } from './qc/notices.js';
import { noticeRoutes } from './qc/notices-routes.js';
import { qcRoutes, reviewRoutes } from './qc/routes.js';
import { createDecisionService } from './qc/decisions.js';
import { createQcService } from './qc/service.js';
import type { TileChangeFeed } from './tiles/changes.js';
import { createTileService } from './tiles/service.js';
import { tileRoutes } from './tiles/routes.js';
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
  /** The HTTP server's timeouts (http/server.ts); the documented ones by default. */
  server?: ApiServerOptions;
  /** The feature changes this process hears (tiles/changes.ts; boot.ts starts and closes it); without, tiles ask the database on every request. */
  tileChanges?: TileChangeFeed | undefined;
}

/**
 * The API as a Fastify app built from its dependencies; serveApp (http/server.ts) readies it and hands
 * out its HTTP server, which boot.ts and tests listen on.
 *
 * The request's path (docs/api.md "The request's path through the code"): Node's server (timeouts,
 * problem+json for what Node refuses, the request id) → Fastify's router → the scope's hooks
 * (/api and /ogcapi alike: nosniff, CORS, the change limit, the caller, the CSRF Origin check) → the
 * route's own (its permission, then the body: media type, bytes, JSON) → the handler → a service →
 * its queries.
 */
export function createApp(given: AppDependencies): FastifyInstance {
  // Every part that asks who the caller is (the change limit's key, the scopes' hooks) gets one answer per request.
  const deps = { ...given, authenticator: oncePerRequest(given.authenticator) };
  const allowedOrigins = deps.config.cors?.origins ?? [];
  const corsOfScopes = cors({ origins: allowedOrigins });
  const app = Fastify({
    // Node's server as http/server.ts makes it: timeouts, client errors as problem+json, the request id.
    serverFactory: (handler) => createApiServer(handler, { ...deps.server, logger: deps.logger }),
    // createApiServer answers Node's client errors itself (problem+json); Fastify adds nothing.
    clientErrorHandler: () => undefined,
    genReqId: (req) => requestIdOf(req) ?? randomUUID(),
    // Whose X-Forwarded-For names the client (API_TRUST_PROXY); request.ip and the change limit's key agree.
    trustProxy: trustFunction(deps.config.rateLimit.trustProxy ?? []),
    bodyLimit: BODY_LIMIT_BYTES,
    // As the API always routed: paths case-insensitive, a trailing slash ignored, ids up to the URL limit.
    routerOptions: { caseSensitive: false, ignoreTrailingSlash: true, maxParamLength: 16 * 1024 },
    loggerInstance: deps.logger as FastifyBaseLogger,
    // No line per request (the proxy logs them); failures are logged by the error handler.
    logController: new LogController({ disableRequestLogging: true }),
    // request.log's pino child is made only when a line is written through it (http/request-logger.ts).
    childLoggerFactory: deferredChildLogger,
    return503OnClosing: false,
    // No route declares a JSON schema (zod validates): Fastify's compilers load only if one does.
    schemaController: { compilersFactory: lazySchemaCompilers() },
    // A malformed %-escape in the path, refused by the router before any route: as every other
    // refusal, with the headers of the scope it was meant for (nosniff, CORS), as the hooks set them.
    frameworkErrors: (error, request, reply) => {
      const answer = () => problemHandler(deps.logger)(error, request, reply);
      if (!/^\/(?:api|ogcapi)(?:[/?]|$)/i.test(request.url.slice(0, 8))) return answer();
      reply.header('X-Content-Type-Options', 'nosniff');
      try {
        if (corsOfScopes(request, reply)) return; // a preflight, answered
      } catch {
        // A refused preflight: the malformed path is what this request is told about.
      }
      answer();
    },
  });
  app.decorate('assurance', deps.config.assurance ?? DEFAULT_ASSURANCE);
  app.decorateRequest('principal', undefined);
  installBodyReader(app);
  app.setErrorHandler(problemHandler(deps.logger));
  app.setNotFoundHandler(notFoundHandler);
  app.addHook('onSend', answerHeaders);

  const migrationNames = readMigrations().map((m) => m.name);
  app.get('/healthz', async (_request, reply) => sendJson(reply, { status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    let pending: string[];
    try {
      pending = await pendingMigrations(deps.db, migrationNames);
    } catch (error) {
      throw new AppError('SERVICE_UNAVAILABLE', 'the database is not reachable', { cause: error });
    }
    if (pending.length > 0) throw new AppError('SERVICE_UNAVAILABLE', `the database is not migrated: pending ${pending.join(', ')}`);
    return sendJson(reply, { status: 'ready' });
  });

  // One budget for changes through either API (docs/api.md "Rate limit"); a hook of both scopes below.
  const writesPerMinute = deps.config.rateLimit.writesPerMinute;
  if (writesPerMinute > 0) {
    // The plugin's module is loaded only when the limit is on (RATE_LIMIT_WRITES_PER_MINUTE=0 turns
    // it off): with its address library it is about 0.4 MiB of heap a process without it never uses.
    void app.register(import('@fastify/rate-limit'), {
      global: false,
      max: writesPerMinute,
      timeWindow: 60_000,
      // The caller's own budget, else the client address (http/rate-limit-key.ts).
      keyGenerator: changeLimitKey({ authenticator: deps.authenticator }),
      // Counted in the database: one budget across every API process (http/rate-limit-store.ts).
      store: postgresRateLimitStore(deps.db),
      // The database unreachable: the change itself would fail anyway; let it say so (503).
      skipOnError: true,
      enableDraftSpec: true,
      addHeaders: { 'retry-after': false },
      errorResponseBuilder: () => new AppError('TOO_MANY_REQUESTS', 'too many changes; retry in a minute', { headers: { 'Retry-After': '60' } }),
    });
  }

  const userRecorder = createUserRecorder(deps.db, deps.logger);
  const authenticator = recordingCallers(deps.authenticator, userRecorder);
  // Writes through /api/features and /api/imports change the /ogcapi collections' extents too.
  const extents = createCollectionExtents(deps.db);

  /**
   * The steps every /api and /ogcapi request passes, in this order: nosniff; CORS (preflights end
   * here and never count as changes); the change limit (before authentication: a refused change
   * counts too); the caller (recorded in users.users on first sight); the CSRF Origin check for
   * cookie-authenticated changes. `authenticated: false` stops after the limit (the OpenAPI document).
   * One onRequest hook rather than one per step: they always run together, and each hook is a
   * promise and a turn of Fastify's hook runner per request. Only the steps that wait are
   * waited for: the limit's count for a change it counts, and the caller when the authenticator
   * must ask (a token not verified before, a session, a caller not yet recorded); nosniff, CORS and
   * the Origin check are synchronous.
   */
  const scopeHooks = (scope: FastifyInstance, options: { authenticated: boolean }): void => {
    const limit = writesPerMinute > 0 ? changeLimit(scope) : undefined;
    const caller = options.authenticated ? resolveCaller(authenticator) : undefined;
    const csrf = options.authenticated ? originCheckForCookieWrites({ origins: allowedOrigins }) : undefined;
    // The steps after the change limit: the caller, then the Origin check; done() when both passed.
    const checkOrigin = (request: FastifyRequest, done: HookHandlerDoneFunction): void => (csrf ? passOrRefuse(csrf, request, done) : done());
    const identify = (request: FastifyRequest, done: HookHandlerDoneFunction): void => {
      let pending: Promise<void> | undefined;
      try {
        pending = caller?.(request);
      } catch (error) {
        // Never thrown by an Authenticator (it rejects); kept off a promise callback, where it would go unheard.
        return done(error as Error);
      }
      // A closure only when the caller had to be waited for.
      if (pending) pending.then(() => checkOrigin(request, done), done);
      else checkOrigin(request, done);
    };
    // A callback hook: an anonymous GET, or a caller whose token was verified before, passes it
    // without a promise.
    scope.addHook('onRequest', (request, reply, done) => {
      reply.header('X-Content-Type-Options', 'nosniff');
      let counted: Promise<unknown> | undefined;
      try {
        if (corsOfScopes(request, reply)) return; // a preflight, answered
        counted = limit?.(request, reply);
      } catch (error) {
        return done(error as Error);
      }
      if (counted) counted.then(() => identify(request, done), done);
      else identify(request, done);
    });
    if (options.authenticated) scope.setNotFoundHandler(notFoundHandler);
  };

  void app.register(
    async (api) => {
      await api.register(async (docs) => {
        scopeHooks(docs, { authenticated: false });
        await docs.register(openApiRoutes);
      });
      await api.register(async (scope) => {
        scopeHooks(scope, { authenticated: true });
        const features = createFeatureService(deps.db, { onWrite: extents.invalidate });
        await scope.register(featureRoutes, { prefix: '/features', service: features, idempotency: idempotentCreate(deps.db, { logger: deps.logger }) });
        const qcOptions = { maxAttempts: deps.config.qc?.maxAttempts ?? 12 };
        const claims = createClaimService(deps.db);
        const qc = createQcService(deps.db, { ...qcOptions, beforeDecision: claims.assertMayDecide });
        await scope.register(reviewRoutes, { service: qc });
        await scope.register(forwardAuthRoutes, { prefix: '/auth', origins: allowedOrigins });
        await scope.register(devTokenRoutes, { prefix: '/dev', keys: deps.devKeys, production: deps.production ?? false });
        await scope.register(userRoutes, { prefix: '/users', service: createUserService({ db: deps.db, logger: deps.logger, identityAdmin: deps.identityAdmin, recorder: userRecorder }) });
        await scope.register(qcRoutes, { prefix: '/qc', service: qc, decisions: createDecisionService(deps.db, qcOptions) });
        await scope.register(claimRoutes, { prefix: '/qc', claims });
        await scope.register(checkRoutes, { prefix: '/qc', checks: createCheckService(deps.db, { cityExtent: deps.config.qc?.cityExtent }) });
        await scope.register(noticeRoutes, { prefix: '/qc', notices: createNoticeService(deps.db) });
        await scope.register(tileRoutes, { prefix: '/tiles', tiles: createTileService(deps.db, { changes: deps.tileChanges }) });
        await scope.register(importRoutes, { prefix: '/imports', imports: createImportService(deps.db, { onWrite: extents.invalidate }), demo: !(deps.production ?? false) });
      });
    },
    { prefix: '/api' },
  );
  void app.register(
    async (scope) => {
      scopeHooks(scope, { authenticated: true });
      await scope.register(ogcApiRoutes, { db: deps.db, extents });
    },
    { prefix: '/ogcapi' },
  );
  return app;
}

/**
 * The change limit of a scope: every method but GET, HEAD and OPTIONS, except imports (a file of
 * 10 000 features is one request, and imports have limits of their own: imports/routes.ts). A
 * promise for a request it counts, nothing for one it lets pass.
 */
function changeLimit(scope: FastifyInstance): (request: FastifyRequest, reply: FastifyReply) => Promise<unknown> | undefined {
  const limit = scope.rateLimit();
  return (request, reply) => {
    if (request.method === 'GET' || request.method === 'HEAD' || request.method === 'OPTIONS') return undefined;
    if (/^\/api\/imports(?:\/|\?|$)/i.test(request.url)) return undefined;
    return limit.call(scope, request, reply);
  };
}
