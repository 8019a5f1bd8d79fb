import express, { Router, type RequestHandler } from 'express';
import { z } from 'zod';
import { AppError } from '../../../shared/errors.js';
import { EDIT_NOTE_MAX, storableText } from '../../../shared/features/schema.js';
import { principalOf, requirePermission } from '../auth/middleware.js';
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

/** Reads the body as bytes up to IMPORT_MAX_BYTES, whatever its media type (413 naming the limit). */
const readFile: RequestHandler = (req, res, next) => {
  const read = express.raw({ limit: IMPORT_MAX_BYTES, type: () => true });
  read(req, res, (error?: unknown) => {
    if ((error as { type?: string } | undefined)?.type === 'entity.too.large') return next(new AppError('PAYLOAD_TOO_LARGE', `the file exceeds ${IMPORT_MAX_BYTES / 1024 / 1024} MiB; split it`));
    if (error) return next(error);
    if (!Buffer.isBuffer(req.body) || req.body.length === 0) return next(new AppError('VALIDATION_FAILED', 'the request body must be the file', { fields: [{ field: 'file', message: 'is required' }] }));
    next();
  });
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
export function importRoutes(imports: ImportService, options: { demo?: boolean } = {}): Router {
  const router = Router();
  const guard = requirePermission('create', 'import features');
  // The import page's "Load demo data" (development only; `npm run seed` does the same from a shell).
  router.post('/demo', guard, async (_req, res) => {
    if (!options.demo) throw new AppError('NOT_FOUND', 'the demo data is offered in development only');
    res.status(201).json(await imports.commitRows(principalOf(res), demoCity(), undefined, 'demo city'));
  });
  router.post('/check', guard, readFile, async (req, res) => {
    const query = parseOrThrow(ImportQuerySchema, req.query, 'INVALID_QUERY', 'query');
    res.setHeader('Cache-Control', 'no-store');
    res.json(await imports.check(query.filename, req.body as Buffer, mappingOf(query)));
  });
  router.post('/', guard, readFile, async (req, res) => {
    const query = parseOrThrow(ImportQuerySchema, req.query, 'INVALID_QUERY', 'query');
    const result = await imports.commit(principalOf(res), query.filename, req.body as Buffer, mappingOf(query), query.note);
    res.status(201).json(result);
  });
  router.all(['/', '/check', '/demo'], (req, res) => {
    res.setHeader('Allow', 'POST');
    throw new AppError('METHOD_NOT_ALLOWED', `${req.method} is not supported here; allowed: POST`);
  });
  return router;
}
