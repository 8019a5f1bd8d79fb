import { z } from 'zod';
import { FeatureIdSchema, HistorySchema } from '../../../shared/features/schema.js';
import { JOB_TASKS, PENDING_JOB_STATUSES, QC_STATUSES, TERMINAL_JOB_STATUSES } from './states.js';

/** Request bodies, query strings and answers of the QC endpoints; also the OpenAPI document's source. */
const noNul = (s: string) => !s.includes('\u0000');
const text = (max: number) => z.string().max(max, `must be at most ${max} characters`).refine(noNul, 'must not contain NUL characters');

export const SubmitBodySchema = z
  .object({
    featureId: FeatureIdSchema,
    comment: text(4000).nullish().meta({ description: 'a note for the reviewers' }),
  })
  .strict();

export const ApproveBodySchema = z.object({ comment: text(4000).nullish() }).strict();

export const RejectBodySchema = z
  .object({
    reason: text(4000)
      .refine((s) => s.trim().length > 0, 'is required and must not be empty')
      .meta({ description: 'why the feature is rejected (required, not only whitespace)' }),
  })
  .strict();

const ALL_JOB_STATUSES = [...PENDING_JOB_STATUSES, ...TERMINAL_JOB_STATUSES] as const;

export const JobListQuerySchema = z
  .object({
    status: z
      .string()
      .default('failed,conflict,skipped')
      .transform((raw) => raw.split(',').map((s) => s.trim()).filter(Boolean))
      .pipe(z.array(z.enum(ALL_JOB_STATUSES)).min(1))
      .meta({ description: 'comma-separated job statuses (default: failed,conflict,skipped)' }),
    task: z.enum(JOB_TASKS).optional(),
    limit: z.coerce.number().int().min(1).max(1000).default(100),
  })
  .strict();

export const QueueQuerySchema = z.object({ limit: z.coerce.number().int().min(1).max(1000).default(200) }).strict();

export const JobIdSchema = z.string().regex(/^[1-9]\d{0,15}$/, 'a job id');

export const TransitionSchema = z
  .object({
    id: z.number(),
    featureId: z.string(),
    action: z.enum(['submit', 'approve', 'reject', 'reopen']),
    fromStatus: z.enum(QC_STATUSES),
    toStatus: z.enum(QC_STATUSES),
    version: z.number().meta({ description: 'the feature version the transition concerns' }),
    actor: z.string(),
    actorName: z.string().nullable(),
    comment: z.string().nullable().meta({ description: 'comment, or the reason of a rejection' }),
    at: z.string(),
  })
  .meta({ id: 'QcTransition' });

export const JobSchema = z
  .object({
    id: z.number(),
    featureId: z.string(),
    version: z.number(),
    task: z.enum(JOB_TASKS),
    status: z.enum(ALL_JOB_STATUSES),
    reason: z.string().nullable(),
    result: z.unknown().meta({ description: 'the export record or delivery (OSM element, Wikibase item, recipients)' }),
    attempts: z.number(),
    lastError: z.string().nullable(),
    reruns: z.number(),
    rerunBy: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
    finishedAt: z.string().nullable(),
  })
  .meta({ id: 'QcJob' });

