import Point from '@mapbox/point-geometry';
import { fromVectorTileJs, type VectorTileFeatureLike } from '@maplibre/vt-pbf';
import { TILE_EXTENT, TILE_LAYER } from './queries.js';

/**
 * Mapbox Vector Tiles encoded in the API (with @maplibre/vt-pbf, MapLibre's maintained encoder) from
 * rows whose geometry is already clipped, scaled and snapped to tile coordinates by the database
 * (tiles/queries.ts tileRowsQuery): for a PostGIS without protobuf-c, where ST_AsMVT is missing (the
 * embedded PGlite). The tile has what ST_AsMVT writes: one layer `features`, version 2, extent 4096,
 * the rows in the order given, their non-null properties, and `number` as the MVT feature id below
 * the detail zooms instead of a property. No rows: an empty buffer, as ST_AsMVT gives.
 */
export interface TileRow {
  /** GeoJSON geometry in tile coordinates (integers, y down). */
  geometry: { type: string; coordinates?: unknown; geometries?: TileRow['geometry'][] };
  /** The MVT feature id (overview zooms); every other field is a property. */
  number?: number | string;
  [property: string]: unknown;
}

type Ring = Point[];
/** MVT geometry types: 1 point, 2 line, 3 polygon. */
type MvtType = 1 | 2 | 3;

export function encodeTile(rows: readonly TileRow[]): Buffer {
  if (rows.length === 0) return Buffer.alloc(0);
  const features: VectorTileFeatureLike[] = [];
  for (const row of rows) {
    const shape = toMvtGeometry(row.geometry);
    if (!shape) continue;
    const { geometry: _geometry, number, ...rest } = row;
    const properties: Record<string, string | number | boolean> = {};
    for (const [key, value] of Object.entries(rest)) {
      if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') properties[key] = value;
    }
    features.push({ type: shape.type, properties, id: number === undefined ? undefined : Number(number), extent: TILE_EXTENT, loadGeometry: () => shape.rings });
  }
  if (features.length === 0) return Buffer.alloc(0);
  const bytes = fromVectorTileJs({ layers: { [TILE_LAYER]: { version: 2, name: TILE_LAYER, extent: TILE_EXTENT, length: features.length, feature: (i: number) => features[i]! } } });
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

const toPoint = (position: unknown): Point => {
  const [x, y] = position as [number, number];
  return new Point(x, y);
};
const toRing = (positions: unknown): Ring => (positions as unknown[]).map(toPoint);

/**
 * A GeoJSON geometry in tile coordinates as MVT commands' input: points as one MoveTo each, lines and
 * rings as point lists. A collection (a clip can make one of an invalid polygon) keeps its parts of
 * the highest dimension, as an MVT feature has one type.
 */
function toMvtGeometry(geometry: TileRow['geometry']): { type: MvtType; rings: Ring[] } | undefined {
  const c = geometry.coordinates as unknown[];
  switch (geometry.type) {
    case 'Point':
      return { type: 1, rings: [[toPoint(c)]] };
    case 'MultiPoint':
      return { type: 1, rings: c.map((p) => [toPoint(p)]) };
    case 'LineString':
      return { type: 2, rings: [toRing(c)] };
    case 'MultiLineString':
      return { type: 2, rings: c.map(toRing) };
    case 'Polygon':
      return { type: 3, rings: c.map(toRing) };
    case 'MultiPolygon':
      return { type: 3, rings: (c as unknown[][]).flatMap((polygon) => polygon.map(toRing)) };
    case 'GeometryCollection': {
      const parts = (geometry.geometries ?? []).map(toMvtGeometry).filter((p) => p !== undefined);
      const type = Math.max(0, ...parts.map((p) => p.type)) as MvtType | 0;
      if (type === 0) return undefined;
      return { type, rings: parts.filter((p) => p.type === type).flatMap((p) => p.rings) };
    }
    default:
      return undefined;
  }
}
