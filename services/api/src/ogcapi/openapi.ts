import { createDocument } from 'zod-openapi';
import { z } from 'zod';
import { DEFAULT_LIMIT, FeatureSchema, MAX_LIMIT, ProblemSchema } from '../../../shared/features/schema.js';
import { MAX_FILTER_DEPTH, MAX_FILTER_LENGTH } from './cql2.js';
import { SUPPORTED_CRS } from './crs.js';
import { STATUSES } from './params.js';

/**
 * The OpenAPI 3.0 definition of /ogcapi (Part 1 /conf/oas30), generated from the feature API's zod
 * schemas, so the feature and problem shapes are the ones /api/openapi.json documents.
 */
const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: ProblemSchema } } });
const geojson = (schema: z.ZodType) => ({ 'application/geo+json': { schema }, 'text/html': { schema: z.string() } });
const json = { 'application/json': { schema: z.object({ links: z.array(z.object({ href: z.string(), rel: z.string() })) }).passthrough() }, 'text/html': { schema: z.string() } };
const crsUris = SUPPORTED_CRS.map((c) => c.uri) as [string, ...string[]];

const LinkSchema = z.object({ href: z.string(), rel: z.string(), type: z.string().optional(), title: z.string().optional() }).meta({ id: 'Link' });
/** The items response: the feature API's Feature inside OGC's collection envelope. */
const OgcFeatureCollectionSchema = z
  .object({
    type: z.literal('FeatureCollection'),
    timeStamp: z.string().optional(),
    numberMatched: z.number().int().optional(),
    numberReturned: z.number().int(),
    links: z.array(LinkSchema),
    features: z.array(FeatureSchema),
  })
  .meta({ id: 'OgcFeatureCollection' });
const OgcFeatureSchema = FeatureSchema.extend({ links: z.array(LinkSchema).optional() }).meta({ id: 'OgcFeature' });

const f = z.enum(['json', 'html']).optional().meta({ description: 'encoding; overrides the Accept header' });
const collectionId = z.string().meta({ description: 'features (all), friedhof, blumenbeet or denkmal' });
const featureId = z.string().meta({ description: 'feature identifier' });
const ifMatch = z.string().optional().meta({ description: 'strong ETag of the version the change is based on (the GeoJSON ETag of the item); a stale one gets 412' });
/** The metadata resources take f only, and accept (and ignore) the items parameters: GDAL appends them to every request. */
const metadata = { description: 'Takes f; the query parameters of /collections/{collectionId}/items are accepted and ignored (GDAL appends the query of its connection URL to every request).' };

