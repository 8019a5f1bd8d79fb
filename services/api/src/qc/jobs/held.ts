import type { Queryable } from '../../db/pool.js';

/** An OSM element (`type/id`) and the feature that holds it. */
export interface HeldElement {
  element: string;
  featureId: string;
}

/**
 * Which of `elements` (`type/id`) features already hold, for the one-to-one assignment
 * (exports/conflation/assignment.ts): the element of a feature's OSM export record, and the element
 * an OSM export still on its way (queued, running, retrying, waiting for a reviewer) is decided to
 * link — its latest decision a link, automatic or a reviewer's, or a plan waiting on the desk that
 * modifies it. A question without a plan holds nothing. `exceptJobs`: the batch's own jobs, whose
 * decisions the caller reads itself. The caller leaves out what a feature holds itself.
 */
export async function heldElements(db: Queryable, elements: readonly string[], exceptJobs: readonly number[]): Promise<HeldElement[]> {
  if (elements.length === 0) return [];
  const { rows } = await db.query(
    `SELECT DISTINCT x.element, x.feature_id AS "featureId" FROM (
       SELECT (r.record->>'type') || '/' || (r.record->>'id') AS element, r.feature_id
       FROM qc.export_records r WHERE r.target = 'osm'
       UNION ALL
       SELECT CASE WHEN d.outcome = 'link' THEN d.chosen
                   WHEN jsonb_typeof(d.decision->'plan'->'proposed') = 'object'
                     THEN (d.decision->'plan'->'proposed'->>'type') || '/' || (d.decision->'plan'->'proposed'->>'id') END,
              j.feature_id
       FROM qc.jobs j
       CROSS JOIN LATERAL (SELECT c.outcome, c.chosen, c.decision FROM qc.conflation_decisions c
                           WHERE c.job_id = j.id AND c.target = 'osm' ORDER BY c.id DESC LIMIT 1) d
       WHERE j.task = 'osm_export' AND j.status IN ('queued', 'running', 'retrying', 'needs_decision')
         AND j.id <> ALL($2::bigint[])
     ) x
     WHERE x.element = ANY($1::text[])
     ORDER BY x.element, "featureId"`,
    [elements, exceptJobs],
  );
  return rows as HeldElement[];
}

/** The latest OSM conflation decision of each of `jobIds` (automatic when decidedBy is null). */
export async function latestOsmDecisions(
  db: Queryable,
  jobIds: readonly number[],
): Promise<{ jobId: number; outcome: string; chosen: string | null; decidedBy: string | null; candidates: unknown[]; answeredPlan: string | null }[]> {
  const { rows } = await db.query(
    `SELECT DISTINCT ON (d.job_id) d.job_id AS "jobId", d.outcome, d.chosen, d.decided_by AS "decidedBy", d.candidates,
       (SELECT p.decision->'plan'->>'osmChange' FROM qc.conflation_decisions p
         WHERE p.job_id = d.job_id AND p.target = 'osm' AND p.id < d.id ORDER BY p.id DESC LIMIT 1) AS "answeredPlan"
     FROM qc.conflation_decisions d WHERE d.target = 'osm' AND d.job_id = ANY($1::bigint[]) ORDER BY d.job_id, d.id DESC`,
    [jobIds],
  );
  return (rows as { jobId: string; outcome: string; chosen: string | null; decidedBy: string | null; candidates: unknown[]; answeredPlan: string | null }[]).map((r) => ({ ...r, jobId: Number(r.jobId) }));
}
