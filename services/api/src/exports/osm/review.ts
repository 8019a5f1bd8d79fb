import type { ScoredOsmCandidate } from '../../../../shared/conflation.js';
import type { FeatureSnapshot } from '../types.js';
import type { OsmExportPart } from './exporter.js';
import { elementKey, type OsmElement, type OsmTags } from './model.js';
import { serializeOsmChange } from './xml.js';

/**
 * The plan a reviewer sees before an OSM upload (docs/qc.md "Nothing reaches OSM unseen"): the
 * osmChange document as it will be uploaded, a GeoJSON preview of the element before and after, and
 * per feature the reason — created or matched to which element, with score and distance — and the
 * tag changes. Stored with the export job's pending decision; the desk shows it and the reviewer
 * confirms (chooses the proposed element or "create") or corrects (chooses another).
 */
export interface ExportPlanReview {
  /** The osmChange as uploaded, changeset id 0 (the real one is set at upload). */
  osmChange: string;
  action: 'create' | 'modify' | 'none';
  /** The OSM element: matched, existing, or (for a creation) null. */
  target: { type: string; id: number; name: string | null } | null;
  score: number | null;
  distanceM: number | null;
  /** Tag changes of the element: before is null for an added key, after null for a removed one. */
  tagChanges: { key: string; before: string | null; after: string | null }[];
  /** Values someone changed on OSM since our last export, kept. */
  kept: { key: string; ours: string | null; theirs: string | null }[];
  preview: { before: GeoJsonFeature | null; after: GeoJsonFeature };
  /** What the reviewer confirms with: the element ({type, id}) or "create". */
  proposed: { type: string; id: number } | 'create';
}

interface GeoJsonFeature {
  type: 'Feature';
  geometry: { type: string; coordinates: unknown };
  properties: OsmTags;
}

/** The root's tags after the change: from the created or modified root, else as before. */
function tagsAfter(part: OsmExportPart, before: OsmTags): OsmTags {
  const root = [...part.change.create, ...part.change.modify].find((e) => e.type === part.root.type && e.id === part.root.id);
  return root ? root.tags : before;
}

export function tagChanges(before: OsmTags, after: OsmTags): ExportPlanReview['tagChanges'] {
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
): ExportPlanReview {
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

export const keyOf = (e: Pick<OsmElement, 'type' | 'id'>) => elementKey(e.type, e.id);
