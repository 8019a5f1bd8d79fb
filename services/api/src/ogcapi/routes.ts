import accepts from 'accepts';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { principalOf, requirePermission } from '../auth/middleware.js';
import { can } from '../auth/permissions.js';
import { requireSecondFactor } from '../auth/assurance.js';
import type { Db } from '../db/pool.js';
import { sendEnvelope } from '../features/routes.js';
import { joinFeatures } from '../features/queries.js';
import { etagOf, parseIfMatch, createFeatureService } from '../features/service.js';
import { jsonBody } from '../http/body.js';
import { addVary, featureIdParam, header, methodNotAllowed, param, sendText } from '../http/fastify.js';
import { parseOrThrow } from '../http/validate.js';
import { AppError } from '../../../shared/errors.js';
import { FeatureSchema, KATEGORIEN, type FeatureInput, type Kategorie } from '../../../shared/features/schema.js';
import { CONFORMS_TO } from './conformance.js';
import { contentCrsOf, withAxesSwapped, withoutCheckedBoxes } from './content-crs.js';
import { CRS84, SUPPORTED_CRS, contentCrsHeader, parseCrs } from './crs.js';
import * as html from './html.js';
import type { Link } from './html.js';
import { buildOgcOpenApiDocument } from './openapi.js';
import { ITEMS_PARAMETERS, ITEM_PARAMETERS, encodeCursor, parseFormat, parseItemsQuery, singleValues, type Format } from './params.js';
import { createCollectionExtents, type Bbox4, type CollectionExtents } from './extent.js';
import { QUERYABLES } from './queries.js';
import { createOgcReadService } from './service.js';

/**
 * OGC API – Features (Parts 1–4) at /ogcapi over the feature API's data. Reads go through
 * ogcapi/service.ts (the feature API's Feature JSON and conditions, plus CRS, datetime and CQL2);
 * writes call the feature API's service itself, so roles, If-Match, QC and history are one code path.
 *
 * Collections: `features` holds every feature; `friedhof`, `blumenbeet` and `denkmal` one kategorie
 * each. Everyone may read (the guest's `read` permission, as on /api/features).
 */

const GEOJSON = 'application/geo+json';
const JSON_TYPE = 'application/json';
const HTML_TYPE = 'text/html';
const OPENAPI_TYPE = 'application/vnd.oai.openapi+json;version=3.0';
const MERGE_PATCH = 'application/merge-patch+json';
const WRITE_TYPES = [JSON_TYPE, GEOJSON];

interface Collection {
  id: string;
  title: string;
  description: string;
  kategorie?: Kategorie;
}

const TITLES: Record<Kategorie, string> = { friedhof: 'Friedhöfe', blumenbeet: 'Blumenbeete', denkmal: 'Denkmäler' };
export const COLLECTIONS: readonly Collection[] = [
  { id: 'features', title: 'Alle Features', description: 'Every mapped feature: cemeteries, flower beds and monuments.' },
  ...KATEGORIEN.map((k) => ({ id: k, title: TITLES[k], description: `Features of kategorie ${k}.`, kategorie: k })),
];

export interface OgcApiOptions {
  db: Db;
  /** Shared with /api/features, whose writes must empty it too (app.ts). */
  extents?: CollectionExtents;
}

/**
 * The /ogcapi scope's routes. The scope's hooks (app.ts: nosniff, CORS, the change limit, the caller,
 * the CSRF Origin check) are the /api scope's.
 */
