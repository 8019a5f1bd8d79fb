import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { principalOf, requirePermission } from '../auth/middleware.js';
import { requireSecondFactor } from '../auth/assurance.js';
import { AppError } from '../../../shared/errors.js';
import { jsonBody } from '../http/body.js';
import type { IdempotencySteps } from '../http/idempotency.js';
import { featureIdParam, header, type Hook, methodNotAllowed, sendText, singleValued } from '../http/fastify.js';
import { parseOrThrow } from '../http/validate.js';
import { EDIT_NOTE_MAX, FeatureSchema, ListQuerySchema, type FeatureInput } from '../../../shared/features/schema.js';
import { etagOf, parseIfMatch, type FeatureService } from './service.js';

const GEOJSON = 'application/geo+json';

export interface FeatureRouteOptions {
  service: FeatureService;
  /** Steps of a create with Idempotency-Key (http/idempotency.ts), after the body is validated. */
  idempotency?: IdempotencySteps;
}

/**
 * /api/features, a plugin under the /api scope (app.ts). Each route states its permission first (an
 * onRequest hook), so an anonymous caller gets 401 (and a caller whose role lacks it 403) before any
 * body is read.
 */
export async function featureRoutes(app: FastifyInstance, { service, idempotency }: FeatureRouteOptions): Promise<void> {
  app.get('/', { onRequest: requirePermission('read', 'read features') }, async (request, reply) => {
    const query = parseOrThrow(ListQuerySchema, singleValued(request.query), 'INVALID_QUERY', 'query');
    const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
    const started = performance.now();
    const page = await service.list(query, after);
    // How much of the response time is the database: visible in browser dev tools and the benchmark.
    reply.header('Server-Timing', `db;dur=${(performance.now() - started).toFixed(1)}`);
    const links: Array<{ rel: string; href: string; type: string }> = [];
    if (page.nextAfter !== null) {
      const href = withCursor(request, encodeCursor(page.nextAfter));
      links.push({ rel: 'next', href, type: GEOJSON });
      reply.header('Link', `<${href}>; rel="next"`);
    }
    const head = `{"type":"FeatureCollection","numberReturned":${page.count},"links":${JSON.stringify(links)},"features":`;
    return sendEnvelope(reply, GEOJSON, head, page.features, '}');
  });

  // The body is parsed (jsonBody), validated as a feature, then the Idempotency-Key is handled: a body
  // that is not a feature is refused before a key is reserved (or its body hashed).
  const body = jsonBody();
  const validFeature: Hook = async (request) => {
    request.body = parseOrThrow(FeatureSchema, request.body, 'VALIDATION_FAILED', 'feature');
  };
  app.post(
    '/',
    {
      onRequest: requirePermission('create', 'create features'),
      preParsing: body.preParsing,
      preValidation: body.preValidation,
      preHandler: idempotency ? [validFeature, idempotency.preHandler] : validFeature,
      ...(idempotency ? { onSend: idempotency.onSend, onResponse: idempotency.onResponse } : {}),
    },
    async (request, reply) => {
      const created = await service.create(principalOf(request), request.body as FeatureInput);
      reply.code(201).header('Location', `${collectionPath(request)}/${encodeURIComponent(created.id)}`).header('ETag', etagOf(created.version));
      return sendText(reply, GEOJSON, created.json);
    },
  );

  app.get('/:id', { onRequest: requirePermission('read', 'read features') }, async (request, reply) => {
    const feature = await service.get(featureIdParam(request));
    reply.header('ETag', etagOf(feature.version)).header('Cache-Control', 'no-cache');
    return sendText(reply, GEOJSON, feature.json);
  });

  app.put('/:id', { onRequest: requirePermission('update:own', 'update features'), ...body }, async (request, reply) => {
    const id = featureIdParam(request);
    const input = parseOrThrow(FeatureSchema, request.body, 'VALIDATION_FAILED', 'feature');
    const updated = await service.replace(principalOf(request), id, input, parseIfMatch(header(request, 'if-match')), editNote(header(request, 'x-edit-note')));
    reply.header('ETag', etagOf(updated.version));
    return sendText(reply, GEOJSON, updated.json);
  });

  app.delete('/:id', { onRequest: [requirePermission('delete', 'delete features'), requireSecondFactor('delete features')] }, async (request, reply) => {
    await service.remove(principalOf(request), featureIdParam(request), parseIfMatch(header(request, 'if-match')));
    return reply.code(204).send();
  });

  app.get('/:id/history', { onRequest: requirePermission('read', 'read feature history') }, async (request, reply) => {
    const id = featureIdParam(request);
    const { versionsJson, decisionsJson } = await service.history(id);
    return sendText(reply, 'application/json', `{"featureId":${JSON.stringify(id)},"versions":${versionsJson},"decisions":${decisionsJson}}`);
  });

  methodNotAllowed(app, ['/', '/:id', '/:id/history'], (url) => (url === '/' ? 'GET, HEAD, POST' : url.endsWith('/history') ? 'GET, HEAD' : 'GET, HEAD, PUT, DELETE'), (method, allow) => `${method} is not supported here; allowed: ${allow}`);
}

