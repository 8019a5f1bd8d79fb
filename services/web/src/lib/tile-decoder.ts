/**
 * Vector tiles fetched and decoded in a Web Worker (lib/tile-worker.ts), handed to OpenLayers as the
 * RenderFeatures its MVT reader would have made on the main thread. Used by lib/map.ts only.
 */
import type { Extent } from 'ol/extent.js';
import RenderFeature, { type Type as GeometryType } from 'ol/render/Feature.js';

/** Geometry types by their index in DecodedTile.types. */
export const GEOMETRY_TYPES: GeometryType[] = ['Point', 'LineString', 'LinearRing', 'Polygon', 'MultiPoint', 'MultiLineString'];

/**
 * One tile's features, column by column, in transferable arrays where possible: feature i's
 * coordinates end at coordinateEnds[i] and its ring ends at endEnds[i]; property `keys[k]` of
 * feature i is `values[k][valueIndex[k][i]]` (each distinct value crosses once: a kategorie or a
 * status is one string per tile, not one per feature), absent where that index is 0xffffffff.
 */
export interface DecodedTile {
  coordinates: Float64Array;
  coordinateEnds: Uint32Array;
  /** Each feature's ring or part ends, as offsets into its own coordinates. */
  ends: Uint32Array;
  endEnds: Uint32Array;
  types: Uint8Array;
  ids: unknown[];
  keys: string[];
  values: unknown[][];
  valueIndex: Uint32Array[];
}

/** valueIndex entry of a property the feature does not have. */
export const ABSENT = 0xffffffff;

export interface DecodeRequest {
  key: number;
  url: string;
  /** The tile's extent in EPSG:3857: the MVT's coordinates are scaled into it. */
  extent: Extent;
}

export type DecodeAnswer = { key: number; tile: DecodedTile } | { key: number; error: string };

/**
 * RenderFeatures from a decoded tile, with plain arrays as OpenLayers' own reader makes them (copied
 * element by element: Array.prototype.slice on a typed array takes the slow generic path).
 */
function unpack(tile: DecodedTile): RenderFeature[] {
  const features = new Array<RenderFeature>(tile.types.length);
  const { coordinates, coordinateEnds, ends: allEnds, endEnds, keys, values, valueIndex } = tile;
  let c = 0;
  let e = 0;
  for (let i = 0; i < features.length; i++) {
    const coordinateEnd = coordinateEnds[i]!;
    const flat = new Array<number>(coordinateEnd - c);
    for (let j = 0; c < coordinateEnd; j++, c++) flat[j] = coordinates[c]!;
    const endEnd = endEnds[i]!;
    const ends = new Array<number>(endEnd - e);
    for (let j = 0; e < endEnd; j++, e++) ends[j] = allEnds[e]!;
    const properties: Record<string, unknown> = {};
    for (let k = 0; k < keys.length; k++) {
      const index = valueIndex[k]![i]!;
      if (index !== ABSENT) properties[keys[k]!] = values[k]![index];
    }
    features[i] = new RenderFeature(GEOMETRY_TYPES[tile.types[i]!]!, flat, ends, 2, properties, tile.ids[i] as number | string | undefined);
  }
  return features;
}

/**
 * Cores a browser needs before decoding moves to a worker: one for the main thread, one for Chromium's
 * compositor and raster threads, one for the worker. Measured on two cores, the worker made the city
 * slower (about +15 %, interleaved runs): it had no core of its own, and its extra work (packing,
 * copying the columns across, unpacking) then only competed with the main thread.
 */
export const MIN_CORES_FOR_WORKER = 4;

/**
 * A decoder backed by one worker (the map reads tiles one after the other anyway; a second worker
 * would compete with the main thread for the same cores), or undefined where workers are missing or
 * the device has fewer than MIN_CORES_FOR_WORKER cores — then the tile source reads tiles itself.
 */
export function createTileDecoder(): ((url: string, extent: Extent) => Promise<RenderFeature[]>) | undefined {
  if (typeof Worker === 'undefined' || (navigator.hardwareConcurrency ?? 1) < MIN_CORES_FOR_WORKER) return undefined;
  let worker: Worker | undefined;
  let next = 0;
  const waiting = new Map<number, { resolve(features: RenderFeature[]): void; reject(error: Error): void }>();
  return (url, extent) => {
    worker ??= (() => {
      const started = new Worker(new URL('./tile-worker.ts', import.meta.url), { type: 'module' });
      started.onmessage = (event: MessageEvent<DecodeAnswer>) => {
        const answer = event.data;
        const pending = waiting.get(answer.key);
        if (!pending) return;
        waiting.delete(answer.key);
        if ('error' in answer) pending.reject(new Error(answer.error));
        else pending.resolve(unpack(answer.tile));
      };
      return started;
    })();
    const key = next++;
    return new Promise<RenderFeature[]>((resolve, reject) => {
      waiting.set(key, { resolve, reject });
      worker!.postMessage({ key, url, extent: [...extent] } satisfies DecodeRequest);
    });
  };
}
