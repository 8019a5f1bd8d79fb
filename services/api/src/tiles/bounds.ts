import { TILE_BUFFER, TILE_EXTENT } from './queries.js';

/** A box in Web Mercator metres (EPSG:3857, as features.tile_features): [minX, minY, maxX, maxY]. */
export type Box = readonly [number, number, number, number];

/** Half the width of the Web Mercator world, metres (ST_TileEnvelope's default bounds). */
const WORLD = 20_037_508.342789244;
/**
 * Added around a tile's box before comparing: PostgreSQL's && compares boxes rounded outwards to
 * float4 (at most 2 m apart from the true value at Web Mercator's largest coordinates), on both sides.
 */
const SLACK_METRES = 8;

/**
 * The box a tile's features must meet, as ST_TileEnvelope(z, x, y, margin => buffer / extent) in
 * tiles/queries.ts, widened by a few metres: a change whose box meets it may change the tile.
 */
export function tileBounds({ z, x, y }: { z: number; x: number; y: number }): Box {
  const size = (2 * WORLD) / 2 ** z;
  const margin = (size * TILE_BUFFER) / TILE_EXTENT + SLACK_METRES;
  return [-WORLD + x * size - margin, WORLD - (y + 1) * size - margin, -WORLD + (x + 1) * size + margin, WORLD - y * size + margin];
}

/** Whether two boxes share a point (edges included, as PostGIS' &&). */
export function meets(a: Box, b: Box): boolean {
  return a[0] <= b[2] && b[0] <= a[2] && a[1] <= b[3] && b[1] <= a[3];
}
