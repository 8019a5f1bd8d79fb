import { samePosition } from '../geometry.js';
import type { FeatureGeometry, FeatureSnapshot, Position } from '../types.js';

/**
 * The changeset an agency receives on approval: what changed between the previously approved
 * version and this one. This is the JSON body of the webhook and the attachment of the e-mail.
 */
export interface AgencyChangeset {
  event: 'feature.approved';
  /** Stable per approved version: a receiver uses it to drop a re-delivery after a crash or retry. */
  deliveryId: string;
  kind: 'created' | 'updated';
  feature: { id: string; version: number; name: string; kategorie: string };
  /** The version approved before, or null for the first approval. */
  previousVersion: number | null;
  /** Only the fields that changed; for a first approval every field that has a value. */
  changes: { field: ChangeField; before: string | null; after: string | null }[];
  geometryChanged: boolean;
  /** The approved geometry (GeoJSON, EPSG:4326). */
  geometry: FeatureGeometry;
  reviewer: { id: string; name: string | null };
  approvedAt: string;
}

export const CHANGE_FIELDS = ['name', 'kategorie', 'adresse', 'telefon'] as const;
export type ChangeField = (typeof CHANGE_FIELDS)[number];

function sameCoordinates(a: unknown, b: unknown): boolean {
  if (typeof a === 'number' || typeof b === 'number') return false; // only reached for malformed input
  if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
  if (a.length > 0 && typeof a[0] === 'number') return samePosition(a as Position, b as Position);
  return a.every((item, i) => sameCoordinates(item, b[i]));
}

/** Geometries equal at OSM precision (1e-7°), so float noise from a round trip is no change. */
export function sameGeometry(a: FeatureGeometry, b: FeatureGeometry): boolean {
  return a.type === b.type && sameCoordinates(a.coordinates, b.coordinates);
}

const valueOf = (s: FeatureSnapshot, field: ChangeField): string | null => {
  const v = s[field];
  return v === undefined || v === null || v === '' ? null : String(v);
};

export function computeAgencyChangeset(
  previous: FeatureSnapshot | null,
  current: FeatureSnapshot,
  approval: { reviewer: { id: string; name?: string | null }; approvedAt: Date },
): AgencyChangeset {
  const changes = CHANGE_FIELDS.map((field) => ({ field, before: previous ? valueOf(previous, field) : null, after: valueOf(current, field) })).filter(
    (c) => c.before !== c.after,
  );
  return {
    event: 'feature.approved',
    deliveryId: `${current.id}:v${current.version}`,
    kind: previous ? 'updated' : 'created',
    feature: { id: current.id, version: current.version, name: current.name, kategorie: current.kategorie },
    previousVersion: previous?.version ?? null,
    changes,
    geometryChanged: previous ? !sameGeometry(previous.geometry, current.geometry) : true,
    geometry: current.geometry,
    reviewer: { id: approval.reviewer.id, name: approval.reviewer.name ?? null },
    approvedAt: approval.approvedAt.toISOString(),
  };
}
