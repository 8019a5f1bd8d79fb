import type { Queryable } from '../../db/pool.js';
import { CategoryMappingSchema } from '../../exports/category-mapping.js';
import { withOsmTagMapping, type OsmTagMapping } from '../../exports/osm-tag-mapping.js';
import type { CategoryMapping, FeatureGeometry, FeatureSnapshot } from '../../exports/types.js';
import type { JobTask } from '../states.js';

/** Everything a job needs, read from the database when it runs (never from the live feature row). */
export interface JobContext {
  id: number;
  task: JobTask;
  featureId: string;
  version: number;
  /** The transition that caused the job: its actor, time, comment and the feature as it was. */
  transition: { id: number; actor: string; actorName: string | null; comment: string | null; at: Date; snapshot: FeatureSnapshot };
  /** agency_notice: the version approved before this approval, for the changeset; null on a first approval. */
  previousApproval?: FeatureSnapshot | null;
  /** wikibase_export: the OSM side as the OSM export left it (the element and its wikidata tag), and the feature's Wikibase record. */
  osmLink?: { type: string; id: number; wikidata: string | null } | null;
  wikibaseRecord?: unknown;
}

/**
 * The two statements of every attempt (startAttempts, finishAttempts) go as named prepared statements:
 * each connection parses and plans them once instead of for every job. Each takes a list of jobs, so a
 * graphile batch job (tasks.ts runJobBatch) starts and records all of its jobs in one round trip each.
 * Both read their jobs by the primary key only, so their cost follows the batch, not the table:
 * - the start's status condition is written `(…) IS TRUE`, which the planner does not take to
 *   `jobs_status_idx`: its generic plan otherwise read the status index's whole run of queued jobs
 *   at every start (3 000 entries for a 20-job batch in the approval benchmark; a backlog's length);
 * - the finish names its ids as `= ANY(…)` besides the join: joined only to the list (which the
 *   planner guesses at 100 rows), it read the whole table while that was small (a hash join over a
 *   sequential scan: 1.4 against 0.3 ms for 20 jobs of 6 000).
 */
const START_ATTEMPT = `UPDATE qc.jobs j SET status = 'running', attempts = j.attempts + 1, process_id = $2::text,
            graphile_worker_id = $3::text, updated_at = clock_timestamp()
     FROM qc.transitions t
     WHERE j.id = ANY($1::bigint[]) AND t.id = j.transition_id AND (j.status IN ('queued', 'retrying', 'running')) IS TRUE
       AND NOT (j.task = 'wikibase_export' AND j.status IN ('queued', 'retrying') AND EXISTS (
             SELECT 1 FROM qc.jobs o WHERE o.feature_id = j.feature_id AND o.transition_id = j.transition_id AND o.task = 'osm_export'
               AND o.status IN ('queued', 'running', 'retrying', 'needs_decision')
               -- $4: the OSM exports in $1 are recorded as skipped together with it (tasks.ts runJobBatch).
               AND NOT ($4::boolean AND o.id = ANY($1::bigint[]))))
     RETURNING j.id, j.task, j.feature_id AS "featureId", j.version, t.id AS "transitionId", t.actor,
               t.actor_name AS "actorName", t.comment, t.created_at AS "at", t.snapshot,
               CASE WHEN j.task = 'agency_notice' THEN (
                 SELECT p.snapshot FROM qc.transitions p WHERE p.feature_id = j.feature_id AND p.action = 'approve' AND p.id < t.id ORDER BY p.id DESC LIMIT 1) END AS "previousApproval",
               CASE WHEN j.task = 'wikibase_export' THEN (
                 SELECT json_build_object('type', r.record->>'type', 'id', (r.record->>'id')::bigint, 'wikidata',
                   (SELECT c->'tags'->>'wikidata' FROM qc.conflation_decisions d, jsonb_array_elements(d.candidates) c
                     WHERE d.feature_id = r.feature_id AND d.target = 'osm' AND c->>'type' = r.record->>'type' AND (c->>'id')::bigint = (r.record->>'id')::bigint
                     ORDER BY d.id DESC LIMIT 1))
                 FROM qc.export_records r WHERE r.feature_id = j.feature_id AND r.target = 'osm') END AS "osmLink",
               CASE WHEN j.task = 'wikibase_export' THEN (
                 SELECT r.record FROM qc.export_records r WHERE r.feature_id = j.feature_id AND r.target = 'wikibase') END AS "wikibaseRecord"`;

