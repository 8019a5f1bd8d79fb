/**
 * Tile cache invalidation benchmark (`npm run bench -- tile-cache`; no database).
 *
 * Every committed write reaches every API process as a change notification with up to 40 boxes
 * (migration 023), and the process drops the cached tiles those boxes meet (tiles/cache.ts
 * `invalidate`). This measures that step on a full cache, the API's own `createTileCache` (an R-tree
 * of the entries' boxes, rbush) against the baseline that does the same work without an index: a
 * walk over every entry testing each box (bounds.ts `meets`), which is what the cache did until
 * wave 3 session 15. Both hold the same entries and drop the same keys (checked each round); the
 * dropped entries are put back untimed, so every round starts from the same cache.
 *
 * Entries: tiles of a city region (Leipzig, about 12 × 10 km) at z10–z17 (a day of map use), plus
 * empty tiles at z18 beyond it (a client walking the map), ENTRIES in all (default 100 000: about the
 * 64 MiB budget's worth once each entry is charged its own cost). Changes: one feature's write (one
 * box of about 2 km, the trigger's grid cell) and an import's (40 boxes over the region). Rounds
 * alternate which side goes first; medians of ROUNDS (default 200). Also the cost on the other side:
 * a tile stored (`set`) with the index against a plain Map.
 */
import { createTileCache, type CachedTile } from '../services/api/src/tiles/cache.js';
import { meets, tileBounds, type Box } from '../services/api/src/tiles/bounds.js';
import { median, printTable, ratio } from './stats.js';
import { tileOf } from '../test/helpers/tiles.js';

const quick = process.env.BENCH_QUICK === '1';
const ENTRIES = Number(process.env.TILE_CACHE_ENTRIES ?? 100_000);
const ROUNDS = Number(process.env.TILE_CACHE_ROUNDS ?? (quick ? 30 : 200));

/** Web Mercator metres of a lon/lat. */
function mercator(lon: number, lat: number): [number, number] {
  const x = (lon * 20037508.342789244) / 180;
  const y = Math.log(Math.tan(((90 + lat) * Math.PI) / 360)) * 6378137;
  return [x, y];
}

const CITY = { west: 12.3, south: 51.29, east: 12.47, north: 51.38 };

/** The cached tiles: the city's tiles at z10–z17 first, then empty z18 tiles walked eastwards. */
function entries(): Array<[string, CachedTile]> {
  const out: Array<[string, CachedTile]> = [];
  const entry = (z: number, x: number, y: number): [string, CachedTile] => [`${z}/${x}/${y}:public`, { fingerprint: `${z}:${x}:${y}`, digest: 'd', bytes: Buffer.alloc(0), bounds: tileBounds({ z, x, y }) }];
  for (let z = 10; z <= 17 && out.length < ENTRIES; z++) {
    const a = tileOf(CITY.west, CITY.north, z);
    const b = tileOf(CITY.east, CITY.south, z);
    for (let x = a.x; x <= b.x && out.length < ENTRIES; x++) for (let y = a.y; y <= b.y && out.length < ENTRIES; y++) out.push(entry(z, x, y));
  }
  const start = tileOf(CITY.east, CITY.north, 18);
  for (let i = 0; out.length < ENTRIES; i++) out.push(entry(18, start.x + 1 + (i % 5_000), start.y + Math.floor(i / 5_000)));
  return out;
}

/** The change of one feature's write: the trigger's box, about 2 km around a point in the city. */
function oneWrite(i: number): Box[] {
  const lon = CITY.west + ((i * 0.037) % (CITY.east - CITY.west));
  const lat = CITY.south + ((i * 0.023) % (CITY.north - CITY.south));
  const [x0, y0] = mercator(lon - 0.01, lat - 0.01);
  const [x1, y1] = mercator(lon + 0.01, lat + 0.01);
  return [[x0, y0, x1, y1]];
}
/** An import's change: 40 boxes of about 2 km across the city. */
function anImport(i: number): Box[] {
  return Array.from({ length: 40 }, (_, k) => oneWrite(i * 40 + k)[0]!);
}

/** The baseline: the same entries in a Map, a change found by testing every entry against every box. */
function linearCache() {
  const map = new Map<string, CachedTile>();
  return {
    set: (key: string, entry: CachedTile) => map.set(key, entry),
    invalidate(boxes: readonly Box[]): string[] {
      const dropped: string[] = [];
      for (const [key, entry] of map) {
        if (entry.bounds && !boxes.some((box) => meets(box, entry.bounds!))) continue;
        map.delete(key);
        dropped.push(key);
      }
      return dropped;
    },
  };
}

function time(work: () => void): number {
  const started = process.hrtime.bigint();
  work();
  return Number(process.hrtime.bigint() - started) / 1e3;
}

function main(): void {
  const all = entries();
  const byKey = new Map(all);
  const indexed = createTileCache(Number.MAX_SAFE_INTEGER);
  const linear = linearCache();
  const storeIndexed: number[] = [];
  const storeLinear: number[] = [];
  for (const [key, entry] of all) {
    storeIndexed.push(time(() => indexed.set(key, entry)));
    storeLinear.push(time(() => linear.set(key, entry)));
  }
  console.log(`${all.length} entries (${all.filter(([k]) => k.startsWith('18/')).length} empty z18 tiles walked), ${ROUNDS} rounds per change, order alternating`);

  const rows: Record<string, string | number>[] = [];
  for (const [label, change] of [['one write (1 box)', oneWrite], ['an import (40 boxes)', anImport]] as const) {
    const fast: number[] = [];
    const walk: number[] = [];
    let droppedPerChange = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const boxes = change(round);
      let fromWalk: string[] = [];
      const sides = [
        () => fast.push(time(() => indexed.invalidate(boxes))),
        () => walk.push(time(() => (fromWalk = linear.invalidate(boxes)))),
      ];
      if (round % 2) sides.reverse();
      for (const side of sides) side();
      const fromIndex = [...byKey.keys()].filter((key) => indexed.peek(key) === undefined);
      if (fromIndex.length !== fromWalk.length || fromIndex.some((key) => !fromWalk.includes(key))) throw new Error(`the two caches dropped different tiles (${fromIndex.length} and ${fromWalk.length})`);
      droppedPerChange += fromWalk.length / ROUNDS;
      for (const key of fromWalk) {
        indexed.set(key, byKey.get(key)!);
        linear.set(key, byKey.get(key)!);
      }
    }
    const m = median(fast);
    const b = median(walk);
    rows.push({ change: label, 'tiles dropped': Math.round(droppedPerChange), 'R-tree µs': m.toFixed(0), 'walk µs': b.toFixed(0), ratio: ratio(m, b), 'speed-up': `${(b / m).toFixed(1)}×` });
  }
  rows.push({ change: 'storing a tile (set)', 'tiles dropped': '—', 'R-tree µs': median(storeIndexed).toFixed(2), 'walk µs': median(storeLinear).toFixed(2), ratio: ratio(median(storeIndexed), median(storeLinear)), 'speed-up': '(the index\'s cost)' });
  printTable(rows);
}

main();
