import type { Geometry } from '../../../shared/features/schema.js';

/**
 * The OSM plan an export waits with (GET /api/qc/jobs `plan`, docs/qc.md "Nothing reaches OSM
 * unseen"): what the desk shows before anything is uploaded, and the choice that confirms it.
 */
export interface PlanReview {
  osmChange: string;
  action: 'create' | 'modify' | 'none';
  target: { type: string; id: number; name: string | null } | null;
  score: number | null;
  distanceM: number | null;
  tagChanges: { key: string; before: string | null; after: string | null }[];
  kept: { key: string; ours: string | null; theirs: string | null }[];
  preview: { before: { geometry: Geometry } | null; after: { geometry: Geometry } };
  proposed: 'create' | { type: 'node' | 'way' | 'relation'; id: number };
}

/** The plan of a listed job, when it has one. */
export function planOf(job: { plan?: unknown } | undefined): PlanReview | null {
  const plan = job?.plan as PlanReview | null | undefined;
  return plan && typeof plan.osmChange === 'string' && Array.isArray(plan.tagChanges) ? plan : null;
}
