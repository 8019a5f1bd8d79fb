/**
 * Shared types of the export side effects (OpenStreetMap, Wikibase, agency notice).
 *
 * Glossary
 * - snapshot: the approved version of a feature, frozen at approval time; exporters never read the
 *   live row, so a re-run exports exactly what the reviewer approved.
 * - category mapping: data (not code) telling which OSM tags and which Wikidata class a `kategorie`
 *   gets; phase 2 stores it in the `metadata` schema and hands it in.
 * - export record: what an exporter remembers about its target after a success (the OSM root element,
 *   the Wikibase item); the caller persists it and hands it back for the next export of the feature.
 * - journal: the per-export write-ahead notes (changeset id, intent token) that let a re-run after a
 *   crash recover the remote result instead of creating a duplicate (see journal.ts).
 * - outcome: the terminal result of one export attempt. Transient failures are not outcomes: they throw
 *   RetryableExportError so the job queue retries with backoff.
 */

/** [longitude, latitude] in EPSG:4326, as GeoJSON orders them. */
export type Position = [number, number] | [number, number, number];

export interface PointGeometry {
  type: 'Point';
  coordinates: Position;
}
export interface LineStringGeometry {
  type: 'LineString';
  coordinates: Position[];
}
export interface PolygonGeometry {
  type: 'Polygon';
  /** The first ring is the outer boundary, the others are holes; every ring is closed (first = last). */
  coordinates: Position[][];
}
export interface MultiPolygonGeometry {
  type: 'MultiPolygon';
  coordinates: Position[][][];
}
export type FeatureGeometry = PointGeometry | LineStringGeometry | PolygonGeometry | MultiPolygonGeometry;

/** One approved version of a feature, as exporters see it. */
export interface FeatureSnapshot {
  id: string;
  version: number;
  name: string;
  kategorie: string;
  adresse?: string | null;
  telefon?: string | null;
  geometry: FeatureGeometry;
}

/** One tag family: every key must have one of its values (config/osm-tags.yaml `match`). */
export type TagFilter = Record<string, string[]>;

/** What one category becomes outside: OSM tags and the Wikidata class for P31 (null: no item is made). */
export interface CategoryRule {
  /** The tags of the feature as an area (closed way or multipolygon). */
  osmTags: Record<string, string>;
  /**
   * The tags of the feature as a node / an open way (config/osm-tags.yaml `point:` / `line:`).
   * undefined: `osmTags` when they are valid there; null: no valid tagging, a reviewer is asked.
   */
  pointTags?: Record<string, string> | null;
  lineTags?: Record<string, string> | null;
  /** Tag families of existing OSM elements that may be the same object (conflation); default: osmTags. */
  osmMatch?: TagFilter[];
  wikidataClass: string | null;
}

/** kategorie → rule. */
export type CategoryMapping = Record<string, CategoryRule>;

/**
 * The terminal result of one export attempt, recorded per feature for admins.
 * - exported: the remote side accepted the change; `result` is the new export record.
 * - unchanged: the remote side already matches the snapshot; nothing was sent.
 * - conflict: someone else changed the remote data (OSM 409/412, item deleted); an admin decides.
 * - failed: a permanent error (bad credentials, invalid data); retrying the same input cannot help.
 * - skipped: the target is not configured (reason names the missing variable).
 * - not_applicable: the target does not apply to this feature (e.g. a category without a class).
 * - needs_decision: conflation found several candidates or a weak one; a reviewer picks one or
 *   "create new" (POST /api/qc/jobs/{id}/decision) and the job runs again.
 */
export type ExportOutcome<R> =
  | { status: 'exported'; result: R; detail?: string }
  | { status: 'unchanged'; result: R }
  | { status: 'conflict'; reason: string }
  | { status: 'failed'; reason: string }
  | { status: 'skipped'; reason: string }
  | { status: 'not_applicable'; reason: string }
  | { status: 'needs_decision'; reason: string; candidates: unknown[] };

export type ExportStatus = ExportOutcome<unknown>['status'];