export async function ogcApiRoutes(router: FastifyInstance, options: OgcApiOptions): Promise<void> {
  const reads = createOgcReadService(options.db);
  const extents = options.extents ?? createCollectionExtents(options.db);
  const features = createFeatureService(options.db, { onWrite: extents.invalidate });

  router.get('/', { onRequest: requirePermission('read', 'read features') }, async (req, res) => {
    const { format } = formatOnly(req, res);
    const base = baseUrl(req);
    const doc = {
      title: 'OGC API – Features',
      description: 'Mapped features of the city (friedhof, blumenbeet, denkmal) as OGC API – Features: read, filter with CQL2, choose a CRS, and edit with a token.',
      links: [
        ...selfAndAlternate(`${base}/`, format, JSON_TYPE),
        { rel: 'service-desc', href: `${base}/api`, type: OPENAPI_TYPE, title: 'the API definition (OpenAPI 3.0)' },
        { rel: 'service-doc', href: `${base}/api?f=html`, type: HTML_TYPE, title: 'the API definition as HTML' },
        { rel: 'conformance', href: `${base}/conformance`, type: JSON_TYPE, title: 'conformance classes' },
        { rel: 'http://www.opengis.net/def/rel/ogc/1.0/conformance', href: `${base}/conformance`, type: JSON_TYPE, title: 'conformance classes' },
        { rel: 'data', href: `${base}/collections`, type: JSON_TYPE, title: 'collections' },
        { rel: 'http://www.opengis.net/def/rel/ogc/1.0/data', href: `${base}/collections`, type: JSON_TYPE, title: 'collections' },
      ],
    };
    if (format === 'html') return sendHtml(res, html.landingHtml(doc, home(base)));
    return sendText(res, JSON_TYPE, JSON.stringify(doc));
  });

  router.get('/conformance', { onRequest: requirePermission('read', 'read features') }, async (req, res) => {
    const { format } = formatOnly(req, res);
    if (format === 'html') return sendHtml(res, html.conformanceHtml(CONFORMS_TO, home(baseUrl(req))));
    return sendText(res, JSON_TYPE, JSON.stringify({ conformsTo: CONFORMS_TO }));
  });

  router.get('/api', { onRequest: requirePermission('read', 'read features') }, async (req, res) => {
    const { format } = formatOnly(req, res);
    const base = baseUrl(req);
    if (format === 'html') {
      return sendHtml(res, html.landingHtml({ title: 'API-Definition', description: 'The OpenAPI 3.0 definition of this service.', links: [{ rel: 'service-desc', href: `${base}/api?f=json`, type: OPENAPI_TYPE, title: 'OpenAPI 3.0 (JSON)' }] }, home(base)));
    }
    return sendText(res, OPENAPI_TYPE, JSON.stringify(buildOgcOpenApiDocument(base)));
  });

  router.get('/collections', { onRequest: requirePermission('read', 'read features') }, async (req, res) => {
    const { format } = formatOnly(req, res);
    const base = baseUrl(req);
    const views = COLLECTIONS.map((c) => collectionView(base, c));
    if (format === 'html') return sendHtml(res, html.collectionsHtml(views, home(base)));
    const boxes = await extents.get();
    return sendText(res, JSON_TYPE, JSON.stringify({ links: selfAndAlternate(`${base}/collections`, format, JSON_TYPE), collections: views.map((v) => collectionJson(v, boxes.get(v.id))) }));
  });

  router.get('/collections/:collectionId', { onRequest: requirePermission('read', 'read features') }, async (req, res) => {
    const collection = collectionOf(req);
    const { format } = formatOnly(req, res);
    const base = baseUrl(req);
    const view = collectionView(base, collection);
    if (format === 'html') return sendHtml(res, html.collectionHtml(view, home(base), { rel: 'data', href: `${base}/collections?f=html`, title: 'Sammlungen' }));
    return sendText(res, JSON_TYPE, JSON.stringify(collectionJson(view, (await extents.get()).get(view.id))));
  });

  router.get('/collections/:collectionId/queryables', { onRequest: requirePermission('read', 'read features') }, async (req, res) => {
    const collection = collectionOf(req);
    const { format } = formatOnly(req, res);
    const base = baseUrl(req);
    const properties = Object.fromEntries(
      Object.entries(QUERYABLES).map(([name, q]) => {
        const schema: Record<string, unknown> =
          q.type === 'geometry' ? { format: 'geometry-any' } : q.type === 'timestamp' ? { type: 'string', format: 'date-time' } : q.type === 'number' ? { type: 'integer' } : { type: 'string' };
        if ('enum' in q) schema.enum = q.enum;
        return [name, { title: name, description: q.description, ...schema }];
      }),
    );
    const doc = {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      $id: `${base}/collections/${collection.id}/queryables`,
      type: 'object',
      title: collection.title,
      properties,
      additionalProperties: false,
    };
    if (format === 'html') {
      const links = Object.entries(properties).map(([name, p]) => ({ rel: 'queryable', href: `#${name}`, title: `${name} – ${(p as { description: string }).description}` }));
      return sendHtml(res, html.landingHtml({ title: `Queryables: ${collection.title}`, description: 'Properties a CQL2 filter may use.', links }, home(base)));
    }
    return sendText(res, 'application/schema+json', JSON.stringify(doc));
  });

  router.get('/collections/:collectionId/items', { onRequest: requirePermission('read', 'read features') }, async (req, res) => {
    const collection = collectionOf(req);
    const query = parseItemsQuery(req.query as Record<string, unknown>);
    const format = negotiate(req, res, query.format);
    const base = baseUrl(req);
    const itemsUrl = `${base}/collections/${collection.id}/items`;
    // A kategorie parameter on a kategorie's own collection: both must hold.
    const contradictory = collection.kategorie !== undefined && query.kategorie !== undefined && query.kategorie !== collection.kategorie;
    const cursor = query.cursor;
    const page = contradictory
      ? { features: [], count: 0, firstId: null, lastId: null, hasMore: false }
      : await reads.list({
          bbox: query.bbox,
          crsBox: query.crsBox,
          kategorie: collection.kategorie ?? query.kategorie,
          status: query.status,
          datetime: query.datetime,
          filter: query.filter,
          after: cursor && 'after' in cursor ? cursor.after : undefined,
          before: cursor && 'before' in cursor ? cursor.before : undefined,
          limit: query.limit,
          crs: query.crs,
        });
    const backwards = cursor !== undefined && 'before' in cursor;
    const links: Link[] = [...selfAndAlternate(withParams(req, itemsUrl, {}), format, GEOJSON)];
    const pageType = format === 'html' ? HTML_TYPE : GEOJSON;
    const hasNext = backwards ? page.lastId !== null : page.hasMore && page.lastId !== null;
    const hasPrev = backwards ? page.hasMore && page.firstId !== null : cursor !== undefined && page.firstId !== null;
    if (hasNext) links.push({ rel: 'next', href: withParams(req, itemsUrl, { cursor: encodeCursor('after', page.lastId!) }), type: pageType, title: 'next page' });
    if (hasPrev) links.push({ rel: 'prev', href: withParams(req, itemsUrl, { cursor: encodeCursor('before', page.firstId!) }), type: pageType, title: 'previous page' });
    links.push({ rel: 'collection', href: `${base}/collections/${collection.id}`, type: JSON_TYPE, title: collection.title });
    res.header('Content-Crs', contentCrsHeader(query.crs));
    res.header('Link', links.filter((l) => l.rel === 'next' || l.rel === 'prev').map((l) => `<${l.href}>; rel="${l.rel}"`).join(', ') || `<${links[0]!.href}>; rel="self"`);
    if (format === 'html') {
      const items = JSON.parse(joinFeatures(page.features)) as Array<{ id: string; geometry: { type: string }; properties: Record<string, unknown> }>;
      const trail = [home(base), { rel: 'data', href: `${base}/collections?f=html`, title: 'Sammlungen' }, { rel: 'collection', href: `${base}/collections/${collection.id}?f=html`, title: collection.title }];
      return sendHtml(res, html.itemsHtml(collection.title, items, links, (id) => `${itemsUrl}/${encodeURIComponent(id)}?f=html`, trail));
    }
    // numberMatched only when it costs nothing: the whole result fits on this first page.
    const matched = cursor === undefined && !page.hasMore ? `"numberMatched":${page.count},` : '';
    const head = `{"type":"FeatureCollection","timeStamp":${JSON.stringify(new Date().toISOString())},${matched}"numberReturned":${page.count},"links":${JSON.stringify(links)},"features":`;
    return sendEnvelope(res, GEOJSON, head, page.features, '}');
  });

  router.get('/collections/:collectionId/items/:featureId', { onRequest: requirePermission('read', 'read features') }, async (req, res) => {
    const collection = collectionOf(req);
    const q = singleValues(req.query as Record<string, unknown>, ITEM_PARAMETERS);
    const format = negotiate(req, res, parseFormat(q.f));
    const crs = parseCrs(q.crs, 'crs');
    const id = featureIdParam(req, 'featureId');
    const found = await reads.get(id, crs);
    if (!found || !belongs(collection, found.kategorie)) throw notFound(id, collection);
    const base = baseUrl(req);
    const itemUrl = `${base}/collections/${collection.id}/items/${encodeURIComponent(id)}`;
    const links: Link[] = [
      ...selfAndAlternate(withParams(req, itemUrl, {}), format, GEOJSON),
      { rel: 'collection', href: `${base}/collections/${collection.id}`, type: JSON_TYPE, title: collection.title },
    ];
    const feature = JSON.parse(found.json) as { id: string; geometry: { type: string }; properties: Record<string, unknown> };
    // Each representation its own ETag: a cache revalidating the HTML page must not get a 304 for the
    // GeoJSON (or the reverse). If-Match of a change takes the GeoJSON one, the feature's version.
    res.header('ETag', format === 'html' ? htmlEtagOf(found.version) : etagOf(found.version));
    res.header('Cache-Control', 'no-cache');
    res.header('Content-Crs', contentCrsHeader(crs));
    if (format === 'html') {
      const trail = [home(base), { rel: 'collection', href: `${base}/collections/${collection.id}/items?f=html`, title: collection.title }];
      return sendHtml(res, html.itemHtml(feature, links, trail));
    }
    return sendText(res, GEOJSON, JSON.stringify({ ...feature, links }));
  });

  // --- Part 4: create, replace, update, delete --------------------------------------------------

  router.post('/collections/:collectionId/items', { onRequest: requirePermission('create', 'create features'), ...body(WRITE_TYPES) }, async (req, res) => {
    const collection = collectionOf(req);
    const input = featureInput(collection, await inStorageCrs(req, req.body));
    const created = await features.create(principalOf(req), input);
    const base = baseUrl(req);
    res
      .code(201)
      .header('Location', `${base}/collections/${collection.id}/items/${encodeURIComponent(created.id)}`)
      .header('ETag', etagOf(created.version))
      .header('Content-Crs', contentCrsHeader(CRS84));
    return sendText(res, GEOJSON, created.json);
  });

  router.put('/collections/:collectionId/items/:featureId', { onRequest: requirePermission('update:own', 'update features'), ...body(WRITE_TYPES) }, async (req, res) => {
    const collection = collectionOf(req);
    const id = featureIdParam(req, 'featureId');
    await assertInCollection(collection, id);
    const input = featureInput(collection, await inStorageCrs(req, req.body), id);
    const updated = await features.replace(principalOf(req), id, input, parseIfMatch(header(req, 'if-match')));
    res.header('ETag', etagOf(updated.version)).header('Content-Crs', contentCrsHeader(CRS84));
    return sendText(res, GEOJSON, updated.json);
  });

  router.patch('/collections/:collectionId/items/:featureId', { onRequest: requirePermission('update:own', 'update features'), ...body([MERGE_PATCH, ...WRITE_TYPES]) }, async (req, res) => {
    const collection = collectionOf(req);
    const id = featureIdParam(req, 'featureId');
    contentCrsOf(header(req, 'content-crs')); // an unsupported Content-Crs is refused before anything is read
    if (typeof req.body !== 'object' || req.body === null || Array.isArray(req.body)) {
      throw new AppError('VALIDATION_FAILED', 'a merge patch must be a JSON object', { fields: [{ field: '(body)', message: 'must be a JSON object' }] });
    }
    const current = await features.get(id);
    if (!belongs(collection, (JSON.parse(current.json) as { properties: { kategorie: string } }).properties.kategorie)) throw notFound(id, collection);
    const expected = parseIfMatch(header(req, 'if-match'));
    if (expected !== undefined && expected !== '*' && !expected.includes(current.version)) {
      throw new AppError('PRECONDITION_FAILED', `the feature is at version ${current.version}; fetch it again and reapply your change`, { headers: { ETag: etagOf(current.version) } });
    }
    // A patched geometry (and bbox) arrives in the patch's Content-Crs; the current one is in storage coordinates.
    const patch = await inStorageCrs(req, req.body);
    const base = JSON.parse(current.json) as Record<string, unknown>;
    const exact = await reads.exactGeometry(id);
    if (exact !== undefined) base.geometry = exact;
    const merged = mergePatch(base, patch);
    const input = featureInput(collection, merged, id);
    // The patch was applied to this version: a change committed in between makes it stale (412).
    const updated = await features.replace(principalOf(req), id, input, [current.version]);
    res.header('ETag', etagOf(updated.version)).header('Content-Crs', contentCrsHeader(CRS84));
    return sendText(res, GEOJSON, updated.json);
  });

  router.delete('/collections/:collectionId/items/:featureId', { onRequest: [requirePermission('delete', 'delete features'), requireSecondFactor('delete features')] }, async (req, res) => {
    const collection = collectionOf(req);
    const id = featureIdParam(req, 'featureId');
    await assertInCollection(collection, id);
    await features.remove(principalOf(req), id, parseIfMatch(header(req, 'if-match')));
    return res.code(204).send();
  });

  // OPTIONS announces what this caller may do here: QGIS enables editing when POST/PUT/DELETE are listed.
  router.options('/collections/:collectionId/items', async (req, res) => {
    collectionOf(req);
    const principal = principalOf(req);
    res.header('Allow', ['GET', 'HEAD', ...(can(principal, 'create') ? ['POST'] : []), 'OPTIONS'].join(', '));
    return res.code(204).send();
  });
  router.options('/collections/:collectionId/items/:featureId', async (req, res) => {
    collectionOf(req);
    const principal = principalOf(req);
    const mayUpdate = can(principal, 'update') || can(principal, 'update:own');
    res.header('Allow', ['GET', 'HEAD', ...(mayUpdate ? ['PUT', 'PATCH'] : []), ...(can(principal, 'delete') ? ['DELETE'] : []), 'OPTIONS'].join(', '));
    return res.code(204).send();
  });

  const allowed: Record<string, string> = {
    '/collections/:collectionId/items': 'GET, HEAD, POST, OPTIONS',
    '/collections/:collectionId/items/:featureId': 'GET, HEAD, PUT, PATCH, DELETE, OPTIONS',
  };
  methodNotAllowed(router, Object.keys(allowed), (url) => allowed[url]!);
  methodNotAllowed(router, ['/', '/conformance', '/api', '/collections', '/collections/:collectionId', '/collections/:collectionId/queryables'], 'GET, HEAD');

  /**
   * The body in storage coordinates (content-crs.ts): in EPSG:4326 (latitude first) its axes swapped,
   * in a projected CRS its bbox members checked and dropped and its geometry transformed by PostGIS;
   * then the feature API's validation applies as for CRS84.
   */
  async function inStorageCrs(req: FastifyRequest, body: unknown): Promise<unknown> {
    const crs = contentCrsOf(header(req, 'content-crs'));
    if (crs === CRS84 || !isRecord(body)) return body;
    if (crs.latitudeFirst) return withAxesSwapped(body);
    const checked = withoutCheckedBoxes(body, crs);
    if (!isRecord(checked.geometry)) return checked;
    const { type, coordinates } = checked.geometry;
    const transformed = (await reads.geometryToStorage({ type, coordinates }, crs)) as Record<string, unknown>;
    return { ...checked, geometry: { ...checked.geometry, ...transformed } };
  }

  async function assertInCollection(collection: Collection, id: string): Promise<void> {
    if (collection.kategorie === undefined) return;
    const found = await reads.get(id, CRS84);
    if (!found || !belongs(collection, found.kategorie)) throw notFound(id, collection);
  }
}

