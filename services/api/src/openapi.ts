import { createRequire } from 'node:module';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance } from 'fastify';
import { sendText } from './http/fastify.js';

/**
 * GET /api/openapi.json — the OpenAPI 3.1 document (openapi-document.ts), generated from the zod
 * schemas that validate requests — and a Swagger UI page at /api/docs served from the installed
 * swagger-ui-dist (no CDN).
 */

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
  // Built once, on the first request for it (the docs page asks for it too), not at start: the module
  // with every path's schemas and the generation grew the idle process by about 10 MiB.
  let document: Promise<string> | undefined;
  const openApiJson = () =>
    (document ??= import('./openapi-document.js')
      .then(({ buildOpenApiDocument }) => JSON.stringify(buildOpenApiDocument()))
      .catch((error: unknown) => {
        document = undefined; // not kept: the next request tries again (this one answers 500)
        throw error;
      }));
  app.get('/openapi.json', async (_request, reply) => sendText(reply, 'application/json', await openApiJson()));
  app.get('/docs/swagger-initializer.js', async (_request, reply) => sendText(reply, 'text/javascript', INITIALIZER));
  // Relative asset URLs in the page need the trailing slash: /api/docs redirects to /api/docs/ (the
  // router, which ignores a trailing slash, would serve the page at both).
  app.get('/docs', async (request, reply) => {
    if (request.url.split('?')[0]!.endsWith('/')) return reply.sendFile('index.html', { maxAge: 3_600_000 });
    return reply.redirect('/api/docs/', 301);
  });
  await app.register(fastifyStatic, { root: swaggerUiDir, prefix: '/docs/', index: 'index.html', maxAge: 3_600_000, decorateReply: true });
}
