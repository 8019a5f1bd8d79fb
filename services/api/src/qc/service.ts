import type { Principal } from '../../../shared/principal.js';
import { query, withTransaction, type Db, type Queryable } from '../db/pool.js';
import { AppError } from '../../../shared/errors.js';
import * as sql from './queries.js';
import { noticeOfDecision } from './notices.js';
import {
  ALLOWED_FROM,
  RERUNNABLE_JOB_STATUSES,
  SIDE_EFFECTS,
  TARGET_STATUS,
  type JobStatus,
  type JobTask,
  type QcAction,
  type QcStatus,
} from './states.js';

/**
 * Where submission, approval and rejection happen. Each transition is one transaction: lock the
 * feature row, check the state and the four-eyes rule, change the status, record the transition and
 * queue its side effects — all commit together or nothing does. Concurrent decisions on one feature
 * queue on the row lock; the loser finds the feature no longer in_qc and gets 409.
 */
export interface QcServiceOptions {
  /** graphile-worker max_attempts of every side effect (exponential backoff between attempts). */
  maxAttempts: number;
  /** Runs inside a decision's transaction with the feature row locked; throws to refuse (review claims). */
  beforeDecision?: (client: Queryable, principal: Principal, featureId: string) => Promise<void>;
}

export interface TransitionResult {
  featureId: string;
  status: QcStatus;
  version: number;
  transition: unknown;
  jobs: { id: number; task: JobTask }[];
}

export function createQcService(db: Db, options: QcServiceOptions) {
  async function transition(principal: Principal, action: QcAction, featureId: string, comment: string | null): Promise<TransitionResult> {
    const actor = principal.id;
    if (actor === null) throw new AppError('UNAUTHENTICATED', 'authentication required');
    return withTransaction(db, async (client) => {
      const { rows } = await query(client, sql.lockForTransition(featureId));
      const current = rows[0] as { status: QcStatus; version: number; snapshot: unknown; submittedBy: string | null } | undefined;
      if (!current) throw new AppError('FEATURE_NOT_FOUND', `no feature with id ${featureId}`);
      if (!ALLOWED_FROM[action].includes(current.status)) {
        throw new AppError('INVALID_STATE', stateMessage(action, current.status));
      }
      if (action !== 'submit' && principal.role !== 'admin' && current.submittedBy === actor) {
        throw new AppError('FORBIDDEN', 'four-eyes rule: you submitted this feature, another reviewer (or an admin) must decide it');
      }
      if (action !== 'submit') await options.beforeDecision?.(client, principal, featureId);
      const to = TARGET_STATUS[action];
      const updated = await query(client, sql.setStatus(featureId, current.status, to));
      if (updated.rowCount !== 1) throw new AppError('INVALID_STATE', stateMessage(action, current.status));
      // The transition and its side effects (the outbox rows the worker's relay queues) in one
      // statement: same transaction, one round trip.
      const inserted = await query(
        client,
        sql.insertTransitionWithJobs(
          {
            featureId,
            action,
            from: current.status,
            to,
            version: current.version,
            actor,
            actorName: principal.name ?? null,
            comment,
            snapshot: action === 'reject' ? null : current.snapshot,
          },
          SIDE_EFFECTS[action],
          options.maxAttempts,
        ),
      );
      const transitionRow = inserted.rows[0] as { id: string; json: unknown; jobs: { id: number; task: JobTask }[] };
      // The submitter's notice of the decision (mailed by the worker, shown on /qc/mine), in this transaction.
      if (action !== 'submit') await noticeOfDecision(client, { featureId, transitionId: transitionRow.id, action, reason: comment, actor, actorName: principal.name ?? null, recipient: current.submittedBy });
      const jobs: TransitionResult['jobs'] = transitionRow.jobs.map((r) => ({ id: Number(r.id), task: r.task }));
      return { featureId, status: to, version: current.version, transition: transitionRow.json, jobs };
    }, { actor });
  }

  return {
    submit: (principal: Principal, featureId: string, comment: string | null) => transition(principal, 'submit', featureId, comment),
    approve: (principal: Principal, featureId: string, comment: string | null) => transition(principal, 'approve', featureId, comment),
    reject: (principal: Principal, featureId: string, reason: string) => transition(principal, 'reject', featureId, reason),

    async queue(limit: number): Promise<string> {
      const { rows } = await query(db, sql.reviewQueue(limit));
      return (rows[0] as { itemsJson: string }).itemsJson;
    },

    async queueCount(): Promise<number> {
      const { rows } = await query(db, sql.queueCount());
      return (rows[0] as { count: number }).count;
    },

    async reviews(featureId: string): Promise<string> {
      const exists = await query(db, sql.featureExists(featureId));
      if (exists.rowCount === 0) throw new AppError('FEATURE_NOT_FOUND', `no feature with id ${featureId}`);
      const { rows } = await query(db, sql.featureReviews(featureId));
      return (rows[0] as { json: string }).json;
    },

    async jobs(statuses: readonly JobStatus[], task: JobTask | undefined, limit: number): Promise<string> {
      const { rows } = await query(db, sql.listJobs(statuses, task, limit));
      return (rows[0] as { json: string }).json;
    },

    /** An admin re-runs a finished job that needs a person: conflict, failed or skipped. */
    async rerun(principal: Principal, jobId: number): Promise<string> {
      const admin = principal.id ?? 'admin';
      return withTransaction(db, async (client) => {
        const { rows } = await query(client, sql.lockJob(jobId));
        const job = rows[0] as { id: string; task: JobTask; status: JobStatus; featureId: string; version: number; latestApprovedVersion: number | null } | undefined;
        if (!job) throw new AppError('NOT_FOUND', `no job with id ${jobId}`);
        if (!(RERUNNABLE_JOB_STATUSES as readonly string[]).includes(job.status)) {
          throw new AppError('INVALID_STATE', `job ${jobId} is ${job.status}; only ${RERUNNABLE_JOB_STATUSES.join(', ')} jobs can be re-run`);
        }
        if ((job.task === 'osm_export' || job.task === 'wikibase_export') && job.latestApprovedVersion !== null && job.version < job.latestApprovedVersion) {
          // Exporting an older version would overwrite the newer approval on the remote side.
          throw new AppError('INVALID_STATE', `job ${jobId} exports version ${job.version}, but version ${job.latestApprovedVersion} was approved since; re-run that export instead`);
        }
        await query(client, sql.requeueJob(jobId, admin, options.maxAttempts));
        const fresh = await query(client, sql.jobJson(jobId));
        return (fresh.rows[0] as { json: string }).json;
      }, { actor: admin });
    },
  };
}

export type QcService = ReturnType<typeof createQcService>;

function stateMessage(action: QcAction, status: QcStatus): string {
  if (action === 'submit') return `the feature is ${status}; it can be submitted only from draft, approved or rejected`;
  return `the feature is ${status}, not in_qc; only a submitted feature can be ${action === 'approve' ? 'approved' : 'rejected'}`;
}


