import type { Bbox } from '../../../shared/features/schema.js';
import type { Query } from '../db/pool.js';
import { FEATURE_JSON } from '../features/queries.js';
import { CLAIM_JSON } from './claims-queries.js';

/**
 * The SQL of the review view: the review checks computed by PostGIS, the last approved version for
 * the diff, and a contributor's own submissions. Parameters only; JSON built by Postgres.
 */
export interface CheckThresholds {
  /** A vertex whose two edges meet at less than this many degrees is a spike. */
  spikeAngleDegrees: number;
  /** A polygon part smaller than this (m²) is tiny. */
  tinyAreaM2: number;
  /** A polygon part whose isoperimetric quotient 4πA/P² is below this is a sliver (a square is 0.785). */
  sliverThinness: number;
  /** How near another feature of the same kategorie must be (m) to be a duplicate candidate … */
  duplicateDistanceM: number;
  /** … and how similar its name (qc.name_similarity, 0 to 1). */
  duplicateNameSimilarity: number;
}

export const DEFAULT_THRESHOLDS: CheckThresholds = {
  spikeAngleDegrees: 5,
  tinyAreaM2: 1,
  sliverThinness: 0.05,
  duplicateDistanceM: 25,
  duplicateNameSimilarity: 0.4,
};

/** A snapshot (history.feature_versions / qc.transitions) as the GeoJSON Feature the API served. */
const SNAPSHOT_FEATURE = (s: string) => `json_build_object(
  'type', 'Feature', 'id', ${s}->>'id', 'geometry', ${s}->'geometry',
  'properties', jsonb_strip_nulls(jsonb_build_object(
    'name', ${s}->'name', 'kategorie', ${s}->'kategorie', 'adresse', ${s}->'adresse', 'telefon', ${s}->'telefon',
    'status', ${s}->'status', 'version', ${s}->'version')))`;

/**
 * The checks of one feature as a JSON array of { code, message, details }. Each check is one branch
 * of a UNION ALL over the feature row `f`:
 * - spike: a vertex of a ring or line whose edges fold back onto each other; angles measured in Web
 *   Mercator, which is conformal, so they are the angles on the ground.
 * - tiny_area / sliver: per polygon part, area and thinness on the spheroid (geography).
 * - outside_city: the geometry does not meet the configured city extent (skipped when none is set).
 * - duplicate_candidate: another feature of the same kategorie within a few metres with a similar name.
 * - missing_address: a denkmal without adresse.
 */
