import type { Query } from '../db/pool.js';
import { BATCH_TASK_IDENTIFIER, EXPORT_QUEUES, type JobStatus, type JobTask, type QcAction, type QcStatus } from './states.js';

/**
 * The SQL of the QC workflow, as `{ text, values }` with parameters only. JSON answers are built by
 * Postgres with camelCase keys.
 */

/** The feature row as history.feature_versions stores it: every column, geom as GeoJSON. */
const SNAPSHOT = `(to_jsonb(f) - 'geom' - 'geojson') || jsonb_build_object('geometry', ST_AsGeoJSON(f.geom)::jsonb)`;

/**
 * Lock the feature for a transition; concurrent deciders queue here and see the winner's state.
 * The statements of a transition are named (db/pool.ts Query.name): planned once per connection.
 */
export function lockForTransition(featureId: string): Query {
  return {
    name: 'qc_lock_for_transition',
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
    name: 'qc_set_status',
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
    name: 'qc_insert_transition',
    text: `
      INSERT INTO qc.transitions AS t (feature_id, action, from_status, to_status, version, actor, actor_name, comment, snapshot)
      VALUES ($1::text, $2::text, $3::text, $4::text, $5::int, $6::text, $7::text, $8::text, $9::jsonb)
      RETURNING t.id, ${TRANSITION_JSON} AS json`,
    values: [v.featureId, v.action, v.from, v.to, v.version, v.actor, v.actorName, v.comment, v.snapshot === null ? null : JSON.stringify(v.snapshot)],
  };
}

/** Jobs one qc.job_outbox row names at most, so a relay round (at most RELAY_LIMIT jobs) always takes at least one row. */
export const OUTBOX_ROW_JOBS = 100;

/**
 * The statement part that queues the jobs of `source` (a CTE or table with an `id` column) for the
 * relay: one qc.job_outbox row naming them (migration 030; one per OUTBOX_ROW_JOBS), none when there
 * are none. Every path that queues a job or puts one back (transitions, re-runs, rows given back,
 * link-back exports, released jobs of dead workers) goes through it.
 */
export const queueForRelay = (source: string) =>
  `INSERT INTO qc.job_outbox (job_ids)
   SELECT array_agg(c.id ORDER BY c.id) FROM (SELECT s.id, (row_number() OVER (ORDER BY s.id) - 1) / ${OUTBOX_ROW_JOBS} AS chunk FROM ${source} s) c
   GROUP BY c.chunk`;

/**
 * Record a transition AND queue its side effects in one statement (one round trip): the
 * qc.transitions row, a qc.jobs row per side effect and one qc.job_outbox row naming them (migration
 * 030): the QC worker's relay turns them into graphile-worker jobs (relayJobs below), so the
 * decision's transaction makes no graphile_worker call at all — no task/queue upsert and no NOTIFY,
 * which serialises concurrent commits. Everything is in the caller's transaction: the decision and
 * its jobs commit together or not at all, and a rolled-back decision leaves nothing to relay.
 * Answers the transition's id and JSON and `jobs` ([{id, task}], empty when there are none).
 */
export function insertTransitionWithJobs(v: TransitionValues, tasks: readonly JobTask[], maxAttempts: number): Query {
  return {
    name: 'qc_insert_transition_with_jobs',
    text: `
      WITH t AS (
        INSERT INTO qc.transitions AS t (feature_id, action, from_status, to_status, version, actor, actor_name, comment, snapshot)
        VALUES ($1::text, $2::text, $3::text, $4::text, $5::int, $6::text, $7::text, $8::text, $9::jsonb)
        RETURNING t.*
      ), job AS (
        INSERT INTO qc.jobs (transition_id, feature_id, version, task, max_attempts, relayed_at)
        SELECT t.id, t.feature_id, t.version, w.task, $11::smallint, clock_timestamp()
        FROM t CROSS JOIN unnest($10::text[]) WITH ORDINALITY AS w(task, n) ORDER BY w.n
        RETURNING id, task
      ), outbox AS (
        ${queueForRelay('job')}
      )
      SELECT t.id, ${TRANSITION_JSON} AS json,
        (SELECT coalesce(json_agg(json_build_object('id', job.id, 'task', job.task) ORDER BY job.id), '[]'::json) FROM job) AS jobs
      FROM t`,
    values: [
      v.featureId, v.action, v.from, v.to, v.version, v.actor, v.actorName, v.comment, v.snapshot === null ? null : JSON.stringify(v.snapshot),
      tasks, maxAttempts,
    ],
  };
}

