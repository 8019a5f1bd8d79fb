import type { Bbox } from '../../../shared/features/schema.js';
import { listConditions, type Query } from '../features/queries.js';

/**
 * The SQL of the vector tiles: one Mapbox Vector Tile (layer `features`) per z/x/y in Web Mercator,
 * built by PostGIS (ST_AsMVTGeom clips and quantises, ST_AsMVT encodes). Parameters only.
 */
export const TILE_LAYER = 'features';
/** Tile coordinate units per side (the MVT default) and the buffer around a tile, in those units. */
export const TILE_EXTENT = 4096;
export const TILE_BUFFER = 64;

/**
 * What a caller may see of features.features (alias f) — the same rule as GET /api/features, which
 * today lists every feature to everyone with `read`. Kept as one function so the list and the tiles
 * cannot drift apart silently when the rule changes (see docs/api.md "Vector tiles").
 */
export function visibleFeatures(): string {
  return 'TRUE';
}

/**
 * The tile and the MD5 digest of its bytes, in one statement: the same scan and the same SQL as the
 * raw ST_AsMVT query (rawTileQuery), plus a digest that costs a fraction of a millisecond per 100 KiB.
 * The digest is the ETag, so equal ETags mean byte-equal tiles whoever wrote the rows (API, SQL,
 * GeoServer WFS-T): nothing has to be told about edits. No rows → an empty tile (empty bytes).
 */
export function tileQuery(z: number, x: number, y: number): Query {
  return {
    text: `
      WITH bounds AS (
        SELECT ST_TileEnvelope($1::int, $2::int, $3::int) AS tile,
               ST_Transform(ST_TileEnvelope($1::int, $2::int, $3::int, margin => $4::float8), 4326) AS filter
      )
      SELECT coalesce(t.tile, ''::bytea) AS tile, md5(coalesce(t.tile, ''::bytea)) AS digest
      FROM (${mvtSelect()}) t`,
    values: [z, x, y, TILE_BUFFER / TILE_EXTENT],
  };
}

/**
 * The tile alone; expects a CTE `bounds`. No "WHERE geom IS NOT NULL": ST_AsMVT skips the rows whose
 * geometry ST_AsMVTGeom dropped, and such a filter would be pushed into the scan and compute every
 * geometry twice.
 */
function mvtSelect(): string {
  return `
        SELECT ST_AsMVT(mvt, '${TILE_LAYER}', ${TILE_EXTENT}, 'geom' ORDER BY mvt.id) AS tile
        FROM (
          SELECT ST_AsMVTGeom(ST_Transform(ST_ClipByBox2D(f.geom, b.filter::box2d), 3857), b.tile, ${TILE_EXTENT}, ${TILE_BUFFER}, true) AS geom,
                 f.id, f.kategorie, f.status, f.name
          FROM features.features f, bounds b
          WHERE f.geom && b.filter AND ${visibleFeatures()}
        ) mvt`;
}

/** The same tile straight from ST_AsMVT, without the fingerprint: the benchmark's baseline. */
export function rawTileQuery(z: number, x: number, y: number): Query {
  return {
    text: `
      WITH bounds AS (
        SELECT ST_TileEnvelope($1::int, $2::int, $3::int) AS tile,
               ST_Transform(ST_TileEnvelope($1::int, $2::int, $3::int, margin => $4::float8), 4326) AS filter
      )
      ${mvtSelect()}`,
    values: [z, x, y, TILE_BUFFER / TILE_EXTENT],
  };
}

/**
 * How many features the list (GET /api/features?bbox=…) holds for a bbox, counted up to `atMost + 1`
 * only: the map asks "more than one list page?" to choose between vector tiles and GeoJSON, and the
 * answer must stay cheap (an index scan of at most that many rows) for any view. Same conditions as
 * the list (listConditions), so the answer cannot drift from what the list would return.
 */
export function countQuery(bbox: Bbox, atMost: number): Query {
  const values: unknown[] = [];
  const conditions = [...listConditions({ bbox }, values), visibleFeatures()];
  values.push(atMost + 1);
  return {
    text: `SELECT count(*)::int AS count FROM (SELECT 1 FROM features.features f WHERE ${conditions.join(' AND ')} LIMIT $${values.length}::int) f`,
    values,
  };
}
