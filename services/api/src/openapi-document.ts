import { z } from 'zod';
import { createDocument, type ZodOpenApiResponsesObject } from 'zod-openapi';
import { withIdempotencyKey } from './http/idempotency-openapi.js';
import { checkPaths } from './qc/checks-openapi.js';
import { claimPaths } from './qc/claims-openapi.js';
import { qcOpenApiPaths } from './qc/openapi.js';
import { FeatureHistorySchema } from './qc/schema.js';
import { tilePaths } from './tiles/openapi.js';
import { importPaths } from './imports/openapi.js';
import { noticePaths } from './qc/notices-openapi.js';
import { EDIT_NOTE_MAX, FeatureCollectionSchema, FeatureIdSchema, FeatureSchema, ListQuerySchema, ProblemSchema } from '../../shared/features/schema.js';
import { userPaths } from './users/openapi.js';

/**
 * The OpenAPI 3.1 document of /api (served at /api/openapi.json by openapi.ts), generated from the zod
 * schemas that validate requests. Loaded and built on the first request for it, not at start: the
 * paths' schemas and zod-openapi's generation cost the API's idle memory about 10 MiB.
 */
const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: ProblemSchema } } });

const errors = {
  '400': problem('invalid request (the fields list names each offending field) or malformed JSON'),
  '401': problem('missing credentials for a non-read action, or an invalid, expired or wrongly signed token'),
  '403': problem('the role of the caller lacks the permission'),
} satisfies ZodOpenApiResponsesObject;

const ifMatch = z.string().optional().meta({ description: 'strong ETag of the version the change is based on; a stale one gets 412', example: '"3"' });
const idParam = z.object({ id: FeatureIdSchema });
const editNote = z
  .string()
  .max(EDIT_NOTE_MAX)
  .optional()
  .meta({
    description: 'why this change is made, stored with the new version and returned as its note by /history (one line, printable; longer or with control characters: 400)',
    example: 'merged offline edit: name from mine; telefon from theirs',
  });
const geojson = (schema: z.ZodType) => ({ 'application/geo+json': { schema } });
const featureResponse = (description: string) => ({
  description,
  headers: z.object({ ETag: z.string().meta({ description: 'strong ETag: the version in quotes' }) }),
  content: geojson(FeatureSchema),
});
const body = { required: true, content: { 'application/json': { schema: FeatureSchema }, 'application/geo+json': { schema: FeatureSchema } } };

/**
 * Answers any /api operation can give besides its own: a 400 for a malformed request (query, body
 * encoding), a 401 for an invalid token (every route authenticates a presented credential), a 429 for
 * too many changes, a 500, and a 503 while the database or the token issuer is unreachable. Added where
 * an operation does not describe them itself, so the document covers every answer (checked against the
 * responses of the whole test suite).
 */
const WRITE_METHODS = new Set(['post', 'put', 'patch', 'delete']);
function withCommonResponses<P extends Record<string, Record<string, { responses?: ZodOpenApiResponsesObject }>>>(paths: P): P {
  for (const [path, operations] of Object.entries(paths)) {
    if (!path.startsWith('/api/')) continue;
    for (const [method, operation] of Object.entries(operations)) {
      const responses = (operation.responses ??= {});
      responses['400'] ??= problem('invalid request: query, path or body (the fields list names each offending field)');
      responses['401'] ??= problem('an invalid, expired or wrongly signed token, or one whose claims cannot be stored');
      if (WRITE_METHODS.has(method)) responses['429'] ??= problem('too many changes from this address; see Retry-After');
      responses['500'] ??= problem('an internal error (logged; the answer leaks nothing)');
      responses['503'] ??= problem('the database or the token issuer cannot be reached; see Retry-After');
    }
  }
  return paths;
}

