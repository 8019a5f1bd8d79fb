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
 * Features whose bounding box meets the tile (with its buffer) are clipped to that box in EPSG:4326
 * before projecting: this keeps parts beyond Web Mercator's ±85.05° out of ST_Transform and makes the
 * projection cheap for large polygons. Properties for styling: id, kategorie, status, name.
 */
export function tileQuery(z: number, x: number, y: number): Query {
  return {
    text: `
      WITH bounds AS (
        SELECT ST_TileEnvelope($1::int, $2::int, $3::int) AS tile,
               ST_Transform(ST_TileEnvelope($1::int, $2::int, $3::int, margin => $4::float8), 4326) AS filter
      ), mvt AS (
        SELECT ST_AsMVTGeom(ST_Transform(ST_ClipByBox2D(f.geom, b.filter::box2d), 3857), b.tile, ${TILE_EXTENT}, ${TILE_BUFFER}, true) AS geom,
               f.id, f.kategorie, f.status, f.name
        FROM features.features f, bounds b
        WHERE f.geom && b.filter AND ${visibleFeatures()}
      )
      -- In id order: the same data gives the same bytes, which the ETag (a digest of them) relies on.
      SELECT ST_AsMVT(mvt, '${TILE_LAYER}', ${TILE_EXTENT}, 'geom' ORDER BY mvt.id) AS tile FROM mvt WHERE mvt.geom IS NOT NULL`,
    values: [z, x, y, TILE_BUFFER / TILE_EXTENT],
  };
}
