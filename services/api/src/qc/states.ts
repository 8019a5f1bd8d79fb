/**
 * The QC workflow's states and rules, independent of HTTP and SQL.
 *
 * Glossary
 * - status: the QC state of a feature (features.features.status).
 * - transition: one state change, recorded in qc.transitions with actor, time, comment or reason and
 *   the feature version it concerns. `reopen` is written by the database trigger when an edit puts an
 *   approved, rejected or in_qc feature back to draft.
 * - side effect / job: work a transition causes outside the database (reviewer e-mail, OSM and
 *   Wikibase export, agency notice), queued in the same transaction (qc.jobs + graphile-worker).
 * - outcome: the terminal status of a job; see TERMINAL_JOB_STATUSES.
 * - four-eyes: the reviewer deciding must not be the one who submitted (admins are exempt).
 */
export const QC_STATUSES = ['draft', 'in_qc', 'approved', 'rejected'] as const;
export type QcStatus = (typeof QC_STATUSES)[number];

export type QcAction = 'submit' | 'approve' | 'reject';

/** Which states an action may start from. Edits (reopen) are handled by the database trigger. */
export const ALLOWED_FROM: Record<QcAction, readonly QcStatus[]> = {
  submit: ['draft', 'approved', 'rejected'],
  approve: ['in_qc'],
  reject: ['in_qc'],
};

export const TARGET_STATUS: Record<QcAction, QcStatus> = { submit: 'in_qc', approve: 'approved', reject: 'rejected' };

export const JOB_TASKS = ['reviewer_notice', 'osm_export', 'wikibase_export', 'agency_notice'] as const;
export type JobTask = (typeof JOB_TASKS)[number];

/** The side effects each action queues. */
export const SIDE_EFFECTS: Record<QcAction, readonly JobTask[]> = {
  submit: ['reviewer_notice'],
  approve: ['osm_export', 'wikibase_export', 'agency_notice'],
  reject: [],
};

export const PENDING_JOB_STATUSES = ['queued', 'running', 'retrying'] as const;
/** Where the worker leaves a job. needs_decision waits for a reviewer (POST /api/qc/jobs/{id}/decision). */
export const TERMINAL_JOB_STATUSES = ['exported', 'unchanged', 'sent', 'conflict', 'failed', 'skipped', 'not_applicable', 'needs_decision'] as const;
export type JobStatus = (typeof PENDING_JOB_STATUSES)[number] | (typeof TERMINAL_JOB_STATUSES)[number];

/** Outcomes an admin may re-run: the ones that need a person (conflict, failed) or configuration (skipped). */
export const RERUNNABLE_JOB_STATUSES = ['conflict', 'failed', 'skipped'] as const;

/**
 * The graphile-worker task of a relay round's jobs: one graphile job per named queue and round, its
 * payload the list of qc.jobs ids (a graphile "batch job"; tasks.ts runJobBatch). Started and
 * recorded together; one that fails transiently is tried again alone (graphile keeps the failed
 * entries of a batch for the retry).
 */
export const BATCH_TASK_IDENTIFIER = 'qc_jobs';

/** graphile-worker task identifiers, one per side effect: a job that goes its own way (a wait, a retry at a given time, a job of an earlier release). */
export const TASK_IDENTIFIERS: Record<JobTask, string> = {
  reviewer_notice: 'qc_reviewer_notice',
  osm_export: 'qc_osm_export',
  wikibase_export: 'qc_wikibase_export',
  agency_notice: 'qc_agency_notice',
};

/**
 * The exports of one feature run one after the other: the OSM and the Wikibase export jobs go into
 * graphile named queues, where one job at a time runs, in run_at order (queries.ts exportQueueSql
 * names the queue). So two approvals in quick succession cannot both create an OSM element or a
 * Wikibase item, and an approval's Wikibase export, queued a microsecond after its OSM export, runs
 * after it (it still waits, tasks.ts waitForOsmExport, when that export was put back or batched).
 *
 * Why not a queue per feature, as before: every job fetch of graphile-worker locks every named queue
 * that is free (`… job_queue_id IN (SELECT id FROM _private_job_queues WHERE is_available FOR UPDATE
 * SKIP LOCKED)`, graphile/worker#558), and a queue row stays when its last job is done. A queue per
 * feature made each fetch lock one row for every feature ever approved: the fetch's cost grew with
 * the data. The features are spread over EXPORT_QUEUES queues instead (by the md5 of the id), so a
 * fetch locks at most that many and a feature's exports still share one queue; unrelated features
 * of one queue wait for each other, which with at most WORKER_CONCURRENCY (default 2) jobs running
 * costs little.
 */
export const EXPORT_QUEUES = 32;

/** Whether a task's jobs run in the feature's export queue (else in no named queue). */
export function inExportQueue(task: JobTask): boolean {
  return task === 'osm_export' || task === 'wikibase_export';
}
