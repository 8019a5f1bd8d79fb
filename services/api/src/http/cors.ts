import { AppError } from '../../../shared/errors.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { addVary } from './fastify.js';

/**
 * CORS for the platform's own sites only (CORS_ORIGINS). A browser on an allowed origin may call the API
 * with credentials (the Kratos cookie) and read the answer; any other origin gets no CORS headers, so
 * the browser keeps the answer from its script, and its preflights are refused with 403.
 *
 * CORS only controls who may READ answers. Whether a cookie-authenticated change is accepted at all is
 * decided by the Origin check in csrf.ts.
 */

export interface CorsOptions {
  /** Exact origins, e.g. https://app.example.org (scheme, host and port; no path). */
  origins: readonly string[];
  maxAgeSeconds?: number;
}

// PATCH: /ogcapi items take JSON merge patches (OGC API – Features Part 4).
const ALLOWED_METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE';
// Idempotency-Key (a create the web app's outbox retries) and X-Edit-Note (the history note of a merge)
// come from the browser too, and Content-Crs (an /ogcapi write in UTM, OGC API – Features Part 2 with
// Part 4); without them here the preflight refuses those requests. Content-Crs is exposed so a page can
// read which CRS the coordinates of an answer are in.
const ALLOWED_HEADERS = 'Authorization, Content-Type, Content-Crs, If-Match, If-None-Match, Idempotency-Key, X-Edit-Note';
const EXPOSED_HEADERS = 'Content-Crs, ETag, Link, Location, Retry-After, Server-Timing, WWW-Authenticate';

/** The origin of a URL as browsers send it in the Origin header; throws for anything else. */
export function normalizeOrigin(value: string): string {
  const url = new URL(value);
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new Error(`${value} is not an http(s) origin`);
  if (url.pathname !== '/' || url.search || url.hash || url.username) throw new Error(`${value} must be an origin (scheme://host[:port]) without a path`);
  return url.origin;
}

export function allowedOrigins(origins: readonly string[]): ReadonlySet<string> {
  return new Set(origins.map(normalizeOrigin));
}

/**
 * The scope's first step after nosniff (app.ts): CORS headers on every answer, errors included, and
 * preflights answered here (204, or 403 for a foreign origin) before the change limit. It returns
 * true when it has answered (a preflight), and throws the 403. Synchronous: it never waits, and the
 * scope's hook runs it on every request. Not @fastify/cors: that one answers a foreign origin's
 * preflight 204 without headers, where the platform refuses it with a problem document the web app
 * and the tests rely on.
 */
export function cors(options: CorsOptions): (request: FastifyRequest, reply: FastifyReply) => boolean {
  const allowed = allowedOrigins(options.origins);
  const maxAge = String(options.maxAgeSeconds ?? 600);
  return (request, reply) => {
    const origin = request.headers.origin;
    // Answers differ by Origin: shared caches must keep them apart.
    addVary(reply, 'Origin');
    const isAllowed = origin !== undefined && allowed.has(origin);
    const isPreflight = request.method === 'OPTIONS' && request.headers['access-control-request-method'] !== undefined;
    if (isAllowed) {
      reply.header('Access-Control-Allow-Origin', origin);
      reply.header('Access-Control-Allow-Credentials', 'true');
    }
    if (!isPreflight) {
      if (isAllowed) reply.header('Access-Control-Expose-Headers', EXPOSED_HEADERS);
      return false;
    }
    if (!isAllowed) throw new AppError('FORBIDDEN', `cross-origin requests from ${origin ?? '(no origin)'} are not allowed`);
    reply.header('Access-Control-Allow-Methods', ALLOWED_METHODS);
    reply.header('Access-Control-Allow-Headers', ALLOWED_HEADERS);
    reply.header('Access-Control-Max-Age', maxAge);
    reply.code(204).send();
    return true;
  };
}
