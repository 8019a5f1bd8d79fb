import { z } from 'zod';
import type { ZodOpenApiPathsObject } from 'zod-openapi';
import { ProblemSchema } from '../../../shared/features/schema.js';
import { MAX_IMPORT_ROWS } from './convert.js';
import { IMPORT_MAX_BYTES, ImportQuerySchema } from './routes.js';

/** POST /api/imports and /api/imports/check in the OpenAPI document (spread into openapi.ts `paths`). */
const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: ProblemSchema } } });
const FieldErrors = z.array(z.object({ field: z.string(), message: z.string() }));
const Mapping = z.object({ name: z.string().optional(), kategorie: z.string().optional(), adresse: z.string().optional(), telefon: z.string().optional() });
const CommitResult = z.object({ imported: z.number().int(), invalid: z.number().int(), rejected: z.array(z.object({ row: z.number().int(), errors: FieldErrors })), note: z.string() });
const file = { required: true, content: { 'application/octet-stream': { schema: z.string().meta({ format: 'binary', description: `the file, at most ${IMPORT_MAX_BYTES / 1024 / 1024} MiB and ${MAX_IMPORT_ROWS} features` }) } } };
const common = {
  '403': problem('the caller may not create features (contributor and up may)'),
  '413': problem(`the file exceeds ${IMPORT_MAX_BYTES / 1024 / 1024} MiB or ${MAX_IMPORT_ROWS} features, or GDAL took too long`),
  '415': problem('the file name has an extension the import does not read'),
};

export const importPaths: ZodOpenApiPathsObject = {
  '/api/imports/check': {
    post: {
      summary: 'Dry run of an import: every row with the feature it would become and its problems',
      description: 'The file is read with GDAL (GeoJSON, GeoPackage, CSV with lon/lat or WKT columns, zipped Shapefile) into EPSG:4326; each row\'s attributes are mapped onto name, kategorie, adresse and telefon and checked as POST /api/features checks a feature. Nothing is written.',
      requestParams: { query: ImportQuerySchema },
      requestBody: file,
      responses: {
        '200': {
          description: 'the rows, valid or not',
          content: {
            'application/json': {
              schema: z.object({
                format: z.string(),
                layer: z.string(),
                fields: z.array(z.string()),
                mapping: Mapping,
                total: z.number().int(),
                valid: z.number().int(),
                invalid: z.number().int(),
                rows: z.array(z.object({ row: z.number().int(), feature: z.object({ type: z.literal('Feature'), geometry: z.unknown(), properties: z.record(z.string(), z.unknown()) }), errors: FieldErrors })),
              }),
            },
          },
        },
        ...common,
      },
    },
  },
  '/api/imports/demo': {
    post: {
      summary: 'Load the demo city (1 000 features) through the import (development only)',
      responses: {
        '201': { description: 'the demo city was imported', content: { 'application/json': { schema: CommitResult } } },
        '403': common['403'],
        '404': problem('not offered: the API runs in production'),
      },
    },
  },
  '/api/imports': {
    post: {
      summary: 'Import the valid rows of a file in one transaction',
      description: 'As the check, then every valid row is created in one transaction by the caller, with one change note on every version it makes; invalid rows are reported and not written. Not counted by the per-request write limit.',
      requestParams: { query: ImportQuerySchema },
      requestBody: file,
      responses: {
        '201': {
          description: 'what was imported and which rows were not',
          content: { 'application/json': { schema: CommitResult } },
        },
        ...common,
      },
    },
  },
};