/**
 * Claim the job for this attempt; null when it is already finished (a duplicate graphile job) or, for
 * a Wikibase export, while the OSM export of its approval is still on its way (tasks.ts tells the
 * two apart). The same statement reads what the task needs besides the transition — the previous
 * approval (agency_notice), the OSM link and the Wikibase record (wikibase_export) — so an attempt
 * costs one round trip before its work and one after (finishAttempt).
 */
export async function startAttempt(db: Queryable, jobId: number, processId: string, graphileWorkerId: string | null): Promise<JobContext | null> {
  return (await startAttempts(db, [jobId], processId, graphileWorkerId)).get(jobId) ?? null;
}

/**
 * startAttempt for several jobs in one statement: the contexts of the jobs it started, by id.
 * `osmSkippedAlongside`: the OSM exports among `jobIds` are recorded as skipped with the others, so a
 * Wikibase export among them need not wait for its approval's OSM export when that is one of them.
 */
export async function startAttempts(db: Queryable, jobIds: readonly number[], processId: string, graphileWorkerId: string | null, osmSkippedAlongside = false): Promise<Map<number, JobContext>> {
  const started = new Map<number, JobContext>();
  if (jobIds.length === 0) return started;
  const { rows } = await db.query({ name: 'qc_start_attempts', text: START_ATTEMPT, values: [jobIds, processId, graphileWorkerId, osmSkippedAlongside] });
  for (const row of rows as StartedRow[]) started.set(Number(row.id), contextOf(row));
  return started;
}

type StartedRow = {
  id: string;
  task: JobTask;
  featureId: string;
  version: number;
  transitionId: string;
  actor: string;
  actorName: string | null;
  comment: string | null;
  at: Date;
  snapshot: Record<string, unknown>;
  previousApproval: Record<string, unknown> | null;
  osmLink: { type: string; id: number; wikidata: string | null } | null;
  wikibaseRecord: unknown;
};

function contextOf(row: StartedRow): JobContext {
  return {
    id: Number(row.id),
    task: row.task,
    featureId: row.featureId,
    version: row.version,
    transition: { id: Number(row.transitionId), actor: row.actor, actorName: row.actorName, comment: row.comment, at: new Date(row.at), snapshot: snapshotFrom(row.snapshot) },
    previousApproval: row.previousApproval ? snapshotFrom(row.previousApproval) : null,
    osmLink: row.osmLink ? { type: row.osmLink.type, id: Number(row.osmLink.id), wikidata: row.osmLink.wikidata } : null,
    wikibaseRecord: row.wikibaseRecord ?? null,
  };
}

/** A stored row snapshot (to_jsonb of features.features, geom as GeoJSON) as the exporters' type. */
export function snapshotFrom(stored: Record<string, unknown>): FeatureSnapshot {
  return {
    id: String(stored.id),
    version: Number(stored.version),
    name: String(stored.name),
    kategorie: String(stored.kategorie),
    adresse: (stored.adresse as string | null | undefined) ?? null,
    telefon: (stored.telefon as string | null | undefined) ?? null,
    geometry: stored.geometry as FeatureGeometry,
  };
}

/** The Wikidata classes from metadata.category_mapping, the OSM tags from the tag mapping file. */
export async function loadCategoryMapping(db: Queryable, osmTags: OsmTagMapping): Promise<CategoryMapping> {
  const { rows } = await db.query(`SELECT kategorie, osm_tags AS "osmTags", wikidata_class AS "wikidataClass" FROM metadata.category_mapping`);
  const raw: Record<string, unknown> = {};
  for (const row of rows as { kategorie: string; osmTags: unknown; wikidataClass: string | null }[]) raw[row.kategorie] = { osmTags: row.osmTags, wikidataClass: row.wikidataClass };
  return withOsmTagMapping(CategoryMappingSchema.parse(raw), osmTags);
}

/** How many OSM exports finished in the last hour, and when the oldest of them leaves the window. */
/**
 * OSM_MAX_EDITS_PER_HOUR counts changes (elements created, modified or deleted on OSM), not features:
 * the changes of OSM exports finished in the last hour (an export recorded before migration 021
 * counts as one), and when the oldest of them leaves the window.
 */
