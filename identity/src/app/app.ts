import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import cookieParser from 'cookie-parser';
import type { Store } from 'express-rate-limit';
import type { Logger } from 'pino';
import { describeError, type OryClients } from '../../../services/shared/ory/clients.js';
import type { IdentityAppConfig } from './config.js';
import { createConsentRoutes } from './consent.js';
import { createReadinessRoute } from './health.js';
import { errorPage } from './html.js';
import { createLoginRoute } from './login.js';
import { createLogoutRoutes } from './logout.js';
import { createKratosGate, GATE_PREFIX } from './kratos-gate.js';
import { createCsrf, createLoginRateLimiters, csrfErrorHandler, securityHeaders } from './security.js';
import { createSelfServiceLoginRoutes } from './self-service-login.js';
import type { RouteContext } from './context.js';

export interface IdentityAppDeps {
  ory: OryClients;
  config: IdentityAppConfig;
  logger: Logger;
  now?: () => number;
  /** Where the login limiters count (a PostgresRateLimitStore per limiter); unset: in this process. */
  rateLimitStore?: () => Store;
}

/**
 * The login/consent/logout app served at {auth_url}: Hydra's login, consent and logout endpoints and
 * our page for Kratos' login flow. Built from its dependencies; server.ts only listens.
 */
export function createIdentityApp(deps: IdentityAppDeps): Express {
  const { ory, config, logger } = deps;
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', config.trustProxy);

  const csrf = createCsrf(config);
  const ctx: RouteContext = { ory, config, logger, now: deps.now ?? Date.now, csrfToken: (req, res) => csrf.generateCsrfToken(req, res) };

  app.get('/health/alive', (_req, res) => {
    res.json({ status: 'ok' });
  });
  app.get('/health/ready', createReadinessRoute(ory));

  // One budget for every way to submit a password or a code: the login page below and Kratos' own
  // self-service submissions, which the proxy sends through the gate (before any body parser: the
  // gate passes the body on as it came).
  const loginLimiters = createLoginRateLimiters(config.loginLimit, deps.rateLimitStore);
  app.use(GATE_PREFIX, createKratosGate({ kratosPublicUrl: config.kratosPublicInternalUrl, limiters: loginLimiters }));
  app.use(securityHeaders());
  app.use(cookieParser(config.cookieSecret));
  app.use(express.urlencoded({ extended: false, limit: '8kb', parameterLimit: 20 }));
  app.use(csrf.browserId);

  const login = createLoginRoute(ctx);
  const consent = createConsentRoutes(ctx);
  const logout = createLogoutRoutes(ctx);
  const selfServiceLogin = createSelfServiceLoginRoutes(ctx);

  app.get('/login', login);
  app.get('/consent', consent.show);
  app.post('/consent', csrf.protect, consent.submit);
  app.get('/logout', logout.show);
  app.post('/logout', csrf.protect, logout.submit);
  app.get('/assets/ory-triggers.js', (_req, res) => {
    res.type('application/javascript').set('Cache-Control', 'public, max-age=3600').send(ORY_TRIGGERS_SCRIPT);
  });
  app.get('/self-service/login', selfServiceLogin.show);
  app.post('/self-service/login', ...loginLimiters, csrf.protect, selfServiceLogin.submit);
  app.get('/error', (req, res) => {
    res.status(400).type('html').send(errorPage('Something went wrong', 'The sign-in service reported an error. Please start again from the application you came from.'));
  });

  app.use((_req, res) => {
    res.status(404).type('html').send(errorPage('Not found', 'There is no page at this address.'));
  });
  app.use(csrfErrorHandler);
  app.use((error: unknown, req: Request, res: Response, _next: NextFunction) => {
    const status = (error as { status?: number; statusCode?: number }).status ?? (error as { statusCode?: number }).statusCode;
    if (typeof status === 'number' && status >= 400 && status < 500) {
      res.status(status).type('html').send(errorPage('Request not accepted', 'The request could not be processed.'));
      return;
    }
    // Ory unreachable or answering off-contract: log the cause, show a page that leaks nothing.
    logger.error({ error: describeError(error), path: req.path }, 'identity request failed');
    res.status(502).type('html').send(errorPage('Sign-in unavailable', 'The sign-in service is not reachable right now. Please try again in a minute.'));
  });
  return app;
}

/**
 * Binds the buttons of Ory UI nodes to their triggers (`onclickTrigger`, e.g. oryPasskeyLogin from
 * Kratos' webauthn.js) without inline event handlers, which the Content-Security-Policy forbids. Only
 * Ory's own trigger names (ory…) are called.
 */
const ORY_TRIGGERS_SCRIPT = `for (const button of document.querySelectorAll('[data-ory-trigger]')) {
  const name = button.getAttribute('data-ory-trigger');
  button.addEventListener('click', () => {
    const trigger = /^ory[A-Za-z]+$/.test(name) ? window[name] : undefined;
    if (typeof trigger === 'function') trigger();
  });
}
`;
