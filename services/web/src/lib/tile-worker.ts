/**
 * Fetches and decodes vector tiles off the main thread (started by lib/tile-decoder.ts).
 *
 * Why: drawing a dense view from tiles keeps the main thread busy, and about a quarter of that is
 * reading the MVT bytes (protobuf varints, the strings of ids and names, geometry commands); measured
 * on the whole city (100 000 features), which the overview (lib/overview-tiles.ts) now draws. Here OpenLayers' own MVT reader does that work, with the same
 * options the tile source would use, so the features are exactly those the main thread would have
 * read; only the finished numbers cross over: the coordinates (already in Web Mercator) as one
 * transferred Float64Array per tile, the ring ends as one Uint32Array, and the properties.
 */
import MVT from 'ol/format/MVT.js';
import RenderFeature from 'ol/render/Feature.js';
import { ABSENT, GEOMETRY_TYPES, type DecodedTile, type DecodeRequest, type DecodeAnswer } from './tile-decoder.js';

const format = new MVT({ featureClass: RenderFeature, idProperty: 'id' });

interface WorkerScope {
  onmessage: ((event: MessageEvent<DecodeRequest>) => void) | null;
  postMessage(message: DecodeAnswer, transfer?: Transferable[]): void;
}
const scope = self as unknown as WorkerScope;

function pack(features: RenderFeature[]): DecodedTile {
  let coordinateCount = 0;
  let endCount = 0;
  for (const feature of features) {
    coordinateCount += feature.getFlatCoordinates().length;
    endCount += feature.getEnds()?.length ?? 0;
  }
  const count = features.length;
  const coordinates = new Float64Array(coordinateCount);
  const coordinateEnds = new Uint32Array(count);
  const ends = new Uint32Array(endCount);
  const endEnds = new Uint32Array(count);
  const types = new Uint8Array(count);
  const ids: unknown[] = new Array(count);
  const keys: string[] = [];
  const values: unknown[][] = [];
  const valueIndex: Uint32Array[] = [];
  const columns = new Map<string, { values: Map<unknown, number>; index: Uint32Array }>();
  let c = 0;
  let e = 0;
  for (let i = 0; i < count; i++) {
    const feature = features[i]!;
    const flat = feature.getFlatCoordinates();
    coordinates.set(flat, c);
    c += flat.length;
    coordinateEnds[i] = c;
    for (const end of feature.getEnds() ?? []) ends[e++] = end;
    endEnds[i] = e;
    types[i] = GEOMETRY_TYPES.indexOf(feature.getType());
    ids[i] = feature.getId();
    const properties = feature.getProperties();
    for (const key in properties) {
      const value = properties[key];
      if (value === undefined) continue; // the id, which the reader moved to the feature's id
      let column = columns.get(key);
      if (!column) {
        column = { values: new Map(), index: new Uint32Array(count).fill(ABSENT) };
        columns.set(key, column);
      }
      let index = column.values.get(value);
      if (index === undefined) column.values.set(value, (index = column.values.size));
      column.index[i] = index;
    }
  }
  for (const [key, column] of columns) {
    keys.push(key);
    values.push([...column.values.keys()]);
    valueIndex.push(column.index);
  }
  return { coordinates, coordinateEnds, ends, endEnds, types, ids, keys, values, valueIndex };
}

scope.onmessage = (event) => {
  const { key, url, extent } = event.data;
  void (async () => {
    try {
      const response = await fetch(url);
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const features = format.readFeatures(await response.arrayBuffer(), { extent, featureProjection: 'EPSG:3857' }) as RenderFeature[];
      const tile = pack(features);
      scope.postMessage({ key, tile }, [tile.coordinates.buffer, tile.coordinateEnds.buffer, tile.ends.buffer, tile.endEnds.buffer, tile.types.buffer, ...tile.valueIndex.map((index) => index.buffer)]);
    } catch (error) {
      scope.postMessage({ key, error: String((error as Error).message ?? error) });
    }
  })();
};
