import type { Query } from '../features/queries.js';
import type { JobStatus, JobTask, QcAction, QcStatus } from './states.js';

/**
 * The SQL of the QC workflow, as `{ text, values }` with parameters only. JSON answers are built by
 * Postgres with camelCase keys.
 */

/** The feature row as history.feature_versions stores it: every column, geom as GeoJSON. */
const SNAPSHOT = `(to_jsonb(f) - 'geom' - 'geojson') || jsonb_build_object('geometry', ST_AsGeoJSON(f.geom)::jsonb)`;

/** Lock the feature for a transition; concurrent deciders queue here and see the winner's state. */
export function lockForTransition(featureId: string): Query {
  return {
    text: `
      SELECT f.status, f.version, ${SNAPSHOT} AS snapshot,
        (SELECT t.actor FROM qc.transitions t
          WHERE t.feature_id = f.id AND t.action = 'submit' ORDER BY t.id DESC LIMIT 1) AS "submittedBy"
      FROM features.features f WHERE f.id = $1::text FOR UPDATE`,
    values: [featureId],
  };
}

export function setStatus(featureId: string, from: QcStatus, to: QcStatus): Query {
  return {
    text: `UPDATE features.features SET status = $3::text WHERE id = $1::text AND status = $2::text RETURNING version`,
    values: [featureId, from, to],
  };
}

export interface TransitionValues {
  featureId: string;
  action: QcAction;
  from: QcStatus;
  to: QcStatus;
  version: number;
  actor: string;
  actorName: string | null;
  comment: string | null;
  snapshot: unknown;
}

export const TRANSITION_JSON = `json_build_object(
  'id', t.id, 'featureId', t.feature_id, 'action', t.action, 'fromStatus', t.from_status, 'toStatus', t.to_status,
  'version', t.version, 'actor', t.actor, 'actorName', t.actor_name, 'comment', t.comment, 'at', t.created_at)`;

export function insertTransition(v: TransitionValues): Query {
  return {
    text: `
      INSERT INTO qc.transitions AS t (feature_id, action, from_status, to_status, version, actor, actor_name, comment, snapshot)
      VALUES ($1::text, $2::text, $3::text, $4::text, $5::int, $6::text, $7::text, $8::text, $9::jsonb)
      RETURNING t.id, ${TRANSITION_JSON} AS json`,
    values: [v.featureId, v.action, v.from, v.to, v.version, v.actor, v.actorName, v.comment, v.snapshot === null ? null : JSON.stringify(v.snapshot)],
  };
}

export interface QueuedJobSpec {
  task: JobTask;
  taskIdentifier: string;
  queueName: string | null;
}

/**
 * Record a transition AND queue its side effects in one statement (one round trip): the
 * qc.transitions row, a qc.jobs row per side effect, and the graphile-worker jobs that run them with
 * ONE graphile_worker.add_jobs call — one task/queue upsert and one NOTIFY for the batch instead of
 * three add_job calls in a statement of their own. Everything is in the caller's transaction, so the
 * decision and its jobs still commit together or not at all. add_jobs inserts in whatever order its
 * joins produce, so the run order (OSM before Wikibase, which reads the OSM link, before the agency
 * notice) is kept by run_at one microsecond apart: graphile picks by priority, run_at, then id.
 * Answers the transition's id and JSON and `jobs` ([{id, task}], empty when there are none).
 */
