import { z } from 'zod';
import type { ZodOpenApiPathsObject } from 'zod-openapi';
import { FeatureIdSchema, FeatureSchema, ProblemSchema } from '../../../shared/features/schema.js';
import { QC_STATUSES } from './states.js';
import { ClaimSchema } from './claims-openapi.js';
import { MineQuerySchema } from './checks-routes.js';

/** GET /api/qc/items/{id} and GET /api/qc/mine in the OpenAPI document (spread into openapi.ts `paths`). */
const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: ProblemSchema } } });

export const CHECK_CODES = ['spike', 'tiny_area', 'sliver', 'outside_city', 'duplicate_candidate', 'missing_address'] as const;

const CheckSchema = z
  .object({
    code: z.enum(CHECK_CODES),
    message: z.string(),
    details: z.record(z.string(), z.unknown()).meta({ description: 'per code: angleDegrees/vertex/coordinates, areaM2/perimeterM/thinness, distanceKm/cityExtent, featureId/name/distanceM/nameSimilarity, field' }),
  })
  .meta({ id: 'QcCheck', description: 'Something a reviewer should know about; never blocks a decision.' });

const ItemSchema = z
  .object({
    featureId: z.string(),
    status: z.enum(QC_STATUSES),
    version: z.number(),
    feature: FeatureSchema,
    submission: z.object({ actor: z.string(), actorName: z.string().nullable(), comment: z.string().nullable(), at: z.string(), version: z.number() }).nullable(),
    claim: ClaimSchema.nullable(),
    lastApproved: z.object({ version: z.number(), at: z.string(), actor: z.string(), actorName: z.string().nullable(), feature: FeatureSchema }).nullable(),
    diff: z.array(z.object({ field: z.string(), before: z.string().nullable(), after: z.string().nullable() })).meta({ description: 'attributes changed since the last approved version' }),
    geometryChanged: z.boolean().nullable().meta({ description: 'null when no version was approved yet' }),
    checks: z.array(CheckSchema),
  })
  .meta({ id: 'QcReviewItem' });

const MineItemSchema = z
  .object({
    featureId: z.string(),
    name: z.string().nullable(),
    kategorie: z.string().nullable(),
    status: z.enum([...QC_STATUSES, 'deleted']),
    version: z.number().nullable(),
    submittedVersion: z.number(),
    submittedAt: z.string(),
    comment: z.string().nullable(),
    decision: z.object({ action: z.enum(['approve', 'reject']), actor: z.string(), actorName: z.string().nullable(), comment: z.string().nullable(), at: z.string() }).nullable(),
    rejectionReason: z.string().nullable(),
  })
  .meta({ id: 'QcMySubmission' });

export const checkPaths: ZodOpenApiPathsObject = {
  '/api/qc/items/{id}': {
    get: {
      summary: 'The review view of a feature: feature, submission, claim, last approved version with the diff, and the review checks',
      requestParams: { path: z.object({ id: FeatureIdSchema }) },
      responses: {
        '200': { description: 'the QC item', content: { 'application/json': { schema: ItemSchema } } },
        '404': problem('FEATURE_NOT_FOUND'),
      },
    },
  },
  '/api/qc/mine': {
    get: {
      summary: "The caller's submissions, latest first, with status now and the decision (rejection reason) (qc:submit)",
      requestParams: { query: MineQuerySchema },
      responses: {
        '200': { description: 'the submissions', content: { 'application/json': { schema: z.object({ items: z.array(MineItemSchema) }) } } },
        '400': problem('invalid query'),
        '401': problem('no credentials'),
        '403': problem('the role lacks qc:submit'),
      },
    },
  },
};