// --- helpers --------------------------------------------------------------------------------------

function collectionOf(req: FastifyRequest): Collection {
  const id = param(req, 'collectionId');
  const collection = COLLECTIONS.find((c) => c.id === id);
  if (!collection) throw new AppError('NOT_FOUND', `no collection ${id}; the collections are ${COLLECTIONS.map((c) => c.id).join(', ')}`);
  return collection;
}

function belongs(collection: Collection, kategorie: string): boolean {
  return collection.kategorie === undefined || collection.kategorie === kategorie;
}

function notFound(id: string, collection: Collection): AppError {
  return new AppError('FEATURE_NOT_FOUND', `no feature with id ${id} in collection ${collection.id}`);
}


/**
 * The feature of a write, validated by the feature API's schema. In a kategorie's collection a missing
 * kategorie is that one (a client may leave it out there), a different one is refused.
 */
function featureInput(collection: Collection, body: unknown, pathId?: string): FeatureInput {
  let candidate = asSentByGisClients(body, pathId);
  if (collection.kategorie !== undefined && isRecord(candidate) && isRecord(candidate.properties) && candidate.properties.kategorie === undefined) {
    candidate = { ...candidate, properties: { ...candidate.properties, kategorie: collection.kategorie } };
  }
  const input = parseOrThrow(FeatureSchema, candidate, 'VALIDATION_FAILED', 'feature');
  if (collection.kategorie !== undefined && input.properties.kategorie !== collection.kategorie) {
    throw new AppError('VALIDATION_FAILED', `invalid feature: properties.kategorie: must be ${collection.kategorie} in this collection`, {
      fields: [{ field: 'properties.kategorie', message: `must be ${collection.kategorie} in this collection` }],
    });
  }
  return input;
}

