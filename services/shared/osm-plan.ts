import type { ScoredOsmCandidate } from './conflation.js';

/**
 * The plan a reviewer sees before an OSM upload (docs/qc.md "Nothing reaches OSM unseen"): the
 * osmChange document as it will be uploaded, a GeoJSON preview of the element before and after, and
 * per feature the reason — created or matched to which element, with score and distance — and the
 * tag changes. The API builds it (services/api/src/exports/osm/review.ts) and stores it with the
 * export job's pending decision; GET /api/qc/jobs lists it as `plan`; the desk (/qc/decisions) shows
 * it and the reviewer confirms (chooses `proposed`) or corrects (chooses another element or
 * "create"). One definition for the API that writes it and the site that reads it.
 */
export interface OsmPlanReview {
  /** The osmChange as uploaded, changeset id 0 (the real one is set at upload). */
  osmChange: string;
  action: 'create' | 'modify' | 'none';
  /** The OSM element: matched, existing, or (for a creation) null. */
  target: (OsmElementRef & { name: string | null }) | null;
  score: number | null;
  distanceM: number | null;
  /** Tag changes of the element: before is null for an added key, after null for a removed one. */
  tagChanges: { key: string; before: string | null; after: string | null }[];
  /** Values someone changed on OSM since our last export, kept. */
  kept: { key: string; ours: string | null; theirs: string | null }[];
  preview: { before: OsmPlanFeature | null; after: OsmPlanFeature };
  /** What the reviewer confirms with: the element ({type, id}) or "create". */
  proposed: OsmElementRef | 'create';
}

/** An OSM element by type and id, as a candidate names it. */
export type OsmElementRef = Pick<ScoredOsmCandidate, 'type' | 'id'>;

/** The element as a GeoJSON Feature: its geometry and, as properties, its tags. */
export interface OsmPlanFeature {
  type: 'Feature';
  geometry: { type: string; coordinates: unknown };
  properties: Record<string, string>;
}

/** The plan of a listed job (GET /api/qc/jobs), when it has one. */
export function planOf(job: { plan?: unknown } | undefined): OsmPlanReview | null {
  const plan = job?.plan as OsmPlanReview | null | undefined;
  return plan && typeof plan.osmChange === 'string' && Array.isArray(plan.tagChanges) ? plan : null;
}
