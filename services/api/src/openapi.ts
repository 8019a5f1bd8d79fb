import { createRequire } from 'node:module';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { createDocument, type ZodOpenApiResponsesObject } from 'zod-openapi';
import { sendText } from './http/fastify.js';
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
 * GET /api/openapi.json — OpenAPI 3.1 generated from the zod schemas that validate requests — and a
 * Swagger UI page at /api/docs served from the installed swagger-ui-dist (no CDN).
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

// absolute-path.js alone: the package's main module also loads the 1.5 MB browser bundle (a second
// of CPU at every start) for nothing.
const swaggerUiDir = (createRequire(import.meta.url)('swagger-ui-dist/absolute-path.js') as () => string)();

const INITIALIZER = `window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: '../openapi.json',
    dom_id: '#swagger-ui',
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    plugins: [SwaggerUIBundle.plugins.DownloadUrl],
    layout: 'StandaloneLayout',
  });
};
`;

/** GET /api/openapi.json and the Swagger UI at /api/docs/, in the /api scope before authentication. */
export async function openApiRoutes(app: FastifyInstance): Promise<void> {
  const document = JSON.stringify(buildOpenApiDocument());
  app.get('/openapi.json', async (_request, reply) => sendText(reply, 'application/json', document));
  app.get('/docs/swagger-initializer.js', async (_request, reply) => sendText(reply, 'text/javascript', INITIALIZER));
  // Relative asset URLs in the page need the trailing slash: /api/docs redirects to /api/docs/ (the
  // router, which ignores a trailing slash, would serve the page at both).
  app.get('/docs', async (request, reply) => {
    if (request.url.split('?')[0]!.endsWith('/')) return reply.sendFile('index.html', { maxAge: 3_600_000 });
    return reply.redirect('/api/docs/', 301);
  });
  await app.register(fastifyStatic, { root: swaggerUiDir, prefix: '/docs/', index: 'index.html', maxAge: 3_600_000, decorateReply: true });
}
