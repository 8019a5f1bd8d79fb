import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { AppError } from '../../../shared/errors.js';
import { EDIT_NOTE_MAX, storableText } from '../../../shared/features/schema.js';
import { principalOf, requirePermission } from '../auth/middleware.js';
import { methodNotAllowed, sendJson, type Hook } from '../http/fastify.js';
import { parseOrThrow } from '../http/validate.js';
import { demoCity } from './demo.js';
import { TARGETS, type ImportService, type Mapping } from './service.js';

/** The largest file an import takes (a GeoJSON of 20 000 small features is about 6 MiB). */
export const IMPORT_MAX_BYTES = 32 * 1024 * 1024;

const field = z.string().max(200, 'must be at most 200 characters').optional();
/** Query of both import routes: the file's name (its extension says the format) and the attribute mapping. */
export const ImportQuerySchema = z.strictObject({
  filename: z.string().min(1, 'is required').max(255, 'must be at most 255 characters').meta({ description: 'the uploaded file\'s name; its extension says the format: .geojson/.json, .gpkg, .csv, .zip (a zipped Shapefile)', example: 'friedhoefe.csv' }),
  name: field.meta({ description: 'the file\'s attribute that becomes the name (with none of name/kategorie/adresse/telefon given, each is guessed from the attribute names)' }),
  kategorie: field.meta({ description: 'the attribute that becomes the kategorie (friedhof, blumenbeet, denkmal; case is ignored)' }),
  adresse: field.meta({ description: 'the attribute that becomes the adresse' }),
  telefon: field.meta({ description: 'the attribute that becomes the telefon' }),
  note: storableText().max(EDIT_NOTE_MAX - 40, `must be at most ${EDIT_NOTE_MAX - 40} characters`).optional().meta({ description: 'the change note of the import, stored with every version it makes (default: "import of <filename>")' }),
});

/**
 * The body is the file: any media type, up to IMPORT_MAX_BYTES (the route's bodyLimit; 413 naming the
 * limit, http/problem.ts), never empty.
 */
const FILE_BODY = {
  bodyLimit: IMPORT_MAX_BYTES,
  config: { tooLarge: `the file exceeds ${IMPORT_MAX_BYTES / 1024 / 1024} MiB; split it` },
  preValidation: (async (request) => {
    if (!Buffer.isBuffer(request.body) || request.body.length === 0) throw new AppError('VALIDATION_FAILED', 'the request body must be the file', { fields: [{ field: 'file', message: 'is required' }] });
  }) as Hook,
};

function mappingOf(query: z.output<typeof ImportQuerySchema>): Mapping | undefined {
  if (TARGETS.every((t) => query[t] === undefined)) return undefined;
  const mapping: Mapping = {};
  for (const target of TARGETS) if (query[target]) mapping[target] = query[target];
  return mapping;
}

/**
 * POST /api/imports/check — the dry run: every row of the file with the feature it would become and its
 * problems. POST /api/imports — the import: the valid rows in one transaction. Both take the file as
 * the request body; contributors and up (`create`). Mounted before the per-request write limit, which
 * counts requests and would make a 10 000-feature file one request anyway: imports have their own
 * limits (size, rows, GDAL time, two conversions at once).
 */
export async function importRoutes(app: FastifyInstance, { imports, demo }: { imports: ImportService; demo?: boolean }): Promise<void> {
  const guard = requirePermission('create', 'import features');
  // The import page's "Load demo data" (development only; `npm run seed` does the same from a shell).
  app.post('/demo', { onRequest: guard }, async (request, reply) => {
    if (!demo) throw new AppError('NOT_FOUND', 'the demo data is offered in development only');
    reply.code(201);
    return sendJson(reply, await imports.commitRows(principalOf(request), demoCity(), undefined, 'demo city'));
  });
  app.post('/check', { onRequest: guard, ...FILE_BODY }, async (request, reply) => {
    const query = parseOrThrow(ImportQuerySchema, request.query, 'INVALID_QUERY', 'query');
    reply.header('Cache-Control', 'no-store');
    return sendJson(reply, await imports.check(query.filename, request.body as Buffer, mappingOf(query)));
  });
  app.post('/', { onRequest: guard, ...FILE_BODY }, async (request, reply) => {
    const query = parseOrThrow(ImportQuerySchema, request.query, 'INVALID_QUERY', 'query');
    const result = await imports.commit(principalOf(request), query.filename, request.body as Buffer, mappingOf(query), query.note);
    reply.code(201);
    return sendJson(reply, result);
  });
  methodNotAllowed(app, ['/', '/check', '/demo'], 'POST');
}