const SERVER_MAINTAINED = ['status', 'version', 'createdBy', 'createdAt', 'updatedBy', 'updatedAt'];

/**
 * What clients send, reduced to what the feature schema reads. A Part 4 client writes back the item
 * it read, with the `links` member GET added: they are ignored (nothing else unknown is). QGIS writes
 * every field of the layer: the server-maintained ones (null on a new feature, reformatted dates on an
 * edit) and an `id` field it derived from the feature id. Server-maintained members are ignored anyway
 * (the schema accepts them only so a fetched feature can be sent back), so they are dropped here;
 * `properties.id` is the feature id, and must agree with the URL's or the body's.
 */
function asSentByGisClients(body: unknown, pathId: string | undefined): unknown {
  if (!isRecord(body)) return body;
  const feature = { ...body };
  delete feature.links;
  if (!isRecord(feature.properties)) return feature;
  const properties = { ...feature.properties };
  for (const key of SERVER_MAINTAINED) delete properties[key];
  const result: Record<string, unknown> = { ...feature, properties };
  if ('id' in properties) {
    const propertyId = properties.id;
    delete properties.id;
    if (typeof propertyId === 'string' || typeof propertyId === 'number') {
      const id = String(propertyId);
      const expected = pathId ?? (typeof body.id === 'string' ? body.id : undefined);
      if (expected !== undefined && expected !== id) {
        throw new AppError('VALIDATION_FAILED', `invalid feature: properties.id: must equal the feature id (${expected})`, { fields: [{ field: 'properties.id', message: `must equal the feature id (${expected})` }] });
      }
      if (pathId === undefined && body.id === undefined) result.id = id;
    }
  }
  return result;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** RFC 7396 JSON Merge Patch: objects merge member by member, null removes, anything else replaces. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (!isRecord(patch)) return patch;
  const result: Record<string, unknown> = isRecord(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete result[key];
    else result[key] = mergePatch(result[key], value);
  }
  return result;
}

