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

/**
 * The bbox as SQL geometries in storage coordinates, its values added to `values`: one envelope, or two
 * for a box across the antimeridian (envelopesOf). ST_Envelope of the diagonal is the box as a polygon,
 * or the line or point it degenerates to when it has zero width or height. ST_MakeEnvelope would build
 * a zero-area polygon instead, which misses what crosses it and answers differently once PostGIS
 * prepares it (so results depended on the page size).
 */
export function bboxGeometries(bbox: Bbox, values: unknown[]): string[] {
  const param = (value: number) => {
    values.push(value);
    return `$${values.length}::float8`;
  };
  return envelopesOf(bbox).map(([a, b, c, d]) => `ST_SetSRID(ST_Envelope(ST_MakeLine(ST_MakePoint(${param(a)}, ${param(b)}), ST_MakePoint(${param(c)}, ${param(d)}))), 4326)`);
}

/** ST_Intersects of a geometry column with any of `areas` (the parts of one box). */
export function intersectsAny(column: string, areas: readonly string[]): string {
  const tests = areas.map((area) => `ST_Intersects(${column}, ${area})`);
  return tests.length === 1 ? tests[0]! : `(${tests.join(' OR ')})`;
}

/** WHERE conditions on features.features (alias f) shared by the list, the tiles and the benchmarks' baselines. */
export function listConditions(filter: Omit<ListFilter, 'limit'>, values: unknown[]): string[] {
  const conditions: string[] = [];
  if (filter.bbox) conditions.push(intersectsAny('f.geom', bboxGeometries(filter.bbox, values)));
  conditions.push(...keyConditions('f', filter, values));
  return conditions;
}

/** The kategorie and keyset conditions, on features.features or features.list_keys (both have id and kategorie). */
export function keyConditions(alias: 'f' | 'k', filter: { kategorie?: string; after?: string; before?: string }, values: unknown[]): string[] {
  const param = (value: unknown) => {
    values.push(value);
    return `$${values.length}::text`;
  };
  const conditions: string[] = [];
  if (filter.kategorie !== undefined) conditions.push(`${alias}.kategorie = ${param(filter.kategorie)}`);
  if (filter.after !== undefined) conditions.push(`${alias}.id > ${param(filter.after)}`);
  if (filter.before !== undefined) conditions.push(`${alias}.id < ${param(filter.before)}`);
  return conditions;
}

/**
 * One page of features in id order, one row more than asked so the caller knows whether a next page
 * exists without a second query. Rows are [id, stored GeoJSON text] (rowMode array); a page chosen by
 * bbox may end with a row [id, null] (see boxPage). Read them with readPage.
 *
 * Without a bbox the primary key (or features_kategorie_id_idx) gives the ids in order and the page is
 * its first rows. With a bbox, see boxPage. Why rows rather than one string_agg: measured on 10 000
 * of 100 000 features (bench/api.bench.ts), Postgres sorting the rows for the aggregate a second time,
 * and spilling that sort to disk, cost more than pg handing over the rows; the route writes the
 * stored texts out without parsing them (routes.ts sendEnvelope).
 */
