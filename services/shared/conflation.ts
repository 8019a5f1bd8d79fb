/**
 * The candidates a conflation lookup found before a feature's first export (docs/qc.md "Decision
 * flow"): stored with an export job that waits for a reviewer, returned by GET /api/qc/jobs, and
 * shown on the web app's /qc/decisions page. One definition for the API that writes them and the
 * site that reads them, so the two cannot drift apart.
 */

/** An OpenStreetMap element near the feature, scored against it. */
export interface ScoredOsmCandidate {
  type: 'node' | 'way' | 'relation';
  id: number;
  name: string | null;
  tags: Record<string, string>;
  distanceM: number;
  overlap: number | null;
  nameSimilarity: number | null;
  strength: 'strong' | 'weak';
  /**
   * Whether the candidate has the category's first tag family (`primary`, e.g. landuse=cemetery for
   * a friedhof) or another one of config/osm-tags.yaml `match` (`secondary`, e.g. amenity=grave_yard).
   */
  category?: 'primary' | 'secondary';
  /** 0..1: name, place and category together; the order of the candidates and of one-to-one assignment. */
  score?: number;
  /** For the review map: the candidate as GeoJSON (Point, LineString or Polygon/MultiPolygon). */
  geometry: { type: string; coordinates: unknown };
}

/** A Wikidata / Wikibase item that may already be the feature. */
export interface WikibaseCandidate {
  itemId: string;
  label: string | null;
  distanceM: number | null;
  nameSimilarity: number | null;
  /** Found through the OSM link (P402 or the element's wikidata tag): strong by itself. */
  viaOsmLink: boolean;
  strength: 'strong' | 'weak';
}
