import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RequestHandler } from 'express';
import type { Logger } from 'pino';
import { can } from '../auth/permissions.js';
import { BODY_LIMIT_BYTES, readJsonValue } from '../http/body.js';
import { simpleRequestCorsHeaders } from '../http/cors.js';
import { IDEMPOTENCY_HEADER } from '../http/idempotency.js';
import { toAppError } from '../http/problem.js';
import { requestIdOf } from '../http/server.js';
import { parseOrThrow } from '../http/validate.js';
import { sendProblem } from '../../../shared/errors.js';
import { FeatureSchema } from '../../../shared/features/schema.js';
import type { Authenticator, Principal } from '../../../shared/principal.js';
import type { FastPath } from '../../../shared/http-server.js';
import { etagOf, type FeatureService } from './service.js';

/**
 * POST /api/features answered without Express, for the case that is nearly every create: a Bearer
 * (or introspected) caller allowed to create, sending a UTF-8 JSON body of known length.
 *
 * Why: measured under the POST load of bench/api.bench.ts, Express' layers (router walk, type-is,
 * body-parser and raw-body, res.send) cost more CPU per create than the one database statement's
 * client side; the database does one round trip (features.api_insert) either way.
 *
 * Invariant: whatever this path answers is what Express would answer, byte for byte apart from header
 * order, for the same request; test/feature-create-fast-path.test.ts compares both, error cases and
 * the rate limit included. The decision to take a request is made BEFORE its body is read and before
 * it is counted by the rate limiter, and anything unusual is handed to Express untouched (`fallback`):
 * another path or a query string, an Idempotency-Key (its reservation lives in http/idempotency.ts), a
 * media type other than application/json or application/geo+json with no charset or UTF-8, a
 * Content-Encoding, chunked or empty bodies, one over 1 MiB, failed credentials, a caller who may not
 * create, and a cookie session (its CSRF Origin check is http/csrf.ts'). Once taken, the request is
 * counted by the same limiter instance as Express' (so one budget), and every failure after that —
 * the limit reached, malformed JSON, a lone surrogate, a zod failure, a database error — is answered
 * here with the same problem+json the Express error middleware (http/problem.ts) writes.
 */

const PATH = '/api/features';
/** The media types jsonBody() accepts, with no parameter or charset=utf-8 (what body-parser then decodes). */
const JSON_CONTENT_TYPE = /^application\/(?:geo\+)?json(?:[ \t]*;[ \t]*charset=(?:utf-8|"utf-8"))?$/i;
const IDEMPOTENCY = IDEMPOTENCY_HEADER.toLowerCase();

export interface FeatureCreateFastPathOptions {
  service: FeatureService;
  /**
   * The authenticator without recording: a caller is recorded (`record`) only once the request has
   * passed the rate limit, in the order Express runs the limiter and then the recording authenticator.
   */
  authenticator: Authenticator;
  record: (principal: Principal) => Promise<void>;
  /** CORS_ORIGINS, normalised (http/cors.ts allowedOrigins). */
  allowedOrigins: ReadonlySet<string>;
  /** The app's change limiter (the same instance Express runs), when one is configured. */
  rateLimit?: RequestHandler | undefined;
  logger: Logger;
}

export function featureCreateFastPath(options: FeatureCreateFastPathOptions): FastPath {
  const { service, authenticator, record, allowedOrigins, rateLimit, logger } = options;

  /** The problem+json answer of http/problem.ts' problemHandler, with the headers set so far. */
  const fail = (req: IncomingMessage, res: ServerResponse, error: unknown): void => {
    const appError = toAppError(error);
    if (!appError || appError.statusCode >= 500) logger.error({ err: error, reqId: requestIdOf(req), method: req.method, url: req.url }, 'request failed');
    if (res.headersSent) {
      res.destroy();
      return;
    }
    sendProblem(res, appError);
  };

  const create = async (req: IncomingMessage, res: ServerResponse, principal: Principal, length: number) => {
    await record(principal);
    const input = parseOrThrow(FeatureSchema, await readJson(req, length), 'VALIDATION_FAILED', 'feature');
    const created = await service.create(principal, input);
    res.statusCode = 201;
    res.setHeader('Location', `${PATH}/${encodeURIComponent(created.id)}`);
    res.setHeader('ETag', etagOf(created.version));
    res.setHeader('Content-Type', 'application/geo+json; charset=utf-8');
    res.setHeader('Content-Length', Buffer.byteLength(created.json));
    res.end(created.json);
  };

  return (req, res, fallback) => {
    const length = creatableLength(req);
    if (length === undefined) return fallback();
    authenticator.authenticate(req).then(
      (principal) => {
        if (principal.via === 'session' || !can(principal, 'create')) return fallback();
        // From here on this path answers. The headers every /api answer carries, as app.ts sets them.
        res.setHeader('X-Content-Type-Options', 'nosniff');
        for (const [name, value] of Object.entries(simpleRequestCorsHeaders(allowedOrigins, req.headers.origin))) res.setHeader(name, value);
        const proceed = (error?: unknown) => {
          if (error !== undefined) return fail(req, res, error);
          create(req, res, principal, length).catch((failure: unknown) => fail(req, res, failure));
        };
        if (!rateLimit) return proceed();
        // express-rate-limit uses only Node's request and response API with the key generator app.ts gives it.
        void rateLimit(req as never, res as never, proceed);
      },
      // Credentials that fail: nothing read, nothing counted; Express answers as always.
      () => fallback(),
    );
  };
}

/** The declared body length of a create this path may take, else undefined (see the invariant above). */
function creatableLength(req: IncomingMessage): number | undefined {
  if (req.method !== 'POST' || req.url !== PATH) return undefined;
  const headers = req.headers;
  if (headers[IDEMPOTENCY] !== undefined || headers['transfer-encoding'] !== undefined || headers['content-encoding'] !== undefined) return undefined;
  const type = headers['content-type'];
  if (type === undefined || !JSON_CONTENT_TYPE.test(type)) return undefined;
  const declared = headers['content-length'];
  if (declared === undefined || !/^\d{1,7}$/.test(declared)) return undefined;
  const length = Number(declared);
  return length > 0 && length <= BODY_LIMIT_BYTES ? length : undefined;
}

/**
 * The body as jsonBody() reads it: the bytes of the declared length, then http/body.ts' readJsonValue.
 * Every callback here is guarded: whatever the body holds ends as a rejection, which create() answers
 * as a problem, never as an exception outside the request.
 */
function readJson(req: IncomingMessage, length: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let received = 0;
    const aborted = () => reject(Object.assign(new Error('request aborted'), { type: 'request.aborted', status: 400 }));
    req.on('data', (chunk: Buffer) => {
      received += chunk.length;
      chunks.push(chunk);
    });
    // The client may have gone while the caller was authenticated: 'aborted' has fired already then.
    if (req.destroyed) return aborted();
    req.once('error', aborted);
    req.once('close', () => {
      if (!req.complete) aborted();
    });
    req.once('end', () => {
      if (received !== length) return reject(Object.assign(new Error('request size did not match content length'), { type: 'request.size.invalid', status: 400 }));
      // readJsonValue rejects (never throws) for whatever the bytes hold.
      readJsonValue(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, received)).then(resolve, reject);
    });
  });
}
