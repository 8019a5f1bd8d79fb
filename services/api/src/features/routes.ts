import { Router, type Request, type RequestHandler, type Response } from 'express';
import { principalOf, requirePermission } from '../auth/middleware.js';
import { requireSecondFactor } from '../auth/assurance.js';
import { AppError } from '../../../shared/errors.js';
import { jsonBody } from '../http/body.js';
import { parseOrThrow } from '../http/validate.js';
import { EDIT_NOTE_MAX, FeatureSchema, ListQuerySchema, type FeatureInput } from '../../../shared/features/schema.js';
import { etagOf, parseIfMatch, type FeatureService } from './service.js';

const GEOJSON = 'application/geo+json';

/**
 * /api/features. Each route states its permission first, so an anonymous caller gets 401 (and a
 * caller whose role lacks it 403) before any body is read.
 */
export function featureRoutes(service: FeatureService, options: { beforeCreate?: RequestHandler[] } = {}): Router {
  const router = Router();

  router.get('/', requirePermission('read', 'read features'), async (req, res) => {
    const query = parseOrThrow(ListQuerySchema, singleValued(req.query), 'INVALID_QUERY', 'query');
    const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
    const started = performance.now();
    const page = await service.list(query, after);
    // How much of the response time is the database: visible in browser dev tools and the benchmark.
    res.setHeader('Server-Timing', `db;dur=${(performance.now() - started).toFixed(1)}`);
    const links: Array<{ rel: string; href: string; type: string }> = [];
    if (page.nextAfter !== null) {
      const href = withCursor(req, encodeCursor(page.nextAfter));
      links.push({ rel: 'next', href, type: GEOJSON });
      res.setHeader('Link', `<${href}>; rel="next"`);
    }
    const head = `{"type":"FeatureCollection","numberReturned":${page.count},"links":${JSON.stringify(links)},"features":`;
    res.type(GEOJSON);
    writeEnvelope(res, head, page.featuresJson, '}');
  });

  // beforeCreate: the Idempotency-Key handling (http/idempotency.ts), between validation and the create:
  // a body that is not a feature is refused before a key is reserved (or its body hashed).
  const validFeature: RequestHandler = (req, _res, next) => {
    req.body = parseOrThrow(FeatureSchema, req.body, 'VALIDATION_FAILED', 'feature');
    next();
  };
  router.post('/', requirePermission('create', 'create features'), ...jsonBody(), validFeature, ...(options.beforeCreate ?? []), async (req, res) => {
    const created = await service.create(principalOf(res), req.body as FeatureInput);
    res
      .status(201)
      .location(`${req.baseUrl}/${encodeURIComponent(created.id)}`)
      .setHeader('ETag', etagOf(created.version))
      .type(GEOJSON)
      .send(created.json);
  });

  router.get('/:id', requirePermission('read', 'read features'), async (req, res) => {
    const feature = await service.get(featureId(req));
    res.setHeader('ETag', etagOf(feature.version));
    res.setHeader('Cache-Control', 'no-cache');
    res.type(GEOJSON).send(feature.json);
  });

  router.put('/:id', requirePermission('update:own', 'update features'), ...jsonBody(), async (req, res) => {
    const id = featureId(req);
    const input = parseOrThrow(FeatureSchema, req.body, 'VALIDATION_FAILED', 'feature');
    const updated = await service.replace(principalOf(res), id, input, parseIfMatch(req.get('if-match')), editNote(req.get('x-edit-note')));
    res.setHeader('ETag', etagOf(updated.version));
    res.type(GEOJSON).send(updated.json);
  });

  router.delete('/:id', requirePermission('delete', 'delete features'), requireSecondFactor('delete features'), async (req, res) => {
    await service.remove(principalOf(res), featureId(req), parseIfMatch(req.get('if-match')));
    res.status(204).end();
  });

  router.get('/:id/history', requirePermission('read', 'read feature history'), async (req, res) => {
    const id = featureId(req);
    const { versionsJson, decisionsJson } = await service.history(id);
    res.type('application/json').send(`{"featureId":${JSON.stringify(id)},"versions":${versionsJson},"decisions":${decisionsJson}}`);
  });

  router.all(['/', '/:id', '/:id/history'], (req, res) => {
    const allow = req.path === '/' ? 'GET, HEAD, POST' : req.path.endsWith('/history') ? 'GET, HEAD' : 'GET, HEAD, PUT, DELETE';
    res.setHeader('Allow', allow);
    throw new AppError('METHOD_NOT_ALLOWED', `${req.method} is not supported here; allowed: ${allow}`);
  });

  return router;
}

/**
 * A JSON document whose big middle part (the features array, stored text joined in Node) is written
 * between its head and tail rather than concatenated with them, which would copy megabytes once more.
 * The middle is encoded to UTF-8 once, and used for both its length and the write; the three writes
 * leave in one writev.
 */
export function writeEnvelope(res: Response, head: string, middle: string, tail: string): void {
  const body = Buffer.from(middle, 'utf8');
  res.setHeader('Content-Length', Buffer.byteLength(head) + body.length + Buffer.byteLength(tail));
  res.cork();
  res.write(head);
  res.write(body);
  res.end(tail);
  res.uncork();
}

/**
 * The id from the path. Ids written outside the API (WFS-T, SQL) may use characters the API would
 * not hand out, so lookups accept any text a row could hold; something no row can hold is a 404.
 */
function featureId(req: Request): string {
  const id = req.params.id as string;
  if (id.length === 0 || id.length > 255 || id.includes('\u0000')) throw new AppError('FEATURE_NOT_FOUND', 'no feature with this id');
  return id;
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

/** Repeated query parameters (?limit=1&limit=2) are ambiguous: refuse them by name. */
function singleValued(query: Request['query']): Record<string, unknown> {
  for (const [key, value] of Object.entries(query)) {
    if (Array.isArray(value)) {
      throw new AppError('INVALID_QUERY', `invalid query: ${key}: must be given once`, { fields: [{ field: key, message: 'must be given once' }] });
    }
  }
  return query;
}

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

function withCursor(req: Request, cursor: string): string {
  const url = new URL(req.originalUrl, 'http://localhost');
  url.searchParams.set('cursor', cursor);
  return `${url.pathname}${url.search}`;
}