/**
 * A JSON document whose big middle part is an array of stored Feature texts, between its head and
 * tail: written as UTF-8 into one Buffer of the document's exact size, each text encoded once, so the
 * answer's bytes are made in one pass and handed to the socket as they are (Content-Length from the
 * Buffer). Before, the texts were joined into one JS string, which V8 flattened, measured and encoded
 * again: 44.5 % of the API's CPU on a 1 000-feature page. (pg decodes each row from UTF-8 on the way
 * in, whatever the result format: its protocol parser reads every field as a string, so the rows cannot
 * stay bytes from the database to the socket; docs/api.md "The list at a million features".)
 */
export function sendEnvelope(reply: FastifyReply, type: string, head: string, features: readonly string[], tail: string): FastifyReply {
  return reply.type(`${type}; charset=utf-8`).send(envelopeBytes(head, features, tail));
}

/** `head` + the features as a JSON array + `tail`, in UTF-8, in one Buffer of exactly its size. */
export function envelopeBytes(head: string, features: readonly string[], tail: string): Buffer {
  const lengths = new Array<number>(features.length);
  // '[' + ']' and a comma between features.
  let size = Buffer.byteLength(head) + Buffer.byteLength(tail) + 2 + Math.max(0, features.length - 1);
  for (let i = 0; i < features.length; i++) size += lengths[i] = Buffer.byteLength(features[i]!);
  const body = Buffer.allocUnsafe(size);
  let at = body.write(head);
  body[at++] = OPEN_BRACKET;
  for (let i = 0; i < features.length; i++) {
    if (i > 0) body[at++] = COMMA;
    at += body.write(features[i]!, at, lengths[i]!, 'utf8');
  }
  body[at++] = CLOSE_BRACKET;
  at += body.write(tail, at);
  if (at !== size) throw new Error(`envelopeBytes wrote ${at} of ${size} bytes`);
  return body;
}

const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COMMA = 0x2c;

/** The collection's path (/api/features) as the client named it, for Location. */
function collectionPath(request: FastifyRequest): string {
  const end = request.url.indexOf('?');
  const path = end === -1 ? request.url : request.url.slice(0, end);
  return path.endsWith('/') ? path.slice(0, -1) : path;
}


/**
 * X-Edit-Note: why this change was made, kept in the history row it makes. One line of printable
 * text (a header cannot carry more), at most EDIT_NOTE_MAX characters, in UTF-8: Node hands a header's
 * bytes over one character per byte (latin1), so they are decoded here, and bytes that are not UTF-8
 * are a 400 rather than stored as mojibake. Anything else is a 400 too.
 */
export function editNote(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const rule = `must be one line of at most ${EDIT_NOTE_MAX} characters`;
  const refuse = (message: string) => new AppError('VALIDATION_FAILED', `invalid header: X-Edit-Note: ${message}`, { fields: [{ field: 'X-Edit-Note', message }] });
  let note: string;
  try {
    // eslint-disable-next-line no-control-regex
    note = /^[\u0000-\u007f]*$/.test(header) ? header : UTF8.decode(Buffer.from(header, 'latin1'));
  } catch {
    throw refuse('is not valid UTF-8');
  }
  note = note.trim();
  if (note === '') return undefined;
  // eslint-disable-next-line no-control-regex
  if (note.length > EDIT_NOTE_MAX || /[\u0000-\u001f\u007f-\u009f]/.test(note)) throw refuse(rule);
  return note;
}

const UTF8 = new TextDecoder('utf-8', { fatal: true });

const CURSOR_PREFIX = 'c1.';

/** The cursor is the last id of the previous page; opaque to clients so its format may change. */
export function encodeCursor(lastId: string): string {
  return CURSOR_PREFIX + Buffer.from(lastId, 'utf8').toString('base64url');
}

function decodeCursor(cursor: string): string {
  const payload = cursor.startsWith(CURSOR_PREFIX) ? cursor.slice(CURSOR_PREFIX.length) : '';
  const id = /^[A-Za-z0-9_-]+$/.test(payload) ? Buffer.from(payload, 'base64url').toString('utf8') : '';
  if (id.length === 0 || id.includes('\u0000') || encodeCursor(id) !== cursor) {
    throw new AppError('INVALID_QUERY', 'invalid query: cursor: is not a cursor issued by this API', {
      fields: [{ field: 'cursor', message: 'is not a cursor issued by this API' }],
    });
  }
  return id;
}

function withCursor(request: FastifyRequest, cursor: string): string {
  const url = new URL(request.url, 'http://localhost');
  url.searchParams.set('cursor', cursor);
  return `${url.pathname}${url.search}`;
}