/**
 * The relay: the oldest qc.job_outbox rows, up to `limit` jobs (a row holds at most OUTBOX_ROW_JOBS), become graphile
 * jobs with ONE add_jobs call and are deleted — in one statement, so in one transaction: each row is
 * relayed exactly once (FOR UPDATE SKIP LOCKED lets relays of several workers run side by side). The
 * job rows are only read. Rows queued by a release before migration 030 (relayed_at NULL, no outbox
 * row; while an upgrade rolls) are taken too, up to what the limit leaves, and marked relayed as
 * before. The rows go as graphile batch jobs (states.ts BATCH_TASK_IDENTIFIER): one per named queue,
 * the payload their ids and tasks in id order ([{jobId, task}]) — a task's rows in the feature's
 * export queue (exportQueueSql) when `inQueue`, else in no named queue. So an approval's OSM and
 * Wikibase exports stay in one queue, in order (OSM first, then Wikibase, which reads the OSM link:
 * tasks.ts runJobBatch), and the groups keep the order of their first rows by run_at one microsecond
 * apart (graphile picks by priority, run_at, then id). A group's max_attempts is the largest of its
 * rows'. Answers the jobs relayed, the graphile jobs added and whether more may wait.
 */
export function relayJobs(limit: number, tasks: readonly { task: JobTask; inQueue: boolean }[], defaultMaxAttempts: number): Query {
  return {
    text: `
      WITH boxed AS (
        SELECT o.id, o.job_ids FROM qc.job_outbox o ORDER BY o.id LIMIT $1::int FOR UPDATE SKIP LOCKED
      ), taken AS (
        SELECT b.id, b.job_ids FROM (SELECT b.*, sum(cardinality(b.job_ids)) OVER (ORDER BY b.id) AS upto FROM boxed b) b
        WHERE b.upto <= $1::int
      ), emptied AS (
        DELETE FROM qc.job_outbox o USING taken WHERE o.id = taken.id RETURNING o.job_ids
      ), legacy AS (
        SELECT j.id FROM qc.jobs j WHERE j.relayed_at IS NULL ORDER BY j.id
        LIMIT greatest(0, $1::int - (SELECT coalesce(sum(cardinality(job_ids)), 0) FROM taken))::int FOR UPDATE SKIP LOCKED
      ), legacy_marked AS (
        UPDATE qc.jobs j SET relayed_at = clock_timestamp() FROM legacy WHERE j.id = legacy.id RETURNING j.id
      ), ids AS (
        SELECT unnest(e.job_ids) AS id FROM emptied e UNION SELECT l.id FROM legacy_marked l
      ), marked AS (
        SELECT j.id, j.task, j.feature_id, j.max_attempts FROM qc.jobs j JOIN ids ON ids.id = j.id
      ), grouped AS (
        SELECT CASE WHEN w.in_queue THEN ${exportQueueSql('m.feature_id')} END AS queue, m.id, m.task, coalesce(m.max_attempts, $4::smallint) AS max_attempts
        FROM marked m JOIN unnest($2::text[], $3::boolean[]) AS w(task, in_queue) ON w.task = m.task
      ), specs AS (
        SELECT min(g.id) AS first, ROW($5::text, json_agg(json_build_object('jobId', g.id, 'task', g.task) ORDER BY g.id), g.queue,
                   now() + (row_number() OVER (ORDER BY min(g.id)) - 1) * interval '1 microsecond',
                   max(g.max_attempts), NULL, NULL, NULL)::graphile_worker.job_spec AS spec
        FROM grouped g GROUP BY g.queue
      ), added AS (
        SELECT count(*)::int AS n FROM graphile_worker.add_jobs(ARRAY(SELECT spec FROM specs ORDER BY first))
        WHERE EXISTS (SELECT 1 FROM specs)
      )
      SELECT (SELECT count(*) FROM marked)::int AS relayed, coalesce((SELECT n FROM added), 0)::int AS added,
             ((SELECT count(*) FROM boxed) > (SELECT count(*) FROM taken) OR (SELECT count(*) FROM boxed) = $1::int
               OR (SELECT count(*) FROM legacy) > 0) AS more`,
    values: [limit, tasks.map((t) => t.task), tasks.map((t) => t.inQueue), defaultMaxAttempts, BATCH_TASK_IDENTIFIER],
  };
}