function checksJson(t: CheckThresholds, extent: Bbox | undefined, values: unknown[]): string {
  const p = (value: unknown, cast: string) => {
    values.push(value);
    return `$${values.length}::${cast}`;
  };
  const spike = p(t.spikeAngleDegrees, 'float8');
  const tiny = p(t.tinyAreaM2, 'float8');
  const sliver = p(t.sliverThinness, 'float8');
  const distance = p(t.duplicateDistanceM, 'float8');
  const similarity = p(t.duplicateNameSimilarity, 'float8');
  const extentSql = extent
    ? `ST_MakeEnvelope(${p(extent.minLon, 'float8')}, ${p(extent.minLat, 'float8')}, ${p(extent.maxLon, 'float8')}, ${p(extent.maxLat, 'float8')}, 4326)`
    : 'NULL::geometry';
  return `(
    SELECT coalesce(json_agg(json_build_object('code', c.code, 'message', c.message, 'details', c.details) ORDER BY c.ord, c.message), '[]'::json)
    FROM (
      -- spike
      SELECT 1 AS ord, 'spike' AS code,
             format('a spike: the edges meet at %s° at vertex %s', round(v.angle::numeric, 1), v.n) AS message,
             json_build_object('angleDegrees', round(v.angle::numeric, 2), 'vertex', v.n, 'ring', v.ring, 'coordinates', json_build_array(ST_X(v.vertex), ST_Y(v.vertex))) AS details
      FROM (
        SELECT r.ring, r.i AS n, r.lonlat[r.i] AS vertex,
               degrees(least(abs(ST_Azimuth(r.pts[r.i], r.prev) - ST_Azimuth(r.pts[r.i], r.next)),
                             2 * pi() - abs(ST_Azimuth(r.pts[r.i], r.prev) - ST_Azimuth(r.pts[r.i], r.next)))) AS angle
        FROM (
          SELECT g.ring, g.pts, g.lonlat, g.closed, i,
                 g.pts[CASE WHEN i = 1 THEN cardinality(g.pts) - 1 ELSE i - 1 END] AS prev,
                 g.pts[i + 1] AS next
          FROM (
            SELECT array_to_string(d.path[1:cardinality(d.path) - 1], '.') AS ring,
                   array_agg(ST_Transform(d.geom, 3857) ORDER BY d.path[cardinality(d.path)]) AS pts,
                   array_agg(d.geom ORDER BY d.path[cardinality(d.path)]) AS lonlat,
                   ST_GeometryType(f.geom) IN ('ST_Polygon', 'ST_MultiPolygon') AS closed
            FROM ST_DumpPoints(f.geom) d
            WHERE ST_GeometryType(f.geom) IN ('ST_Polygon', 'ST_MultiPolygon', 'ST_LineString', 'ST_MultiLineString')
            GROUP BY 1
          ) g
          CROSS JOIN LATERAL generate_series(CASE WHEN g.closed THEN 1 ELSE 2 END, cardinality(g.pts) - 1) AS i
        ) r
        WHERE NOT ST_Equals(r.pts[r.i], r.prev) AND NOT ST_Equals(r.pts[r.i], r.next)
      ) v
      WHERE v.angle < ${spike}
      UNION ALL
      -- tiny_area and sliver, per polygon part
      SELECT 2, CASE WHEN a.area < ${tiny} THEN 'tiny_area' ELSE 'sliver' END,
             CASE WHEN a.area < ${tiny} THEN format('a tiny polygon: %s m²', round(a.area::numeric, 3))
                  ELSE format('a sliver: %s m² but %s m around (thinness %s)', round(a.area::numeric, 1), round(a.perimeter::numeric, 1), round(a.thinness::numeric, 3)) END,
             json_build_object('part', a.part, 'areaM2', round(a.area::numeric, 3), 'perimeterM', round(a.perimeter::numeric, 3), 'thinness', round(a.thinness::numeric, 4))
      FROM (
        SELECT d.path[1] AS part, ST_Area(d.geom::geography) AS area, ST_Perimeter(d.geom::geography) AS perimeter,
               4 * pi() * ST_Area(d.geom::geography) / nullif(ST_Perimeter(d.geom::geography) ^ 2, 0) AS thinness
        FROM ST_Dump(f.geom) d WHERE ST_GeometryType(d.geom) = 'ST_Polygon'
      ) a
      WHERE a.area < ${tiny} OR a.thinness < ${sliver}
      UNION ALL
      -- outside_city
      SELECT 3, 'outside_city',
             format('outside the city extent, %s km away', round((ST_Distance(f.geom::geography, e.extent::geography) / 1000)::numeric, 1)),
             json_build_object('distanceKm', round((ST_Distance(f.geom::geography, e.extent::geography) / 1000)::numeric, 3),
                               'cityExtent', json_build_array(ST_XMin(e.extent), ST_YMin(e.extent), ST_XMax(e.extent), ST_YMax(e.extent)))
      FROM (SELECT ${extentSql} AS extent) e
      WHERE e.extent IS NOT NULL AND NOT ST_Intersects(f.geom, e.extent)
      UNION ALL
      -- duplicate_candidate: the bbox pre-filter in degrees (index) is wider than the metres asked for
      -- at any latitude below 87°, the geography distance then decides.
      SELECT 4, 'duplicate_candidate',
             format('maybe a duplicate of "%s" (%s), %s m away', o.name, o.id, round(o.distance::numeric, 1)),
             json_build_object('featureId', o.id, 'name', o.name, 'status', o.status, 'distanceM', round(o.distance::numeric, 2), 'nameSimilarity', round(o.similarity::numeric, 3))
      FROM (
        SELECT other.id, other.name, other.status, ST_Distance(other.geom::geography, f.geom::geography) AS distance,
               qc.name_similarity(other.name, f.name) AS similarity
        FROM features.features other
        WHERE other.id <> f.id AND other.kategorie = f.kategorie
          AND ST_DWithin(other.geom, f.geom, ${distance} / 111000.0 / greatest(cos(radians(least(abs(ST_Y(ST_Centroid(f.geom))), 87))), 0.05))
          AND ST_DWithin(other.geom::geography, f.geom::geography, ${distance})
      ) o
      WHERE o.similarity >= ${similarity}
      UNION ALL
      -- missing_address
      SELECT 5, 'missing_address', 'a denkmal without an address', json_build_object('field', 'adresse')
      WHERE f.kategorie = 'denkmal' AND coalesce(btrim(f.adresse), '') = ''
    ) c
  )`;
}

