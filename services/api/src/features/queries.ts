import type { Bbox, Kategorie } from '../../../shared/features/schema.js';
import type { Query } from '../db/pool.js';
import { DECISION_JSON } from '../qc/queries.js';

/**
 * The SQL of the feature API. Every function returns `{ text, values }` for pg; values are always
 * parameters, never spliced into the text. Postgres builds the GeoJSON itself (ST_AsGeoJSON,
 * json_build_object) and hands it over as text, so Node only forwards the bytes.
 */

/**
 * One row of features.features (alias f) as a GeoJSON Feature (json). Each row keeps this text ready
 * in f.geojson (migration 006: written by a trigger on every insert and update, for every writer), so
 * the API's own reads use the column; this expression builds the same text on the fly.
 */
export const FEATURE_JSON = `features.as_geojson(f)::json`;

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
 * One page of features in id order, one row more than asked so the caller knows whether a next page
 * exists without a second query. Rows are [id, stored GeoJSON text] (rowMode array).
 *
 * Why rows rather than one string_agg: measured on 10 000 of 100 000 features (bench/api.bench.ts),
 * Postgres sorting the rows for the aggregate a second time, and spilling that sort to disk, cost more
 * than pg handing over the rows; Node joins the stored texts without parsing them (joinFeatures).
 */
export function listFeatures(filter: ListFilter): Query {
  const values: unknown[] = [];
  const conditions = listConditions(filter, values);
  values.push(filter.limit);
  return {
    text: `
      SELECT f.id, f.geojson
      FROM features.features f
      ${conditions.length ? `WHERE ${conditions.join(' AND ')}` : ''}
      ORDER BY f.id
      LIMIT $${values.length}::int + 1`,
    values,
    rowMode: 'array',
  };
}

/** [id, Feature JSON text] rows as one JSON array text: concatenation only, nothing parsed. */
export function joinFeatures(rows: ReadonlyArray<readonly [string, string]>): string {
  let json = '[';
  for (let i = 0; i < rows.length; i++) json += (i === 0 ? '' : ',') + rows[i]![1];
  return json + ']';
}

export function getFeature(id: string): Query {
  return {
    text: `SELECT f.version, f.geojson AS "featureJson" FROM features.features f WHERE f.id = $1::text`,
    values: [id],
  };
}

/**
 * Lock the row for a change in the current transaction; its owner and version decide whether the
 * change may happen. Given the replacement's values, it also tells whether they equal the stored data
 * as the API serves it (same properties, same geometry as GeoJSON text), so a PUT of a fetched feature
 * changes nothing; then featureJson is the current feature.
 */
export function lockFeature(id: string, replacement?: FeatureValues): Query {
  if (!replacement) {
    return {
      text: `SELECT f.version, f.created_by AS "createdBy", f.status FROM features.features f WHERE f.id = $1::text FOR UPDATE`,
      values: [id],
    };
  }
  return {
    text: `
      SELECT f.version, f.created_by AS "createdBy", f.status, f.geojson AS "featureJson",
             (f.name = $2::text AND f.kategorie = $3::text AND f.adresse IS NOT DISTINCT FROM $4::text
              AND f.telefon IS NOT DISTINCT FROM $5::text
              AND features.geometry_geojson(f.geom) = features.geometry_geojson(ST_SetSRID(ST_GeomFromGeoJSON($6::text), 4326))) AS unchanged
      FROM features.features f WHERE f.id = $1::text FOR UPDATE`,
    values: [id, replacement.name, replacement.kategorie, replacement.adresse, replacement.telefon, replacement.geometryJson],
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

/**
 * One statement (features.api_insert, migration 007): the actor setting, the topology check and the
 * insert run in the statement's own transaction, one round trip. An invalid geometry raises GF001.
 */
export function insertFeature(id: string | undefined, v: FeatureValues, createdBy: string | null): Query {
  return {
    text: `SELECT new_id AS id, new_version AS version, new_geojson AS "featureJson"
           FROM features.api_insert($1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text)`,
    values: [createdBy, id ?? null, v.name, v.kategorie, v.adresse, v.telefon, v.geometryJson],
  };
}

/**
 * Full replacement of the editable columns; version, updated_at and updated_by are set by the trigger.
 * A geometry equal to the stored one as served is kept as stored, so replacing only properties never
 * rounds a geometry another writer (WFS-T, SQL) stored with more decimals than are served.
 */
export function replaceFeature(id: string, v: FeatureValues): Query {
  return {
    text: `
      UPDATE features.features AS f
      SET name = $2::text, kategorie = $3::text, adresse = $4::text, telefon = $5::text,
          geom = CASE WHEN features.geometry_geojson(f.geom) = features.geometry_geojson(ST_SetSRID(ST_GeomFromGeoJSON($6::text), 4326)) THEN f.geom
                      ELSE features.rfc7946_winding(ST_SetSRID(ST_GeomFromGeoJSON($6::text), 4326)) END
      WHERE f.id = $1::text
      RETURNING f.version, f.geojson AS "featureJson"`,
    values: [id, v.name, v.kategorie, v.adresse, v.telefon, v.geometryJson],
  };
}

/** The note of this transaction's history row (transaction-local, like app.actor). */
export function setEditNote(note: string): Query {
  return { text: `SELECT set_config('app.edit_note', $1::text, true)`, values: [note] };
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
          'note', h.note,
          'feature', json_build_object(
            'type', 'Feature',
            'id', h.snapshot->>'id',
            'geometry', features.geometry_geojson(ST_GeomFromGeoJSON(h.snapshot->>'geometry'))::json,
            'properties', jsonb_strip_nulls(jsonb_build_object(
              'name', h.snapshot->'name', 'kategorie', h.snapshot->'kategorie',
              'adresse', h.snapshot->'adresse', 'telefon', h.snapshot->'telefon',
              'status', h.snapshot->'status', 'version', h.snapshot->'version',
              'createdBy', h.snapshot->'created_by', 'createdAt', h.snapshot->'created_at',
              'updatedBy', h.snapshot->'updated_by', 'updatedAt', h.snapshot->'updated_at')))
        ) ORDER BY h.id DESC), '[]'::json)::text AS "versionsJson",
        count(*)::int AS "count",
        -- Every conflation decision of the exports, automatic or a reviewer's, newest first like the versions.
        (SELECT coalesce(json_agg(${DECISION_JSON} ORDER BY d.id DESC), '[]'::json)::text
           FROM qc.conflation_decisions d WHERE d.feature_id = $1::text) AS "decisionsJson"
      FROM history.feature_versions h
      WHERE h.feature_id = $1::text`,
    values: [id],
  };
}