export async function recentOsmEdits(db: Queryable): Promise<{ count: number; windowFreesAt: Date | null }> {
  const { rows } = await db.query(
    `SELECT coalesce(sum(coalesce(osm_changes, 1)), 0)::int AS count, min(finished_at) + interval '1 hour' AS "windowFreesAt"
     FROM qc.jobs WHERE task = 'osm_export' AND status = 'exported' AND finished_at > now() - interval '1 hour'`,
  );
  const row = rows[0] as { count: number; windowFreesAt: Date | null };
  return { count: row.count, windowFreesAt: row.windowFreesAt ? new Date(row.windowFreesAt) : null };
}

/** Reviewers and admins with an address (REVIEWER_EMAILS is added by the notifier). */
export async function reviewerAddresses(db: Queryable): Promise<string[]> {
  const { rows } = await db.query(`SELECT email FROM users.users WHERE role IN ('reviewer', 'admin') AND email IS NOT NULL ORDER BY id`);
  return (rows as { email: string }[]).map((r) => r.email);
}

export async function userEmail(db: Queryable, userId: string): Promise<string | null> {
  const { rows } = await db.query(`SELECT email FROM users.users WHERE id = $1::text`, [userId]);
  return (rows[0] as { email: string | null } | undefined)?.email ?? null;
}

export type TerminalOutcome =
  | { status: 'exported' | 'unchanged' | 'sent'; result: unknown; detail?: string | undefined }
  | { status: 'conflict' | 'failed' | 'skipped' | 'not_applicable'; reason: string }
  | { status: 'needs_decision'; reason: string; candidates: unknown[] };

/**
 * One statement for the outcomes of several jobs ($1: [{id, status, reason, result, target}]); an
 * export's new record replaces the feature's previous one (the last job's, should a list hold two of
 * one feature and target).
 */
const FINISH_ATTEMPTS = `WITH input AS (
       SELECT * FROM jsonb_to_recordset($1::jsonb) AS i(id bigint, status text, reason text, result jsonb, target text)
     ), finished AS (
       UPDATE qc.jobs j SET status = i.status, reason = i.reason, result = i.result, last_error = NULL, process_id = NULL,
              finished_at = clock_timestamp(), updated_at = clock_timestamp()
       FROM input i WHERE j.id = i.id AND j.id = ANY(ARRAY(SELECT id FROM input)) RETURNING j.id, j.feature_id, i.result, i.target)
     INSERT INTO qc.export_records (feature_id, target, record, job_id)
     SELECT DISTINCT ON (feature_id, target) feature_id, target, result, id FROM finished WHERE target IS NOT NULL AND result IS NOT NULL
     ORDER BY feature_id, target, id DESC
     ON CONFLICT (feature_id, target) DO UPDATE SET record = EXCLUDED.record, job_id = EXCLUDED.job_id, updated_at = clock_timestamp()`;

/** The two statements' text, for the test of their plans (qc-queues.test.ts). */
export const ATTEMPT_STATEMENTS = { start: START_ATTEMPT, finish: FINISH_ATTEMPTS } as const;

export interface FinishedJob {
  id: number;
  outcome: TerminalOutcome;
  /** The export record's target, kept only for an exported or unchanged outcome. */
  recordTarget: 'osm' | 'wikibase' | null;
}

/** Record the terminal outcome; an export's new record replaces the feature's previous one in the same transaction. */
export async function finishAttempt(db: Queryable, job: Pick<JobContext, 'id'>, outcome: TerminalOutcome, recordTarget: 'osm' | 'wikibase' | null): Promise<void> {
  await finishAttempts(db, [{ id: job.id, outcome, recordTarget }]);
}

/** finishAttempt for several jobs in one statement. */
export async function finishAttempts(db: Queryable, jobs: readonly FinishedJob[]): Promise<void> {
  if (jobs.length === 0) return;
  const input = jobs.map(({ id, outcome, recordTarget }) => ({
    id,
    status: outcome.status,
    reason: 'reason' in outcome ? outcome.reason : (outcome.detail ?? null),
    result: 'result' in outcome ? (outcome.result ?? null) : 'candidates' in outcome ? { candidates: outcome.candidates } : null,
    target: recordTarget && (outcome.status === 'exported' || outcome.status === 'unchanged') ? recordTarget : null,
  }));
  await db.query({ name: 'qc_finish_attempts', text: FINISH_ATTEMPTS, values: [JSON.stringify(input)] });
}

export async function markRetrying(db: Queryable, jobId: number, error: string): Promise<void> {
  await db.query(`UPDATE qc.jobs SET status = 'retrying', last_error = $2::text, process_id = NULL, updated_at = clock_timestamp() WHERE id = $1::bigint`, [jobId, error.slice(0, 2000)]);
}