/** JSON bodies (http/body.ts) of the media types given; anything else is 415 before reading. */
function body(types: string[]) {
  return jsonBody({ types, acceptHeaders: { 'Accept-Patch': MERGE_PATCH, 'Accept-Post': WRITE_TYPES.join(', ') } });
}

/**
 * The public base of /ogcapi for links: the scheme from X-Forwarded-Proto when a proxy (Caddy) set it,
 * the host the client asked for.
 */
function baseUrl(req: FastifyRequest): string {
  const forwarded = header(req, 'x-forwarded-proto')?.split(',')[0]?.trim();
  const scheme = forwarded === 'https' || forwarded === 'http' ? forwarded : req.protocol;
  return `${scheme}://${header(req, 'host') ?? 'localhost'}/ogcapi`;
}

function home(base: string): Link {
  return { rel: 'home', href: `${base}/?f=html`, title: 'OGC API – Features' };
}

/**
 * f= wins; otherwise the Accept header (browsers ask for text/html first); machines get JSON. An
 * answer chosen by Accept says so (Vary: Accept), so a shared cache keeps the HTML and the JSON of one
 * URL apart.
 */
function negotiate(req: FastifyRequest, res: FastifyReply, format: Format | undefined): Format {
  if (format) return format;
  addVary(res, 'Accept');
  return accepts(req.raw).type([GEOJSON, JSON_TYPE, HTML_TYPE]) === HTML_TYPE ? 'html' : 'json';
}

