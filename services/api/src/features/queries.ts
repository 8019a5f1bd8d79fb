import type { Bbox, Kategorie } from '../../../shared/features/schema.js';

/**
 * The SQL of the feature API. Every function returns `{ text, values }` for pg; values are always
 * parameters, never spliced into the text. Postgres builds the GeoJSON itself (ST_AsGeoJSON,
 * json_build_object) and hands it over as text, so Node only forwards the bytes.
 */
export interface Query {
  text: string;
  values: unknown[];
}

/** One row of features.features (alias f) as a GeoJSON Feature; empty optional properties are omitted. */
export const FEATURE_JSON = `json_build_object(
    'type', 'Feature',
    'id', f.id,
    'geometry', ST_AsGeoJSON(f.geom)::json,
    'properties', json_strip_nulls(json_build_object(
      'name', f.name, 'kategorie', f.kategorie, 'adresse', f.adresse, 'telefon', f.telefon,
      'status', f.status, 'version', f.version,
      'createdBy', f.created_by, 'createdAt', f.created_at, 'updatedBy', f.updated_by, 'updatedAt', f.updated_at)))`;

export interface ListFilter {
  bbox?: Bbox;
  kategorie?: Kategorie;
  /** Keyset paging: only features whose id sorts after this one. */
  after?: string;
  limit: number;
}

/**
 * A bbox as one or two envelopes: a box crossing the antimeridian (minLon > maxLon) is the part
 * east of minLon up to 180 plus the part west of maxLon from -180.
 */
export function envelopesOf(bbox: Bbox): Array<[number, number, number, number]> {
  const { minLon, minLat, maxLon, maxLat } = bbox;
  if (minLon <= maxLon) return [[minLon, minLat, maxLon, maxLat]];
  return [
    [minLon, minLat, 180, maxLat],
    [-180, minLat, maxLon, maxLat],
  ];
}

/** WHERE conditions shared by the API's list query and the benchmark's baseline. */
export function listConditions(filter: Omit<ListFilter, 'limit'>, values: unknown[]): string[] {
  const conditions: string[] = [];
  const param = (value: unknown, cast: string): string => {
    values.push(value);
    return `$${values.length}::${cast}`;
  };
  if (filter.bbox) {
    // ST_Envelope of the diagonal is the box as a polygon, or the line or point it degenerates to when
    // it has zero width or height. ST_MakeEnvelope would build a zero-area polygon instead, which
    // misses what crosses it and answers differently once PostGIS prepares it (so results depended
    // on the page size).
    const boxes = envelopesOf(filter.bbox).map(
      ([a, b, c, d]) =>
        `ST_Intersects(f.geom, ST_SetSRID(ST_Envelope(ST_MakeLine(ST_MakePoint(${param(a, 'float8')}, ${param(b, 'float8')}), ST_MakePoint(${param(c, 'float8')}, ${param(d, 'float8')}))), 4326))`,
    );
    conditions.push(boxes.length === 1 ? boxes[0]! : `(${boxes.join(' OR ')})`);
  }
  if (filter.kategorie) conditions.push(`f.kategorie = ${param(filter.kategorie, 'text')}`);
  if (filter.after !== undefined) conditions.push(`f.id > ${param(filter.after, 'text')}`);
  return conditions;
}

/**
 * One page of features in id order, fetched with one row more than asked so the caller knows whether
 * a next page exists without a second query. Returns the page's features as a JSON array text and
 * the last id on the page (the next cursor when hasMore).
 */
export function listFeatures(filter: ListFilter): Query {
  const values: unknown[] = [];
  const conditions = listConditions(filter, values);
  values.push(filter.limit);
  const limit = `$${values.length}::int`;
  // One pass over at most limit + 1 rows: the extra row only tells whether another page follows.
  return {
    text: `
      SELECT
        count(*) > ${limit} AS "hasMore",
        max(f.id) FILTER (WHERE f.n <= ${limit}) AS "lastId",
        (count(*) FILTER (WHERE f.n <= ${limit}))::int AS "count",
        coalesce(json_agg(${FEATURE_JSON} ORDER BY f.id) FILTER (WHERE f.n <= ${limit}), '[]'::json)::text AS "featuresJson"
      FROM (
        SELECT f.*, row_number() OVER (ORDER BY f.id) AS n
        FROM features.features f
        ${conditions.length ? `WHERE ${conditions.join(' AND ')}` : ''}
        ORDER BY f.id
        LIMIT ${limit} + 1
      ) f`,
    values,
  };
}

