/**
 * What every route plugin of the API shares on Fastify: the caller on the request, hooks typed for
 * route options, the Vary helper, the 405 routes and the one way a text answer is sent.
 */
import { createRequire } from 'node:module';
import fresh from 'fresh';
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions, onSendHookHandler } from 'fastify';
import type { Principal } from '../../../shared/principal.js';
import { AppError } from '../../../shared/errors.js';
import type { AssurancePolicy } from '../auth/assurance.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The caller, resolved once per request by the scope's authentication hook (auth/middleware.ts). */
    principal: Principal | undefined;
  }
  interface FastifyContextConfig {
    /** The detail of a 413 on this route, when it has words of its own (imports). */
    tooLarge?: string;
  }
  interface FastifyInstance {
    /** Which roles need a second factor for sensitive actions (auth/assurance.ts). */
    assurance: AssurancePolicy;
  }
}

type CompilersFactory = NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>;
type ValidatorFactory = NonNullable<CompilersFactory['buildValidator']>;
type SerializerFactory = NonNullable<CompilersFactory['buildSerializer']>;

/**
 * Fastify's own schema compilers (@fastify/ajv-compiler, @fastify/fast-json-stringify-compiler),
 * loaded the first time a route declares a JSON schema instead of when the app is made. The API
 * validates with zod in its handlers and declares none, yet Fastify builds both at start by default:
 * ajv, its formats and fast-json-stringify, about 1.2 MiB of an idle process's heap. They are
 * required from Fastify's own place, so a route with a schema gets the very compilers Fastify would
 * have chosen. (Fastify then treats them as custom compilers: it would pass a headers schema on
 * unchanged instead of lower-casing its keys first; no route has one.)
 */
export function lazySchemaCompilers(): CompilersFactory {
  const fromFastify = createRequire(createRequire(import.meta.url).resolve('fastify'));
  let validator: ValidatorFactory | undefined;
  let serializer: SerializerFactory | undefined;
  return {
    buildValidator: (externalSchemas, options) => (validator ??= (fromFastify('@fastify/ajv-compiler') as () => ValidatorFactory)())(externalSchemas, options),
    buildSerializer: (externalSchemas, options) => (serializer ??= (fromFastify('@fastify/fast-json-stringify-compiler') as () => SerializerFactory)())(externalSchemas, options),
  };
}

/** A hook or a route's step before its handler: it throws an AppError to refuse. */
export type Hook = (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>;

/** Adds `field` to the answer's Vary header (Origin by CORS, Accept by negotiation, Accept-Encoding by tiles). */
export function addVary(reply: FastifyReply, field: string): void {
  const current = reply.getHeader('vary');
  if (current === undefined) {
    reply.header('Vary', field);
    return;
  }
  const fields = String(current).split(',').map((f) => f.trim());
  if (!fields.some((f) => f.toLowerCase() === field.toLowerCase())) reply.header('Vary', `${fields.join(', ')}, ${field}`);
}

/** A text answer (stored JSON, HTML) of a media type, in UTF-8 as every text answer of the API. */
export function sendText(reply: FastifyReply, type: string, text: string): FastifyReply {
  return reply.type(`${type}; charset=utf-8`).send(text);
}

/** An object as JSON (what Express' res.json wrote). */
export function sendJson(reply: FastifyReply, value: unknown): FastifyReply {
  return sendText(reply, 'application/json', JSON.stringify(value));
}

const METHODS = ['DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT'] as const;

/**
 * 405 with Allow for every method a path does not route: `allow` lists those it does (HEAD with GET).
 * `message` words the detail as the path's plugin does.
 */
export function methodNotAllowed(app: FastifyInstance, urls: readonly string[], allow: string | ((url: string) => string), message?: (method: string, allow: string) => string): void {
  for (const url of urls) {
    const allowed = typeof allow === 'string' ? allow : allow(url);
    const listed = new Set(allowed.split(',').map((m) => m.trim()));
    const others = METHODS.filter((m) => !listed.has(m));
    app.route({
      method: others,
      url,
      handler: async (request) => {
        throw new AppError('METHOD_NOT_ALLOWED', message ? message(request.method, allowed) : `${request.method} is not supported here; allowed: ${allowed}`, { headers: { Allow: allowed } });
      },
    });
  }
}

/** Repeated query parameters (?limit=1&limit=2) are ambiguous: refuse them by name. */
export function singleValued(query: unknown): Record<string, unknown> {
  const record = (query ?? {}) as Record<string, unknown>;
  for (const [key, value] of Object.entries(record)) {
    if (Array.isArray(value)) throw new AppError('INVALID_QUERY', `invalid query: ${key}: must be given once`, { fields: [{ field: key, message: 'must be given once' }] });
  }
  return record;
}

/** The path parameter `name` (Fastify decodes it). */
export function param(request: FastifyRequest, name: string): string {
  return (request.params as Record<string, string>)[name] ?? '';
}

/**
 * A feature id from the path (`name`, Fastify decodes it). Ids written outside the API (WFS-T, SQL)
 * may use characters the API would not hand out, so any text a row could hold is looked up;
 * something no row can hold (empty, over 255 characters, a NUL) is a 404 at once.
 */
export function featureIdParam(request: FastifyRequest, name = 'id'): string {
  const id = param(request, name);
  if (id.length === 0 || id.length > 255 || id.includes('\u0000')) throw new AppError('FEATURE_NOT_FOUND', 'no feature with this id');
  return id;
}

/** The request's header as one string (the first of repeated ones), as Express' req.get gave it. */
export function header(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * The app's one onSend hook, which every answer passes (errors, 404s and preflights included): the
 * request's id as X-Request-Id (given by http/server.ts, or a proxy's), and conditional GET for
 * answers that carry an ETag: a GET or HEAD whose If-None-Match (or If-Modified-Since) names the
 * representation gets 304 without a body, as Express' res.send did — by the same rules (the `fresh`
 * package: weak comparison, `*`, and a request's `Cache-Control: no-cache` asks for the whole answer).
 * A callback hook, not an async one: it never waits, and a promise per answer would be for nothing.
 */
export const answerHeaders: onSendHookHandler = (request, reply, payload, done) => {
  reply.header('X-Request-Id', request.id);
  if ((request.method !== 'GET' && request.method !== 'HEAD') || reply.statusCode < 200 || reply.statusCode >= 300) return done(null, payload);
  const etag = reply.getHeader('etag');
  if (etag === undefined) return done(null, payload);
  if (!fresh(request.headers, { etag: String(etag), 'last-modified': reply.getHeader('last-modified') as string | undefined })) return done(null, payload);
  reply.code(304);
  for (const name of ['content-type', 'content-length', 'content-encoding', 'transfer-encoding']) reply.removeHeader(name);
  // No payload at all (not ''), so no Content-Length: a 304's would have to be the 200's (RFC 9110 §8.6).
  done(null, null);
};