/**
 * The format of a resource that takes no parameter but f. GDAL's OAPIF driver appends the query of its
 * connection URL (…/collections/features?crs=…) to every request it makes, the landing page and the
 * API definition included; refused there, GDAL would lose the OpenAPI document and filter on the
 * client. So the items parameters are accepted here and ignored; anything else is still a 400.
 */
function formatOnly(req: FastifyRequest, res: FastifyReply): { format: Format } {
  const q = singleValues(req.query as Record<string, unknown>, ITEMS_PARAMETERS);
  return { format: negotiate(req, res, parseFormat(q.f)) };
}

/** The ETag of an item's HTML page: its own, never equal to the GeoJSON's (the feature's version). */
function htmlEtagOf(version: number): string {
  return `"${version}-html"`;
}

function selfAndAlternate(url: string, format: Format, jsonType: string): Link[] {
  const as = (f: Format) => {
    const u = new URL(url);
    u.searchParams.set('f', f);
    return u.toString();
  };
  const jsonLink = { href: as('json'), type: jsonType };
  const htmlLink = { href: as('html'), type: HTML_TYPE };
  return format === 'html'
    ? [{ rel: 'self', ...htmlLink, title: 'this document' }, { rel: 'alternate', ...jsonLink, title: 'this document as JSON' }]
    : [{ rel: 'self', ...jsonLink, title: 'this document' }, { rel: 'alternate', ...htmlLink, title: 'this document as HTML' }];
}