export function getFeature(id: string): Query {
  return {
    text: `SELECT f.version, ${FEATURE_JSON}::text AS "featureJson" FROM features.features f WHERE f.id = $1::text`,
    values: [id],
  };
}

/** Lock the row for a change in the current transaction; its owner and version decide whether the change may happen. */
export function lockFeature(id: string): Query {
  return {
    text: `SELECT f.version, f.created_by AS "createdBy", f.status FROM features.features f WHERE f.id = $1::text FOR UPDATE`,
    values: [id],
  };
}

/** Topology check by PostGIS (self-intersections, degenerate rings) before writing. */
export function checkGeometry(geometryJson: string): Query {
  return {
    text: `SELECT ST_IsValid(g) AS valid, ST_IsValidReason(g) AS reason FROM ST_GeomFromGeoJSON($1::text) AS g`,
    values: [geometryJson],
  };
}

export interface FeatureValues {
  name: string;
  kategorie: Kategorie;
  adresse: string | null;
  telefon: string | null;
  geometryJson: string;
}

export function insertFeature(id: string | undefined, v: FeatureValues, createdBy: string | null): Query {
  return {
    text: `
      INSERT INTO features.features AS f (id, name, kategorie, adresse, telefon, geom, created_by)
      VALUES (coalesce($1::text, gen_random_uuid()::text), $2::text, $3::text, $4::text, $5::text,
              ST_SetSRID(ST_GeomFromGeoJSON($6::text), 4326), $7::text)
      RETURNING f.id, f.version, ${FEATURE_JSON}::text AS "featureJson"`,
    values: [id ?? null, v.name, v.kategorie, v.adresse, v.telefon, v.geometryJson, createdBy],
  };
}

/** Full replacement of the editable columns; version, updated_at and updated_by are set by the trigger. */
export function replaceFeature(id: string, v: FeatureValues): Query {
  return {
    text: `
      UPDATE features.features AS f
      SET name = $2::text, kategorie = $3::text, adresse = $4::text, telefon = $5::text,
          geom = ST_SetSRID(ST_GeomFromGeoJSON($6::text), 4326)
      WHERE f.id = $1::text
      RETURNING f.version, ${FEATURE_JSON}::text AS "featureJson"`,
    values: [id, v.name, v.kategorie, v.adresse, v.telefon, v.geometryJson],
  };
}

export function deleteFeature(id: string): Query {
  return { text: `DELETE FROM features.features WHERE id = $1::text`, values: [id] };
}

/**
 * The recorded versions of a feature, newest first, each snapshot shaped as the Feature the API
 * served at the time (the snapshot keeps every column; this picks the public ones).
 */
export function featureHistory(id: string): Query {
  return {
    text: `
      SELECT coalesce(json_agg(json_build_object(
          'version', h.version,
          'operation', h.operation,
          'actor', h.actor,
          'recordedAt', h.recorded_at,
          'feature', json_build_object(
            'type', 'Feature',
            'id', h.snapshot->>'id',
            'geometry', h.snapshot->'geometry',
            'properties', jsonb_strip_nulls(jsonb_build_object(
              'name', h.snapshot->'name', 'kategorie', h.snapshot->'kategorie',
              'adresse', h.snapshot->'adresse', 'telefon', h.snapshot->'telefon',
              'status', h.snapshot->'status', 'version', h.snapshot->'version',
              'createdBy', h.snapshot->'created_by', 'createdAt', h.snapshot->'created_at',
              'updatedBy', h.snapshot->'updated_by', 'updatedAt', h.snapshot->'updated_at')))
        ) ORDER BY h.id DESC), '[]'::json)::text AS "versionsJson",
        count(*)::int AS "count"
      FROM history.feature_versions h
      WHERE h.feature_id = $1::text`,
    values: [id],
  };
}
