import type { Query } from '../db/pool.js';

/**
 * The SQL of bulk imports (imports/service.ts). Rows travel as one JSON array per statement, so a chunk
 * of hundreds of features is one round trip and one plan, whatever its size.
 */

/**
 * PostGIS' verdict on each geometry of a chunk (the API's create refuses the same ones, features.api_insert):
 * `[{ "i": 0, "g": "<GeoJSON>" }, …]` → the indexes of the invalid ones with the reason.
 */
export function invalidGeometries(geometries: Array<{ i: number; g: string }>): Query {
  return {
    text: `
      SELECT r.i, ST_IsValidReason(r.geom) AS reason
      FROM (SELECT x.i, ST_SetSRID(ST_GeomFromGeoJSON(x.g), 4326) AS geom FROM json_to_recordset($1::json) AS x(i int, g text)) r
      WHERE NOT ST_IsValid(r.geom)`,
    values: [JSON.stringify(geometries)],
  };
}

export interface ImportRow {
  name: string;
  kategorie: string;
  adresse: string | null;
  telefon: string | null;
  /** GeoJSON geometry, coordinates rounded as the API stores them. */
  geometry: string;
}

/**
 * Inserts a chunk of validated rows in the caller's transaction, as features.api_insert does for one:
 * a generated id, the geometry wound as RFC 7946 says, created_by the importing user (the row triggers
 * write the history, with the transaction's app.actor and app.edit_note, and the tile table).
 */
export function insertRows(rows: ImportRow[], createdBy: string | null): Query {
  return {
    text: `
      INSERT INTO features.features (name, kategorie, adresse, telefon, geom, created_by)
      SELECT r.name, r.kategorie, r.adresse, r.telefon, features.rfc7946_winding(ST_SetSRID(ST_GeomFromGeoJSON(r.geometry), 4326)), $2::text
      FROM json_to_recordset($1::json) AS r(name text, kategorie text, adresse text, telefon text, geometry text)
      RETURNING id`,
    values: [JSON.stringify(rows), createdBy],
  };
}

/** The plain multi-row INSERT of the same rows, no JSON, no history note: the benchmark's baseline. */
export function plainInsert(rows: ImportRow[], createdBy: string | null): Query {
  const values: unknown[] = [createdBy];
  const tuples = rows.map((r) => {
    values.push(r.name, r.kategorie, r.adresse, r.telefon, r.geometry);
    const n = values.length;
    return `($${n - 4}::text, $${n - 3}::text, $${n - 2}::text, $${n - 1}::text, features.rfc7946_winding(ST_SetSRID(ST_GeomFromGeoJSON($${n}::text), 4326)), $1::text)`;
  });
  return { text: `INSERT INTO features.features (name, kategorie, adresse, telefon, geom, created_by) VALUES ${tuples.join(', ')}`, values };
}
