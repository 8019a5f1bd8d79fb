import type { ScoredOsmCandidate } from '../../../../shared/conflation.js';
import type { OsmPlanReview } from '../../../../shared/osm-plan.js';
import type { FeatureSnapshot } from '../types.js';
import type { OsmExportPart } from './exporter.js';
import type { OsmTags } from './model.js';
import { serializeOsmChange } from './xml.js';

// The plan a reviewer sees before an OSM upload (docs/qc.md "Nothing reaches OSM unseen"), built
// here from a prepared export; its shape (OsmPlanReview, services/shared/osm-plan.ts) is shared with
// the desk that shows it.

/** The root's tags after the change: from the created or modified root, else as before. */
function tagsAfter(part: OsmExportPart, before: OsmTags): OsmTags {
  const root = [...part.change.create, ...part.change.modify].find((e) => e.type === part.root.type && e.id === part.root.id);
  return root ? root.tags : before;
}

export function tagChanges(before: OsmTags, after: OsmTags): OsmPlanReview['tagChanges'] {
  const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
  return keys.filter((k) => before[k] !== after[k]).map((k) => ({ key: k, before: before[k] ?? null, after: after[k] ?? null }));
}

/**
 * The review of one prepared export. `beforeTags`: the root's tags on OSM now ({} for a creation);
 * `matched`: the conflation candidate it was linked to, when it was; `existingGeometry`: the
 * element's geometry now, when known.
 */
export function reviewOf(
  snapshot: FeatureSnapshot,
  part: OsmExportPart,
  beforeTags: OsmTags,
  matched: ScoredOsmCandidate | null,
  existingGeometry: { type: string; coordinates: unknown } | null,
): OsmPlanReview {
  const created = part.root.id < 0;
  const after = tagsAfter(part, beforeTags);
  const changes = tagChanges(created ? {} : beforeTags, after);
  const touched = part.change.create.length + part.change.modify.length + part.change.delete.length + part.change.deleteIfUnused.length > 0;
  const movesGeometry = created || part.linked?.geometryOwned === true || part.linked === undefined;
  const beforeGeometry = matched?.geometry ?? existingGeometry;
  return {
    osmChange: serializeOsmChange(part.change, 0),
    action: created ? 'create' : touched ? 'modify' : 'none',
    target: created ? null : { type: part.root.type, id: part.root.id, name: beforeTags.name ?? null },
    score: matched?.score ?? null,
    distanceM: matched?.distanceM ?? null,
    tagChanges: changes,
    kept: part.kept ?? [],
    preview: {
      before: created || !beforeGeometry ? null : { type: 'Feature', geometry: beforeGeometry, properties: beforeTags },
      after: { type: 'Feature', geometry: movesGeometry || !beforeGeometry ? snapshot.geometry : beforeGeometry, properties: after },
    },
    proposed: created ? 'create' : { type: part.root.type, id: part.root.id },
  };
}

/** The candidate a reviewer confirms a modification of an existing element with (for the decision endpoint). */
export function rootCandidate(part: OsmExportPart, beforeTags: OsmTags, geometry: { type: string; coordinates: unknown } | null): ScoredOsmCandidate {
  return {
    type: part.root.type,
    id: part.root.id,
    name: beforeTags.name ?? null,
    tags: beforeTags,
    distanceM: 0,
    overlap: null,
    nameSimilarity: null,
    strength: 'strong',
    geometry: geometry ?? { type: 'Point', coordinates: [] },
  };
}
