/**
 * Whether two Mapbox Vector Tiles hold the same features: the same ids, properties and geometries,
 * in any order. The API and the raw query build a tile with the same SQL, but ST_AsMVT writes the
 * rows in the order the scan returns them (tiles/queries.ts), and two statements, or one statement
 * before and after a write, may scan in different orders: equal bytes would be too strict a check.
 */
import { VectorTile } from '@mapbox/vector-tile';
import { PbfReader } from 'pbf';
import { TILE_LAYER } from '../services/api/src/tiles/queries.js';

function features(bytes: Buffer): string[] {
  if (bytes.length === 0) return [];
  const layer = new VectorTile(new PbfReader(bytes)).layers[TILE_LAYER];
  const out: string[] = [];
  for (let i = 0; i < (layer?.length ?? 0); i++) {
    const feature = layer!.feature(i);
    out.push(JSON.stringify([feature.type, feature.properties, feature.loadGeometry()]));
  }
  return out.sort();
}

/** Throws, naming `what`, unless both tiles hold the same features. */
export function assertSameTileContent(what: string, a: Buffer, b: Buffer): void {
  const [left, right] = [features(a), features(b)];
  if (left.length !== right.length || left.some((feature, i) => feature !== right[i])) {
    throw new Error(`${what}: the tiles differ (${left.length} vs ${right.length} features, ${a.length} vs ${b.length} bytes)`);
  }
}