export function insertTransitionWithJobs(v: TransitionValues, jobs: readonly QueuedJobSpec[], maxAttempts: number): Query {
  return {
    text: `
      WITH t AS (
        INSERT INTO qc.transitions AS t (feature_id, action, from_status, to_status, version, actor, actor_name, comment, snapshot)
        VALUES ($1::text, $2::text, $3::text, $4::text, $5::int, $6::text, $7::text, $8::text, $9::jsonb)
        RETURNING t.*
      ), wanted AS (
        SELECT * FROM unnest($10::text[], $11::text[], $12::text[]) WITH ORDINALITY AS w(task, identifier, queue_name, n)
      ), job AS (
        INSERT INTO qc.jobs (transition_id, feature_id, version, task)
        SELECT t.id, t.feature_id, t.version, w.task FROM t CROSS JOIN wanted w ORDER BY w.n
        RETURNING id, task
      ), added AS (
        SELECT count(*) AS n FROM graphile_worker.add_jobs(ARRAY(
          SELECT ROW(w.identifier, json_build_object('jobId', job.id), w.queue_name, now() + (w.n - 1) * interval '1 microsecond', $13::int, NULL, NULL, NULL)::graphile_worker.job_spec
          FROM job JOIN wanted w ON w.task = job.task ORDER BY job.id))
        WHERE EXISTS (SELECT 1 FROM wanted)
      )
      SELECT t.id, ${TRANSITION_JSON} AS json,
        (SELECT coalesce(json_agg(json_build_object('id', job.id, 'task', job.task) ORDER BY job.id), '[]'::json) FROM job) AS jobs,
        (SELECT n FROM added) AS "graphileJobs"
      FROM t`,
    values: [
      v.featureId, v.action, v.from, v.to, v.version, v.actor, v.actorName, v.comment, v.snapshot === null ? null : JSON.stringify(v.snapshot),
      jobs.map((x) => x.task), jobs.map((x) => x.taskIdentifier), jobs.map((x) => x.queueName), maxAttempts,
    ],
  };
}

/** Re-queue a finished job for an admin: its graphile job again, the row back to queued. */
export function requeueJob(jobId: number, admin: string, taskIdentifier: string, queueName: string | null, maxAttempts: number): Query {
  return {
    text: `
      WITH job AS (
        UPDATE qc.jobs SET status = 'queued', reruns = reruns + 1, rerun_by = $2::text, reason = NULL,
          last_error = NULL, finished_at = NULL, updated_at = clock_timestamp()
        WHERE id = $1::bigint
        RETURNING id
      )
      SELECT job.id, (graphile_worker.add_job($3::text, json_build_object('jobId', job.id),
                        queue_name := $4::text, max_attempts := $5::int)).id AS "graphileJobId"
      FROM job`,
    values: [jobId, admin, taskIdentifier, queueName, maxAttempts],
  };
}

export function featureExists(featureId: string): Query {
  return {
    text: `SELECT f.status FROM features.features f WHERE f.id = $1::text
           UNION ALL SELECT 'deleted' FROM history.feature_versions h WHERE h.feature_id = $1::text
           LIMIT 1`,
    values: [featureId],
  };
}

/** The items waiting for a decision, oldest submission first. */
export function reviewQueue(limit: number): Query {
  return {
    text: `
      SELECT coalesce(json_agg(item ORDER BY "submittedAt", "transitionId"), '[]'::json)::text AS "itemsJson"
      FROM (
        SELECT f.id AS "featureId", f.version, f.name, f.kategorie, t.actor AS "submitter",
               t.actor_name AS "submitterName", t.created_at AS "submittedAt", t.comment, t.id AS "transitionId",
               CASE WHEN c.feature_id IS NULL THEN NULL
                    ELSE json_build_object('holder', c.holder, 'holderName', c.holder_name, 'claimedAt', c.claimed_at, 'expiresAt', c.expires_at) END AS "claim"
        FROM features.features f
        CROSS JOIN LATERAL (
          SELECT * FROM qc.transitions t WHERE t.feature_id = f.id AND t.action = 'submit' ORDER BY t.id DESC LIMIT 1
        ) t
        -- The live review claim (qc/claims.ts), so the desk shows who has the item open.
        LEFT JOIN qc.claims c ON c.feature_id = f.id AND c.expires_at > now()
        WHERE f.status = 'in_qc'
        ORDER BY t.created_at, t.id
        LIMIT $1::int
      ) item`,
    values: [limit],
  };
}

