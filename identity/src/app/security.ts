import { createHash, randomBytes } from 'node:crypto';
import type { CookieOptions, NextFunction, Request, RequestHandler, Response } from 'express';
import { doubleCsrf } from 'csrf-csrf';
import { rateLimit, ipKeyGenerator, type Store } from 'express-rate-limit';
import { loginFailed } from './kratos-gate.js';
import { STYLE_CSP_SOURCE, errorPage } from './html.js';
import type { IdentityAppConfig } from './config.js';

/** Headers every page gets: no framing (clickjacking on consent), no inline script, no referrer leaks of challenges. */
export function securityHeaders(): RequestHandler {
  return (_req, res, next) => {
    res.setHeader('Content-Security-Policy', `default-src 'none'; style-src ${STYLE_CSP_SOURCE}; frame-ancestors 'none'; base-uri 'none'`);
    res.setHeader('X-Frame-Options', 'DENY');
    res.setHeader('X-Content-Type-Options', 'nosniff');
    res.setHeader('Referrer-Policy', 'no-referrer');
    res.setHeader('Cache-Control', 'no-store');
    next();
  };
}

/** Cookie names and options: `__Host-` prefix, Secure, HttpOnly, SameSite=Lax whenever served over https. */
export function cookieSettings(config: Pick<IdentityAppConfig, 'secureCookies'>): { prefix: string; options: CookieOptions } {
  return {
    prefix: config.secureCookies ? '__Host-' : '',
    options: { httpOnly: true, sameSite: 'lax', secure: config.secureCookies, path: '/' },
  };
}

/**
 * CSRF protection for the app's own form posts (consent, logout, the login form): the double-submit
 * cookie pattern of csrf-csrf, bound to a per-browser random id kept in a signed cookie.
 */
export function createCsrf(config: Pick<IdentityAppConfig, 'secureCookies' | 'cookieSecret'>) {
  const { prefix, options } = cookieSettings(config);
  const browserIdCookie = `${prefix}identity.bid`;
  const browserId: RequestHandler = (req, res, next) => {
    const signed = req.signedCookies as Record<string, string | false | undefined>;
    let id = signed[browserIdCookie];
    if (!id) {
      id = randomBytes(18).toString('base64url');
      res.cookie(browserIdCookie, id, { ...options, signed: true });
      signed[browserIdCookie] = id;
    }
    next();
  };
  const { generateCsrfToken, doubleCsrfProtection } = doubleCsrf({
    getSecret: () => config.cookieSecret,
    getSessionIdentifier: (req) => String((req.signedCookies as Record<string, string | undefined>)[browserIdCookie] ?? ''),
    cookieName: `${prefix}identity.csrf`,
    cookieOptions: options,
    getCsrfTokenFromRequest: (req) => (req.body as Record<string, string> | undefined)?._csrf,
    errorConfig: { statusCode: 403, message: 'invalid csrf token', code: 'EBADCSRFTOKEN' },
  });
  return { browserId, generateCsrfToken, protect: doubleCsrfProtection };
}

/** The CSRF failure as a page (the token expired or the form came from elsewhere): 403, never a 500. */
export function csrfErrorHandler(error: unknown, _req: Request, res: Response, next: NextFunction): void {
  if ((error as { code?: string }).code === 'EBADCSRFTOKEN') {
    res.status(403).type('html').send(errorPage('Form expired', 'This form has expired or did not come from this site. Please go back and try again.'));
    return;
  }
  next(error);
}

function tooMany(_req: Request, res: Response): void {
  res.status(429).type('html').send(errorPage('Too many attempts', 'Too many sign-in attempts. Please wait a few minutes and try again.'));
}

/**
 * Login rate limits: every attempt counts per client IP; failed attempts count per account (the
 * identifier, hashed so the limiter's memory holds no e-mail addresses), so a successful user is never
 * locked out by their own earlier typos once they get it right, but guessing one account's password stops.
 *
 * `store` makes each limiter's counter store: PostgreSQL's (rate-limit-store.ts) when the app has
 * LOGIN_DATABASE_URL, so every replica counts against one budget; else express-rate-limit's memory
 * store, one budget per process (one replica only, docs/identity.md "Rate limits and replicas").
 */
export function createLoginRateLimiters(limits: IdentityAppConfig['loginLimit'], store?: () => Store): RequestHandler[] {
  const perIp = rateLimit({
    ...(store ? { store: store() } : {}),
    windowMs: limits.windowMs,
    limit: limits.perIp,
    standardHeaders: 'draft-8',
    legacyHeaders: false,
    keyGenerator: (req) => `ip:${ipKeyGenerator(req.ip ?? 'unknown')}`,
    handler: tooMany,
  });
  const perAccount = rateLimit({
    ...(store ? { store: store() } : {}),
    windowMs: limits.windowMs,
    limit: limits.perAccount,
    standardHeaders: 'draft-8',
    legacyHeaders: false,
    skipSuccessfulRequests: true,
    // A browser flow's failed login is a redirect back to the login page (?flow=), not a 4xx.
    requestWasSuccessful: (_req, res) => !loginFailed(res.statusCode, res.getHeader('location')?.toString()),
    // A passkey login names no account (the key does); it is limited per IP only. Counting it under the
    // empty identifier would let anyone lock every passkey login with a few failed attempts.
    skip: (req) => String((req.body as Record<string, unknown> | undefined)?.identifier ?? '').trim() === '',
    keyGenerator: (req) => {
      const identifier = String((req.body as Record<string, unknown> | undefined)?.identifier ?? '').trim().toLowerCase();
      return `account:${createHash('sha256').update(identifier).digest('base64url')}`;
    },
    handler: tooMany,
  });
  return [perIp, perAccount];
}
