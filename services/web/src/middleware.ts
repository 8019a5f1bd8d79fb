import { defineMiddleware } from 'astro:middleware';
import { webConfig } from './config.js';
import { messagesFor, pickLanguage, translator } from './i18n/index.js';
import { DEV_TOKEN_COOKIE, kratosBrowserUrl, needsStepUp, visitorOf } from './lib/session.js';

/** Routes that need a signed-in visitor (editing; the QC desk of part 2). */
const PROTECTED = [/^\/features\/new\/?$/, /^\/features\/[^/]+\/edit\/?$/, /^\/qc(\/.*)?$/];
/** Pages where reviewers decide (approve, reject, conflations): a second factor first (the API's aal2 rule). */
const DECIDING = [/^\/qc\/decisions\/?$/, /^\/qc\/(?!mine\/?$)[^/]+\/?$/];

/**
 * Every request: its language (?lang= sets a cookie; else the cookie, Accept-Language, German) and its
 * visitor. Protected routes follow the project's guard: no identity → /login with a return URL; a
 * second factor required → the second-factor login; the identity service unreachable → 503.
 */
export const onRequest = defineMiddleware(async (context, next) => {
  const config = webConfig();
  const url = context.url;
  const chosen = url.searchParams.get('lang');
  const lang = pickLanguage(chosen ?? context.cookies.get('lang')?.value, context.request.headers.get('accept-language'));
  if (chosen === lang) context.cookies.set('lang', lang, { path: '/', sameSite: 'lax', maxAge: 365 * 86400 });
  const messages = messagesFor(lang);
  context.locals.lang = lang;
  context.locals.messages = messages;
  context.locals.t = translator(messages);
  context.locals.config = config;

  const guarded = PROTECTED.some((pattern) => pattern.test(url.pathname));
  try {
    context.locals.visitor = await visitorOf(config, context.cookies.get(DEV_TOKEN_COOKIE)?.value, context.request.headers.get('cookie'));
  } catch {
    if (guarded) return new Response('the identity service is not reachable', { status: 503, headers: { 'content-type': 'text/plain' } });
    context.locals.visitor = { state: 'anonymous' };
  }
  const visitor = context.locals.visitor;
  context.locals.user = visitor.state === 'signed-in' ? visitor.user : undefined;

  if (guarded && visitor.state !== 'signed-in') {
    const returnPath = `${url.pathname}${url.search}`;
    if (visitor.state === 'second-factor-required' && config.loginUrl) {
      const login = new URL(config.loginUrl);
      login.searchParams.set('aal', 'aal2');
      login.searchParams.set('return_to', `${config.publicBaseUrl}${returnPath}`);
      return context.redirect(login.toString(), 303);
    }
    return context.redirect(`/login?return_to=${encodeURIComponent(returnPath)}`, 303);
  }
  // A reviewer or admin signed in without a second factor is sent through Kratos' step-up login and back
  // before the desk shows approve and reject (the API would refuse them: 403 AAL2_REQUIRED).
  if (DECIDING.some((pattern) => pattern.test(url.pathname)) && needsStepUp(context.locals.user)) {
    const stepUp = kratosBrowserUrl(config, 'login', `${config.publicBaseUrl}${url.pathname}${url.search}`, { aal: 'aal2' });
    if (stepUp) return context.redirect(stepUp, 303);
  }
  const response = await next();
  // Pages carry the visitor's token and personal data: never cache them in shared caches.
  if (response.headers.get('content-type')?.startsWith('text/html')) response.headers.set('Cache-Control', 'private, no-store');
  return response;
});