/**
 * The graphile named queue of a feature's exports (qc/states.ts EXPORT_QUEUES): `exports:<n>`, n the
 * first byte of the md5 of the feature id modulo EXPORT_QUEUES. `feature` is a SQL expression.
 */
export function exportQueueSql(feature: string): string {
  return `'exports:' || (get_byte(decode(md5(${feature}), 'hex'), 0) % ${EXPORT_QUEUES})`;
}

/**
 * Another graphile job for a qc.jobs row that stays on its way (a wait, a retry at a given time):
 * graphile task `identifier`, not before `runAt`, in the feature's export queue when `inQueue`.
 */
export function addGraphileJob(jobId: number, identifier: string, inQueue: boolean, runAt: Date, maxAttempts: number): Query {
  return {
    text: `
      SELECT graphile_worker.add_job($2::text, json_build_object('jobId', j.id), queue_name => CASE WHEN $3::boolean THEN ${exportQueueSql('j.feature_id')} END,
               run_at => $4::timestamptz, max_attempts => $5::int)
      FROM qc.jobs j WHERE j.id = $1::bigint`,
    values: [jobId, identifier, inQueue, runAt, maxAttempts],
  };
}

/**
 * Queue a finished job again (an admin's re-run, a reviewer's conflation decision): the row back to
 * queued and into the outbox, so the relay adds its graphile job exactly once.
 */
export function requeueJob(jobId: number, actor: string, maxAttempts: number): Query {
  return {
    text: `
      WITH job AS (
        UPDATE qc.jobs SET status = 'queued', reruns = reruns + 1, rerun_by = $2::text, reason = NULL,
          last_error = NULL, finished_at = NULL, relayed_at = clock_timestamp(), max_attempts = $3::smallint, updated_at = clock_timestamp()
        WHERE id = $1::bigint
        RETURNING id
      ), outbox AS (
        ${queueForRelay('job')}
      )
      SELECT id FROM job`,
    values: [jobId, actor, maxAttempts],
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
  'id', d.id, 'jobId', d.job_id, 'version', (SELECT dj.version FROM qc.jobs dj WHERE dj.id = d.job_id), 'target', d.target, 'outcome', d.outcome, 'chosen', d.chosen, 'moveGeometry', d.move_geometry,
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

/**
 * Jobs by status, newest first, each with the feature as approved (name, kategorie, geometry) and,
 * for a job waiting in needs_decision, the candidates of its pending conflation decision (for the
 * review desk's map); null otherwise.
 */
export function listJobs(statuses: readonly JobStatus[], task: JobTask | undefined, limit: number): Query {
  return {
    text: `
      SELECT coalesce(json_agg((${JOB_JSON}::jsonb || jsonb_build_object(
          'feature', jsonb_build_object('name', t.snapshot->'name', 'kategorie', t.snapshot->'kategorie', 'geometry', t.snapshot->'geometry'),
          'candidates', CASE WHEN j.status = 'needs_decision' THEN
            (SELECT d.candidates FROM qc.conflation_decisions d
              WHERE d.job_id = j.id AND d.target = CASE j.task WHEN 'osm_export' THEN 'osm' ELSE 'wikibase' END
              ORDER BY d.id DESC LIMIT 1) END,
          -- The OSM plan waiting for a reviewer (osmChange, preview, tag changes), issue 27.
          'plan', CASE WHEN j.status = 'needs_decision' AND j.task = 'osm_export' THEN
            (SELECT d.decision->'plan' FROM qc.conflation_decisions d
              WHERE d.job_id = j.id AND d.target = 'osm' ORDER BY d.id DESC LIMIT 1) END)) ORDER BY j.id DESC), '[]'::json)::text AS json
      FROM (SELECT * FROM qc.jobs j WHERE j.status = ANY($1::text[]) AND ($2::text IS NULL OR j.task = $2::text)
            ORDER BY j.id DESC LIMIT $3::int) j
      JOIN qc.transitions t ON t.id = j.transition_id`,
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