export function buildOgcOpenApiDocument(base: string) {
  return withOpenApi30Tuples(createDocument({
    openapi: '3.0.3',
    info: {
      title: 'OGC API – Features',
      version: '1.0.0',
      description: 'Features of the city mapping platform (friedhof, blumenbeet, denkmal) by OGC API – Features Parts 1–4. Reading is open to everyone; changes need a Bearer token whose role allows them (see /api/openapi.json).',
    },
    servers: [{ url: base }],
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    paths: {
      '/': { get: { summary: 'Landing page', ...metadata, requestParams: { query: z.object({ f }) }, responses: { '200': { description: 'links to the API definition, conformance and collections', content: json } } } },
      '/conformance': { get: { summary: 'Conformance classes', ...metadata, requestParams: { query: z.object({ f }) }, responses: { '200': { description: 'conformsTo', content: json } } } },
      '/api': { get: { summary: 'This OpenAPI definition', ...metadata, requestParams: { query: z.object({ f }) }, responses: { '200': { description: 'OpenAPI 3.0', content: { 'application/vnd.oai.openapi+json;version=3.0': { schema: z.object({}).passthrough() } } } } } },
      '/collections': { get: { summary: 'Collections', ...metadata, requestParams: { query: z.object({ f }) }, responses: { '200': { description: 'the four collections', content: json } } } },
      '/collections/{collectionId}': {
        get: { summary: 'One collection', ...metadata, requestParams: { path: z.object({ collectionId }), query: z.object({ f }) }, responses: { '200': { description: 'collection metadata', content: json }, '404': problem('no such collection') } },
      },
      '/collections/{collectionId}/queryables': {
        get: { summary: 'Queryables (JSON Schema)', ...metadata, requestParams: { path: z.object({ collectionId }), query: z.object({ f }) }, responses: { '200': { description: 'the properties a filter may use', content: { 'application/schema+json': { schema: z.object({}).passthrough() } } } } },
      },
      '/collections/{collectionId}/items': {
        get: {
          summary: 'Features of the collection, in id order, paged',
          requestParams: {
            path: z.object({ collectionId }),
            query: z.object({
              f,
              limit: z.number().int().min(1).max(MAX_LIMIT).default(DEFAULT_LIMIT).optional().meta({ description: `page size; a larger value (any number of digits) is capped at ${MAX_LIMIT}` }),
              bbox: z.string().optional().meta({ description: 'minx,miny,maxx,maxy in bbox-crs (default CRS84); in longitude/latitude a west edge greater than the east edge crosses the antimeridian' }),
              'bbox-crs': z.enum(crsUris).optional(),
              crs: z.enum(crsUris).optional(),
              datetime: z.string().optional().meta({ description: 'instant or interval on updatedAt (RFC 3339, .. for open ends)' }),
              kategorie: z.enum(['friedhof', 'blumenbeet', 'denkmal']).optional(),
              status: z.enum(STATUSES).optional(),
              filter: z.string().optional().meta({ description: `CQL2 text or JSON, at most ${MAX_FILTER_LENGTH} characters and ${MAX_FILTER_DEPTH} levels of nesting; a BBOX whose west edge is greater than its east edge crosses the antimeridian` }),
              'filter-lang': z.enum(['cql2-text', 'cql2-json']).optional(),
              'filter-crs': z.enum(crsUris).optional(),
              cursor: z.string().optional().meta({ description: 'opaque; copy it from a next or prev link' }),
            }),
          },
          responses: { '200': { description: 'a page; links next and prev while more follow', content: geojson(OgcFeatureCollectionSchema) }, '400': problem('invalid parameter or filter'), '404': problem('no such collection') },
        },
        post: {
          summary: 'Create a feature (contributor, reviewer, admin)',
          security: [{ bearer: [] }],
          requestBody: { required: true, content: { 'application/geo+json': { schema: FeatureSchema }, 'application/json': { schema: FeatureSchema } } },
          responses: { '201': { description: 'created; Location names it' }, '400': problem('invalid feature'), '401': problem('authentication required'), '403': problem('role lacks the permission') },
        },
      },
      '/collections/{collectionId}/items/{featureId}': {
        get: { summary: 'One feature', requestParams: { path: z.object({ collectionId, featureId }), query: z.object({ f, crs: z.enum(crsUris).optional() }) }, responses: { '200': { description: 'the feature with its ETag (the HTML page has an ETag of its own)', content: geojson(OgcFeatureSchema) }, '404': problem('no such feature in this collection') } },
        put: {
          summary: 'Replace a feature (its creator, admin)',
          security: [{ bearer: [] }],
          requestParams: { path: z.object({ collectionId, featureId }), header: z.object({ 'If-Match': ifMatch }) },
          requestBody: { required: true, content: { 'application/geo+json': { schema: FeatureSchema }, 'application/json': { schema: FeatureSchema } } },
          responses: { '200': { description: 'replaced' }, '412': problem('stale ETag'), '409': problem('the feature is in review') },
        },
        patch: {
          summary: 'Update a feature with a JSON merge patch (RFC 7396)',
          security: [{ bearer: [] }],
          requestParams: { path: z.object({ collectionId, featureId }), header: z.object({ 'If-Match': ifMatch }) },
          requestBody: { required: true, content: { 'application/merge-patch+json': { schema: z.object({}).passthrough() } } },
          responses: { '200': { description: 'updated' }, '412': problem('stale ETag'), '409': problem('the feature is in review') },
        },
        delete: {
          summary: 'Delete a feature (admin)',
          security: [{ bearer: [] }],
          requestParams: { path: z.object({ collectionId, featureId }), header: z.object({ 'If-Match': ifMatch }) },
          responses: { '204': { description: 'deleted; the history is kept' }, '412': problem('stale ETag') },
        },
      },
    },
  }));
}

/**
 * OpenAPI 3.0 has no prefixItems. The shared schemas write a position, a tuple, in JSON Schema 2020-12
 * (services/shared/features/schema.ts, for /api/openapi.json, OpenAPI 3.1); in this 3.0 document a tuple
 * is what zod itself writes for 3.0: an array of its items' union, of exactly their number. Walked with
 * a stack of its own.
 */
function withOpenApi30Tuples<T>(document: T): T {
  const stack: unknown[] = [document];
  while (stack.length > 0) {
    const node = stack.pop();
    if (Array.isArray(node)) {
      stack.push(...node);
      continue;
    }
    if (node === null || typeof node !== 'object') continue;
    const schema = node as Record<string, unknown>;
    if (Array.isArray(schema.prefixItems)) {
      schema.items = { anyOf: schema.prefixItems };
      delete schema.prefixItems;
    }
    stack.push(...Object.values(schema));
  }
  return document;
}
