import { z } from 'zod';
import { FeatureIdSchema, ProblemSchema } from '../../../shared/features/schema.js';
import { DecisionBodySchema } from './decisions.js';
import { ApproveBodySchema, JobIdSchema, JobListItemSchema, JobListQuerySchema, JobSchema, QcItemSchema, QueueItemSchema, QueueQuerySchema, RejectBodySchema, ReviewsSchema, SubmitBodySchema } from './schema.js';

/** The QC endpoints for the API's OpenAPI document (spread into its `paths`). */
const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: ProblemSchema } } });
const json = (schema: z.ZodType) => ({ 'application/json': { schema } });
const guarded = (permission: string) => ({
  '401': problem('no credentials'),
  '403': problem(`the role lacks ${permission}`),
});
const decision = {
  '200': { description: 'the QC item after the transition, with the side effects queued', content: json(QcItemSchema) },
  '400': problem('invalid body'),
  ...guarded('qc:review'),
  '403': problem('the role lacks qc:review, or four-eyes: the reviewer submitted this feature itself (admins are exempt)'),
  '404': problem('FEATURE_NOT_FOUND'),
  '409': problem('INVALID_STATE: the feature is not in_qc (already decided, or a concurrent decision won)'),
};
const idParam = z.object({ id: FeatureIdSchema });

export function qcOpenApiPaths() {
  return {
    '/api/qc/submit': {
      post: {
        summary: 'Submit a feature for review (qc:submit): draft, approved or rejected → in_qc; queues the reviewer e-mail',
        requestBody: { required: true, content: json(SubmitBodySchema) },
        responses: {
          '200': { description: 'the QC item', content: json(QcItemSchema) },
          '400': problem('invalid body'),
          ...guarded('qc:submit'),
          '404': problem('FEATURE_NOT_FOUND'),
          '409': problem('INVALID_STATE: the feature is already in_qc'),
        },
      },
    },
    '/api/qc/queue': {
      get: {
        summary: 'Features waiting for a decision, oldest submission first (qc:review)',
        requestParams: { query: QueueQuerySchema },
        responses: { '200': { description: 'the waiting items', content: json(z.object({ items: z.array(QueueItemSchema) })) }, ...guarded('qc:review') },
      },
    },
    '/api/qc/queue/count': {
      get: {
        summary: "How many features wait for a decision (qc:review): the navigation's count, cheap to poll; weak ETag, If-None-Match answers 304",
        responses: {
          '200': { description: 'the number of features in_qc', content: json(z.object({ count: z.number().int().min(0) })) },
          '304': { description: 'the count is unchanged since the ETag given in If-None-Match' },
          ...guarded('qc:review'),
        },
      },
    },
    '/api/qc/approve/{id}': {
      post: {
        summary: 'Approve a feature in_qc (qc:review); queues the OSM and Wikibase exports and the agency notice',
        requestParams: { path: idParam },
        requestBody: { required: false, content: json(ApproveBodySchema) },
        responses: decision,
      },
    },
    '/api/qc/reject/{id}': {
      post: {
        summary: 'Reject a feature in_qc with a reason (qc:review)',
        requestParams: { path: idParam },
        requestBody: { required: true, content: json(RejectBodySchema) },
        responses: decision,
      },
    },
    '/api/features/{id}/reviews': {
      get: {
        summary: 'QC transitions of a feature, its side-effect jobs with their outcomes, and its export records',
        requestParams: { path: idParam },
        responses: { '200': { description: 'the reviews', content: json(ReviewsSchema) }, '404': problem('FEATURE_NOT_FOUND: the feature never existed') },
      },
    },
    '/api/qc/jobs': {
      get: {
        summary: 'Side-effect jobs by status, newest first; by default the ones needing attention. Admins (jobs:admin) list any status; reviewers (qc:review) only status=needs_decision, the conflations waiting for their decision, with the candidates',
        requestParams: { query: JobListQuerySchema },
        responses: {
          '200': { description: 'the jobs', content: json(z.object({ jobs: z.array(JobListItemSchema) })) },
          '400': problem('invalid query'),
          ...guarded('qc:review'),
          '403': problem('the role lacks qc:review, or a reviewer asked for a status other than needs_decision (jobs:admin)'),
        },
      },
    },
    '/api/qc/jobs/{id}/rerun': {
      post: {
        summary: 'Re-run a conflict, failed or skipped job (jobs:admin)',
        requestParams: { path: z.object({ id: JobIdSchema }) },
        responses: {
          '200': { description: 'the job, queued again', content: json(JobSchema) },
          ...guarded('jobs:admin'),
          '404': problem('no such job'),
          '409': problem('INVALID_STATE: the job is queued, running or succeeded, or a newer version was approved since'),
        },
      },
    },
    '/api/qc/jobs/{id}/decision': {
      post: {
        summary: 'Settle a conflation: pick one of the candidates of a needs_decision export job, or "create" (qc:review); the job runs again',
        requestParams: { path: z.object({ id: JobIdSchema }) },
        requestBody: { content: json(DecisionBodySchema) },
        responses: {
          '200': { description: 'the job, queued again with the decision recorded', content: json(JobSchema) },
          '400': problem('invalid body, or the choice is not one of the candidates'),
          ...guarded('qc:review'),
          '404': problem('no such job'),
          '409': problem('INVALID_STATE: the job is not waiting for a decision'),
        },
      },
    },
  };
}