/** How many features wait for a decision (the partial index features_in_qc_idx answers it). */
export function queueCount(): Query {
  return { text: `SELECT count(*)::int AS "count" FROM features.features WHERE status = 'in_qc'`, values: [] };
}

export const JOB_JSON = `json_build_object(
  'id', j.id, 'featureId', j.feature_id, 'version', j.version, 'task', j.task, 'status', j.status,
  'reason', j.reason, 'result', j.result, 'attempts', j.attempts, 'lastError', j.last_error,
  'reruns', j.reruns, 'rerunBy', j.rerun_by, 'createdAt', j.created_at, 'updatedAt', j.updated_at, 'finishedAt', j.finished_at)`;

/** One conflation decision: automatic (decidedBy null) or a reviewer's. */
export const DECISION_JSON = `json_build_object(
  'id', d.id, 'jobId', d.job_id, 'target', d.target, 'outcome', d.outcome, 'chosen', d.chosen, 'moveGeometry', d.move_geometry,
  'reason', d.reason, 'candidates', d.candidates, 'decidedBy', d.decided_by, 'decidedByName', d.decided_by_name, 'at', d.created_at)`;

/** The latest conflation decision of a job for a target (the pending needs_decision with its candidates). */
export function latestDecision(jobId: number, target: 'osm' | 'wikibase'): Query {
  return {
    text: `SELECT d.outcome, d.candidates FROM qc.conflation_decisions d WHERE d.job_id = $1::bigint AND d.target = $2::text ORDER BY d.id DESC LIMIT 1`,
    values: [jobId, target],
  };
}

/** Decisions, side effects and conflation decisions of one feature, oldest first, as one JSON document. */
export function featureReviews(featureId: string): Query {
  return {
    text: `
      SELECT json_build_object(
        'featureId', $1::text,
        'status', (SELECT f.status FROM features.features f WHERE f.id = $1::text),
        'transitions', (SELECT coalesce(json_agg(${TRANSITION_JSON} ORDER BY t.id), '[]'::json) FROM qc.transitions t WHERE t.feature_id = $1::text),
        'jobs', (SELECT coalesce(json_agg(${JOB_JSON} ORDER BY j.id), '[]'::json) FROM qc.jobs j WHERE j.feature_id = $1::text),
        'exportRecords', (SELECT coalesce(json_object_agg(r.target, r.record), '{}'::json) FROM qc.export_records r WHERE r.feature_id = $1::text),
        'decisions', (SELECT coalesce(json_agg(${DECISION_JSON} ORDER BY d.id), '[]'::json) FROM qc.conflation_decisions d WHERE d.feature_id = $1::text)
      )::text AS json`,
    values: [featureId],
  };
}

export function listJobs(statuses: readonly JobStatus[], task: JobTask | undefined, limit: number): Query {
  return {
    text: `
      SELECT coalesce(json_agg(${JOB_JSON} ORDER BY j.id DESC), '[]'::json)::text AS json
      FROM (SELECT * FROM qc.jobs j WHERE j.status = ANY($1::text[]) AND ($2::text IS NULL OR j.task = $2::text)
            ORDER BY j.id DESC LIMIT $3::int) j`,
    values: [statuses, task ?? null, limit],
  };
}

export function lockJob(jobId: number): Query {
  return {
    text: `
      SELECT j.id, j.task, j.status, j.feature_id AS "featureId", j.version,
        (SELECT max(t.version) FROM qc.transitions t WHERE t.feature_id = j.feature_id AND t.action = 'approve') AS "latestApprovedVersion"
      FROM qc.jobs j WHERE j.id = $1::bigint FOR UPDATE`,
    values: [jobId],
  };
}

export function jobJson(jobId: number): Query {
  return { text: `SELECT ${JOB_JSON}::text AS json FROM qc.jobs j WHERE j.id = $1::bigint`, values: [jobId] };
}