export function buildOpenApiDocument() {
  return createDocument({
    openapi: '3.1.0',
    info: {
      title: 'Feature API',
      version: '1.0.0',
      description:
        'Mapped features (friedhof, blumenbeet, denkmal) as GeoJSON in EPSG:4326 with version history. Reading is open to guests; other actions need a Bearer JWT whose role grants them.',
    },
    servers: [{ url: '/' }],
    components: {
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description: 'a JWT (verified by JWKS) or an opaque Ory Hydra access token (introspected)' },
        session: { type: 'apiKey', in: 'cookie', name: 'ory_kratos_session', description: 'the Kratos session cookie; changes need an Origin of the platform (CSRF)' },
      },
    },
    security: [{}, { bearer: [] }, { session: [] }],
    paths: withCommonResponses({
      '/api/features': {
        get: {
          summary: 'List features (keyset paging)',
          requestParams: { query: ListQuerySchema },
          responses: { '200': { description: 'a page of features; links[rel=next] while more follow', content: geojson(FeatureCollectionSchema) }, '400': errors['400'] },
        },
        post: withIdempotencyKey({
          summary: 'Create a feature (create permission)',
          requestBody: body,
          responses: {
            '201': { ...featureResponse('created; Location names the new feature'), headers: z.object({ ETag: z.string(), Location: z.string() }) },
            ...errors,
            '409': problem('a feature with this id exists'),
            '413': problem('body over 1 MiB'),
            '415': problem('Content-Type is not application/json or application/geo+json'),
          },
        }),
      },
      '/api/features/{id}': {
        get: { summary: 'One feature', requestParams: { path: idParam }, responses: { '200': featureResponse('the feature'), '404': problem('no such feature') } },
        put: {
          summary: 'Replace a feature (update:own for its creator, update for admins)',
          requestParams: { path: idParam, header: z.object({ 'If-Match': ifMatch, 'X-Edit-Note': editNote }) },
          requestBody: body,
          responses: {
            '200': featureResponse('the updated feature'),
            ...errors,
            '404': problem('no such feature'),
            '409': problem('INVALID_STATE: the feature is in review (in_qc)'),
            '412': problem('If-Match does not match the current version; nothing was changed'),
            '413': problem('body over 1 MiB'),
            '415': problem('unsupported Content-Type'),
          },
        },
        delete: {
          summary: 'Delete a feature (admins); its history is kept',
          requestParams: { path: idParam, header: z.object({ 'If-Match': ifMatch }) },
          responses: { '204': { description: 'deleted' }, '401': errors['401'], '403': errors['403'], '404': problem('no such feature'), '409': problem('INVALID_STATE: the feature is in review (in_qc)'), '412': problem('stale If-Match') },
        },
      },
      '/api/features/{id}/history': {
        get: {
          summary: 'Recorded versions, newest first (also of deleted features and of edits made outside the API), and the conflation decisions of its exports (automatic or a reviewer\'s), newest first',
          requestParams: { path: idParam },
          responses: { '200': { description: 'the versions and decisions', content: { 'application/json': { schema: FeatureHistorySchema } } }, '404': problem('the feature never existed') },
        },
      },
      '/api/auth/forward': {
        get: {
          summary: "The proxy's forward_auth check in front of GeoServer WFS-T writes: who may write, as GeoServer should name them",
          responses: {
            '204': {
              description: 'the caller may create features; the proxy copies these headers onto the request to GeoServer',
              headers: z.object({ 'X-Geodata-User': z.string().regex(/^u_[0-9a-f]{32}$/), 'X-Geodata-Role': z.string().regex(/^ROLE_[A-Z]+$/) }),
            },
            '401': errors['401'],
            '403': problem('a guest, a cookie sent from a foreign origin, or an account without an identity id'),
          },
        },
      },
      ...userPaths,
      ...qcOpenApiPaths(),
      ...claimPaths,
      ...checkPaths,
      ...tilePaths,
      ...importPaths,
      ...noticePaths,
      '/healthz': { get: { summary: 'the process is up', responses: { '200': { description: 'ok', content: { 'application/json': { schema: z.object({ status: z.literal('ok') }) } } } } } },
      '/readyz': {
        get: {
          summary: 'the database is reachable and migrated',
          responses: { '200': { description: 'ready', content: { 'application/json': { schema: z.object({ status: z.literal('ready') }) } } }, '503': problem('not ready') },
        },
      },
    }),
  });
}