/** This request's URL on another base path, with some parameters replaced. */
function withParams(req: FastifyRequest, url: string, replace: Record<string, string>): string {
  const original = new URL(req.url, 'http://localhost');
  const result = new URL(url);
  original.searchParams.forEach((value, key) => result.searchParams.set(key, value));
  for (const [key, value] of Object.entries(replace)) result.searchParams.set(key, value);
  return result.toString();
}

function collectionView(base: string, c: Collection): html.CollectionView {
  return {
    id: c.id,
    title: c.title,
    description: c.description,
    crs: SUPPORTED_CRS.map((x) => x.uri),
    links: [
      { rel: 'self', href: `${base}/collections/${c.id}`, type: JSON_TYPE, title: c.title },
      { rel: 'alternate', href: `${base}/collections/${c.id}?f=html`, type: HTML_TYPE, title: `${c.title} as HTML` },
      { rel: 'items', href: `${base}/collections/${c.id}/items`, type: GEOJSON, title: 'the features' },
      { rel: 'items', href: `${base}/collections/${c.id}/items?f=html`, type: HTML_TYPE, title: 'the features as HTML' },
      { rel: 'http://www.opengis.net/def/rel/ogc/1.0/queryables', href: `${base}/collections/${c.id}/queryables`, type: 'application/schema+json', title: 'queryables for filters' },
    ],
  };
}

/** A collection without features has no extent, and then the member is left out (it is optional). */
function collectionJson(view: html.CollectionView, extent: Bbox4 | undefined) {
  return {
    id: view.id,
    title: view.title,
    description: view.description,
    links: view.links,
    ...(extent ? { extent: { spatial: { bbox: [extent], crs: CRS84.uri } } } : {}),
    itemType: 'feature',
    crs: view.crs,
    storageCrs: CRS84.uri,
  };
}

function sendHtml(res: FastifyReply, page: string): FastifyReply {
  return sendText(res, 'text/html', page);
}