/** A job as GET /api/qc/jobs lists it: with its feature as approved and, in needs_decision, the candidates. */
export const JobListItemSchema = JobSchema.extend({
  feature: z
    .object({ name: z.string().nullable(), kategorie: z.string().nullable(), geometry: z.unknown().meta({ description: 'GeoJSON geometry of the approved version' }) })
    .nullable(),
  candidates: z
    .array(z.record(z.string(), z.unknown()))
    .nullable()
    .meta({ description: 'needs_decision: the candidates of the pending conflation decision (OSM: type, id, tags, geometry, score; Wikibase: itemId, label, distance); null otherwise' }),
  plan: z
    .object({
      osmChange: z.string().meta({ description: 'the osmChange as it will be uploaded (changeset 0)' }),
      action: z.enum(['create', 'modify', 'none']),
      target: z.object({ type: z.string(), id: z.number(), name: z.string().nullable() }).nullable(),
      score: z.number().nullable(),
      distanceM: z.number().nullable(),
      tagChanges: z.array(z.object({ key: z.string(), before: z.string().nullable(), after: z.string().nullable() })),
      kept: z.array(z.object({ key: z.string(), ours: z.string().nullable(), theirs: z.string().nullable() })),
      preview: z.object({ before: z.record(z.string(), z.unknown()).nullable(), after: z.record(z.string(), z.unknown()) }).meta({ description: 'GeoJSON Features of the element before and after' }),
      proposed: z.union([z.literal('create'), z.object({ type: z.string(), id: z.number() })]).meta({ description: 'the choice that confirms the plan on POST /api/qc/jobs/{id}/decision' }),
    })
    .nullable()
    .optional()
    .meta({ description: 'an OSM export waiting for its plan to be reviewed (docs/qc.md "Nothing reaches OSM unseen"); null otherwise' }),
}).meta({ id: 'QcJobListItem' });

export const QcItemSchema = z
  .object({
    featureId: z.string(),
    status: z.enum(QC_STATUSES),
    version: z.number(),
    transition: TransitionSchema,
    jobs: z.array(z.object({ id: z.number(), task: z.enum(JOB_TASKS) })),
  })
  .meta({ id: 'QcItem' });

export const QueueItemSchema = z
  .object({
    featureId: z.string(),
    version: z.number(),
    name: z.string(),
    kategorie: z.string(),
    submitter: z.string(),
    submitterName: z.string().nullable(),
    submittedAt: z.string(),
    comment: z.string().nullable(),
    claim: z
      .object({ holder: z.string(), holderName: z.string().nullable(), claimedAt: z.string(), expiresAt: z.string() })
      .nullable()
      .meta({ description: 'the live review claim: who has the item open, until when (null: nobody)' }),
    transitionId: z.number().int().meta({ description: 'id of the submit transition; grows with every transition, so it orders submissions made in the same instant' }),
  })
  .meta({ id: 'QcQueueItem' });

/** One conflation decision as the history and the reviews show it (qc.conflation_decisions). */
export const ConflationDecisionSchema = z
  .object({
    id: z.number(),
    jobId: z.number(),
    version: z.number().meta({ description: 'the approved feature version the export job exports' }),
    target: z.enum(['osm', 'wikibase']),
    outcome: z.enum(['create', 'link', 'needs_decision']),
    chosen: z.string().nullable().meta({ description: 'link: the chosen OSM element ("way/123") or Wikibase item ("Q42")' }),
    moveGeometry: z.boolean(),
    reason: z.string(),
    candidates: z.array(z.record(z.string(), z.unknown())).meta({ description: 'the candidates as scored when the lookup ran' }),
    decidedBy: z.string().nullable().meta({ description: 'null: decided automatically by the export job; otherwise the reviewer' }),
    decidedByName: z.string().nullable(),
    at: z.string(),
  })
  .meta({ id: 'ConflationDecision' });

export const ReviewsSchema = z
  .object({
    featureId: z.string(),
    status: z.enum(QC_STATUSES).nullable().meta({ description: 'null when the feature was deleted' }),
    transitions: z.array(TransitionSchema),
    jobs: z.array(JobSchema),
    exportRecords: z.record(z.string(), z.unknown()).meta({ description: 'osm: {type, id, version, changesetId, linked?, ownedKeys?}; wikibase: {itemId, revisionId, linked?}' }),
    decisions: z.array(ConflationDecisionSchema).meta({ description: 'conflation decisions, automatic (decidedBy null) or a reviewer\'s, with the candidates found, oldest first' }),
  })
  .meta({ id: 'QcReviews' });

/** GET /api/features/{id}/history: the recorded versions and the exports' conflation decisions, each newest first. */
export const FeatureHistorySchema = HistorySchema.extend({
  decisions: z.array(ConflationDecisionSchema).meta({ description: 'conflation decisions of the feature\'s OSM and Wikibase exports, automatic (decidedBy null) or a reviewer\'s, newest first' }),
}).meta({ id: 'FeatureHistory' });