/**
 * One QC item for the review view: the feature now, its status and submission, the live claim, the
 * last approved version with an attribute diff against it, and the checks.
 */
export function reviewItem(featureId: string, thresholds: CheckThresholds, extent: Bbox | undefined): Query {
  const values: unknown[] = [featureId];
  const checks = checksJson(thresholds, extent, values);
  return {
    text: `
      WITH last_approved AS (
        -- The version approved last: the base of the diff and of the map overlay.
        SELECT t.* FROM qc.transitions t
        WHERE t.feature_id = $1::text AND t.action = 'approve' AND t.snapshot IS NOT NULL ORDER BY t.id DESC LIMIT 1
      )
      SELECT json_build_object(
        'featureId', f.id,
        'status', f.status,
        'version', f.version,
        'feature', ${FEATURE_JSON},
        'submission', (SELECT json_build_object('actor', t.actor, 'actorName', t.actor_name, 'comment', t.comment, 'at', t.created_at, 'version', t.version)
                       FROM qc.transitions t WHERE t.feature_id = f.id AND t.action = 'submit' ORDER BY t.id DESC LIMIT 1),
        'claim', (SELECT ${CLAIM_JSON} FROM qc.claims c WHERE c.feature_id = f.id AND c.expires_at > now()),
        'lastApproved', (SELECT json_build_object('version', a.version, 'at', a.created_at, 'actor', a.actor, 'actorName', a.actor_name, 'feature', ${SNAPSHOT_FEATURE('a.snapshot')})
                         FROM last_approved a),
        'diff', (SELECT coalesce(json_agg(json_build_object('field', d.field, 'before', d.before, 'after', d.after) ORDER BY d.ord), '[]'::json)
                 FROM last_approved a
                 CROSS JOIN LATERAL (VALUES
                   (1, 'name', a.snapshot->>'name', f.name),
                   (2, 'kategorie', a.snapshot->>'kategorie', f.kategorie),
                   (3, 'adresse', a.snapshot->>'adresse', f.adresse),
                   (4, 'telefon', a.snapshot->>'telefon', f.telefon)
                 ) AS d(ord, field, before, after)
                 WHERE d.before IS DISTINCT FROM d.after),
        'geometryChanged', (SELECT NOT ST_Equals(ST_SetSRID(ST_GeomFromGeoJSON(a.snapshot->>'geometry'), 4326), f.geom) FROM last_approved a),
        'checks', ${checks}
      )::text AS json
      FROM features.features f WHERE f.id = $1::text`,
    values,
  };
}

/**
 * A contributor's submissions, the latest first: each feature they submitted, with its status now
 * ('deleted' when gone), their last submission and the decision on it (with the rejection reason).
 */
export function mySubmissions(actor: string, limit: number): Query {
  return {
    text: `
      SELECT coalesce(json_agg(item ORDER BY item."submittedAt" DESC, item."featureId"), '[]'::json)::text AS json
      FROM (
        SELECT s.feature_id AS "featureId",
               coalesce(f.name, h.snapshot->>'name') AS name,
               coalesce(f.kategorie, h.snapshot->>'kategorie') AS kategorie,
               coalesce(f.status, 'deleted') AS status,
               f.version,
               s.version AS "submittedVersion",
               s.created_at AS "submittedAt",
               s.comment,
               d.decision,
               CASE WHEN f.status = 'rejected' THEN d.decision->>'comment' END AS "rejectionReason"
        FROM (
          SELECT DISTINCT ON (t.feature_id) t.* FROM qc.transitions t
          WHERE t.action = 'submit' AND t.actor = $1::text
          ORDER BY t.feature_id, t.id DESC
        ) s
        LEFT JOIN features.features f ON f.id = s.feature_id
        LEFT JOIN LATERAL (SELECT v.snapshot FROM history.feature_versions v WHERE v.feature_id = s.feature_id ORDER BY v.id DESC LIMIT 1) h ON f.id IS NULL
        LEFT JOIN LATERAL (
          SELECT json_build_object('action', t.action, 'actor', t.actor, 'actorName', t.actor_name, 'comment', t.comment, 'at', t.created_at) AS decision
          FROM qc.transitions t WHERE t.feature_id = s.feature_id AND t.id > s.id AND t.action IN ('approve', 'reject')
          ORDER BY t.id LIMIT 1
        ) d ON true
        ORDER BY s.created_at DESC
        LIMIT $2::int
      ) item`,
    values: [actor, limit],
  };
}