export function listFeatures(filter: ListFilter): Query {
  const values: unknown[] = [];
  if (filter.bbox) {
    const areas = [bboxGeometries(filter.bbox, values)];
    return boxPage({ areas, keys: keyConditions('k', filter, values), rows: filter.limit + 1, json: 'f.geojson', descending: false, values });
  }
  const conditions = keyConditions('f', filter, values);
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

export interface BoxPage {
  /** Geometries (SQL, storage coordinates) a listed feature intersects: each entry the parts of one box. */
  areas: ReadonlyArray<readonly string[]>;
  /** Conditions on features.list_keys (alias k): kategorie, the keyset. */
  keys: readonly string[];
  /** How many rows the page needs (a page's size and one more). */
  rows: number;
  /** The Feature text of a row of features.features (alias f). */
  json: string;
  /** In descending id order (a page before a cursor). */
  descending: boolean;
  /** The values the SQL fragments refer to; the page adds its own. */
  values: unknown[];
}

/**
 * A page chosen by bbox, in two steps so that what it reads follows the page, not the box
 * (migration 024 and docs/api.md "The list at a million features" have the measurements):
 * 1. Candidates: the next ids in order whose bounding box meets the bbox, from features.list_keys
 *    alone, a few more than the page needs. The planner picks between the primary key in id order
 *    (an index-only scan that stops after enough candidates: best when the box holds much of the data)
 *    and the GiST index on the boxes, then a sort (best when it holds little); it estimates both well
 *    because the step is one table and one limit.
 * 2. The page: the candidates' own rows of features.features, those whose geometry intersects the bbox,
 *    with their stored text. Only these rows are read.
 * Without the split, one query joining both tables under one limit, the planner multiplies the two
 * selectivities of the same box, expected an eighth of the rows it got and chose hash joins that read
 * every feature (measured at 100k).
 *
 * A candidate whose box meets the bbox but whose geometry does not (a line passing a corner) is
 * dropped in step 2. When more were dropped than the spare candidates and the candidates ran out
 * before the page was full, the last row is [the last candidate's id, null]: the page goes on after it
 * (readPage asks again from there).
 */
export function boxPage(page: BoxPage): Query {
  const { values } = page;
  const param = (value: number) => {
    values.push(value);
    return `$${values.length}::int`;
  };
  const direction = page.descending ? 'DESC' : 'ASC';
  const near = page.areas.map((parts) => (parts.length === 1 ? `k.box && ${parts[0]}` : `(${parts.map((p) => `k.box && ${p}`).join(' OR ')})`));
  const exact = page.areas.map((parts) => intersectsAny('f.geom', parts));
  const candidates = param(candidatesFor(page.rows));
  const rows = param(page.rows);
  return {
    text: `
      WITH candidates AS MATERIALIZED (
        SELECT k.id FROM features.list_keys k
        WHERE ${[...near, ...page.keys].join(' AND ')}
        ORDER BY k.id ${direction}
        LIMIT ${candidates}
      ), page AS MATERIALIZED (
        SELECT c.id, ${page.json} AS json
        FROM candidates c JOIN features.features f ON f.id = c.id
        WHERE ${exact.join(' AND ')}
        ORDER BY c.id ${direction}
        LIMIT ${rows}
      )
      SELECT id, json FROM (
        SELECT id, json FROM page
        UNION ALL
        SELECT ${page.descending ? 'min' : 'max'}(id), NULL FROM candidates
        HAVING count(*) = ${candidates} AND (SELECT count(*) FROM page) < ${rows}
      ) AS answer
      ORDER BY json IS NULL, id ${direction}`,
    values,
    rowMode: 'array',
  };
}

/**
 * Candidates read for a page of `rows`: an eighth more, and 8 at least, spare for those whose box
 * meets the bbox while their geometry does not. Fewer than that are dropped on all but contrived data;
 * more cost another round (readPage), never a wrong page.
 */
function candidatesFor(rows: number): number {
  return rows + Math.max(8, Math.ceil(rows / 8));
}

/**
 * The rows of a page (listFeatures, boxPage): `read(from, rows)` runs the page's query from a cursor
 * (after, or before for a descending page) for that many rows. Usually one round; a page whose
 * candidates ran out early (its last row [id, null]) goes on from that id for the rows it still needs.
 */
export async function readPage(read: (from: string | undefined, rows: number) => Promise<unknown[]>, from: string | undefined, rows: number): Promise<Array<[id: string, json: string]>> {
  const page: Array<[string, string]> = [];
  for (;;) {
    const got = (await read(from, rows - page.length)) as Array<[string, string | null]>;
    const last = got[got.length - 1];
    if (last === undefined || last[1] !== null) return page.concat(got as Array<[string, string]>);
    for (let i = 0; i < got.length - 1; i++) page.push(got[i] as [string, string]);
    from = last[0];
  }
}

/**
 * [id, Feature JSON text] rows as one JSON array text: concatenation only, nothing parsed. For the
 * HTML page of /ogcapi, which reads the features; the GeoJSON answers write the texts out as bytes
 * (routes.ts sendEnvelope).
 */
export function joinFeatures(texts: readonly string[]): string {
  return `[${texts.join(',')}]`;
}

export function getFeature(id: string): Query {
  return {
    // The API's most frequent statement, and a POST's one: planned once per connection (db/pool.ts Query.name).
    name: 'features_get',
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
    name: 'features_api_insert',
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
