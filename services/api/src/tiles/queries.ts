import type { Query } from '../features/queries.js';

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
 * The tile, and a fingerprint of the rows it is built from.
 *
 * - Features whose bounding box meets the tile (with its buffer) are clipped to that box in
 *   EPSG:4326 before projecting: this keeps parts beyond Web Mercator's ±85.05° out of ST_Transform
 *   and makes the projection cheap for large polygons. Properties for styling: id, kategorie,
 *   status, name. Rows go in id order, so the same rows give the same bytes.
 * - The fingerprint is a digest of (id, version, status, updated_at) of the rows meeting the tile. The triggers of
 *   migrations 001/004 bump version and updated_at on every change of a feature's data, whoever
 *   writes, and status is in it too, so equal fingerprints mean an equal tile. It costs an index scan
 *   and no geometry work: when it equals `knownFingerprint` (the client's ETag), the tile itself is
 *   not built at all (tile is NULL) and the answer is a 304.
 */
export function tileQuery(z: number, x: number, y: number, knownFingerprint: string | null = null): Query {
  return {
    text: `
      WITH bounds AS (
        SELECT ST_TileEnvelope($1::int, $2::int, $3::int) AS tile,
               ST_Transform(ST_TileEnvelope($1::int, $2::int, $3::int, margin => $4::float8), 4326) AS filter
      ), fingerprint AS (
        -- Order-independent, so no sort: the XOR and the sum of a 64-bit hash per row, and the count.
        SELECT md5(count(*) || ':' || coalesce(bit_xor(r.h), 0) || ':' || coalesce(sum(r.h), 0)) AS value
        FROM (SELECT hashtextextended(f.id || ':' || f.version || ':' || f.status || ':' || extract(epoch FROM f.updated_at), 0) AS h
              FROM features.features f, bounds b
              WHERE f.geom && b.filter AND ${visibleFeatures()}) r
      )
      SELECT fp.value AS fingerprint,
        CASE WHEN fp.value = $5::text THEN NULL ELSE (${mvtSelect()}) END AS tile
      FROM fingerprint fp`,
    values: [z, x, y, TILE_BUFFER / TILE_EXTENT, knownFingerprint],
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
