import { promisify } from 'node:util';
import { gzip as gzipCallback, constants } from 'node:zlib';
import RBush from 'rbush';
import type { Box } from './bounds.js';

const gzip = promisify(gzipCallback);

/**
 * Built vector tiles kept in memory, at most `maxBytes` of them (raw and gzip bytes counted, and each
 * entry's own cost, ENTRY_OVERHEAD_BYTES), least recently used first out. One entry per tile and
 * visibility class: the newest build, with the fingerprint of the data it was built from (the
 * snapshot of its statement, tiles/queries.ts) and the box its features meet. A change that meets
 * the box drops the entry (invalidate, from the change notifications, tiles/changes.ts); whether an
 * entry may be served without asking the database is the service's decision (tiles/service.ts).
 */
export interface CachedTile {
  /** What the build was made from; the database can tell whether anything changed since (tiles/queries.ts tileQuery). */
  fingerprint: string;
  /** MD5 of `bytes`, hex: the ETag's core. */
  digest: string;
  bytes: Buffer;
  /** The gzip encoding of `bytes`, started when the entry is stored and kept; null when not worth it (small tiles). */
  gzipped?: Promise<Buffer | null>;
  /** What the tile's features meet (tiles/bounds.ts); without it, any change drops the entry. */
  bounds?: Box;
  /** The service's generation under which the entry is known current without asking (tiles/service.ts). */
  generation?: number;
}

/** Below this an MVT gains too little from gzip to pay for the header and the CPU. */
const GZIP_MIN_BYTES = 1024;

/**
 * What an entry holds besides its tile's bytes, charged against the budget with its key's characters:
 * the Map's slot, the entry object, its fingerprint, digest and bounds, the Buffer object, the gzip
 * promise and its place in the spatial index, about 900 bytes of heap on Node 20 (100 000 empty
 * entries, measured after a full collection; 665 without the index). Without it an empty tile (0
 * bytes, as most tiles outside the city are) cost nothing: a client walking empty tiles grew the
 * cache without bound.
 */
export const ENTRY_OVERHEAD_BYTES = 900;

/** The budget an entry of `key` takes besides its tile's bytes (two bytes per character at most). */
export const overheadOf = (key: string): number => ENTRY_OVERHEAD_BYTES + 2 * key.length;

/** An entry's box in the spatial index, under its key. */
interface Placed {
  minX: number;
  minY: number;
  maxX: number;
  maxY: number;
  key: string;
}

export function createTileCache(maxBytes: number) {
  const entries = new Map<string, CachedTile>();
  let held = 0;
  /** gzip sizes per entry, counted once their compression finished. */
  const sizes = new WeakMap<CachedTile, number>();
  /**
   * Where each entry's box lies (an R-tree, rbush), so a change finds the entries it meets without
   * looking at the others: every committed write reaches every API process, and a walk over 100 000
   * entries took 4.3 ms for one write's box and 13.9 ms for an import's 40, against 0.25 and 4.1 ms
   * (bench/tile-cache.bench.ts). Entries without a box meet anything.
   */
  const places = new RBush<Placed>();
  const placeOf = new Map<string, Placed>();
  const unplaced = new Set<string>();
  const remove = (key: string) => {
    const entry = entries.get(key);
    if (!entry) return;
    entries.delete(key);
    held -= entry.bytes.length + (sizes.get(entry) ?? 0) + overheadOf(key);
    const place = placeOf.get(key);
    if (place) {
      places.remove(place);
      placeOf.delete(key);
    } else {
      unplaced.delete(key);
    }
  };
  const add = (key: string, entry: CachedTile) => {
    entries.set(key, entry);
    held += entry.bytes.length + overheadOf(key);
    if (!entry.bounds) {
      unplaced.add(key);
      return;
    }
    const [minX, minY, maxX, maxY] = entry.bounds;
    const place = { minX, minY, maxX, maxY, key };
    places.insert(place);
    placeOf.set(key, place);
  };
  const evict = () => {
    for (const key of entries.keys()) {
      if (held <= maxBytes) break;
      remove(key);
    }
  };

  /** The gzip bytes of a (possibly cached) entry, compressed once; null when the tile is too small. */
  const gzipped = (key: string, entry: CachedTile): Promise<Buffer | null> => {
    entry.gzipped ??= (entry.bytes.length < GZIP_MIN_BYTES ? Promise.resolve(null) : gzip(entry.bytes, { level: constants.Z_BEST_SPEED })).then((bytes) => {
      // Count it if the entry is still the cached one; an evicted or replaced entry is only the caller's.
      if (bytes && entries.get(key) === entry) {
        sizes.set(entry, bytes.length);
        held += bytes.length;
        evict();
      }
      return bytes;
    });
    return entry.gzipped;
  };

  return {
    /** The entry for `key` if it is the build made from `fingerprint` (and marks it recently used). */
    get(key: string, fingerprint: string): CachedTile | undefined {
      const entry = entries.get(key);
      if (!entry || entry.fingerprint !== fingerprint) return undefined;
      entries.delete(key);
      entries.set(key, entry);
      return entry;
    },

    /** The tile's entry whatever its fingerprint, without marking it used: what to ask the database about. */
    peek(key: string): CachedTile | undefined {
      return entries.get(key);
    },

    /**
     * Stores a build, replacing the tile's older one, and starts its gzip at once (zlib's thread pool,
     * off the event loop): browsers ask for gzip, and a hit then only writes bytes — it never waits for
     * a compression, which took 17 ms for a 709 KiB tile. A tile larger than the whole cache is not kept.
     */
    set(key: string, entry: CachedTile): void {
      remove(key);
      if (entry.bytes.length + overheadOf(key) > maxBytes) return;
      add(key, entry);
      evict();
      // A failure surfaces to the request that awaits it (render), not as an unhandled rejection here.
      gzipped(key, entry).catch(() => undefined);
    },

    /** The gzip bytes of a (possibly cached) tile, compressed once; null when the tile is too small. */
    gzipped,

    /** Drops every entry whose bounds meet one of `boxes` (and every entry without bounds); returns how many. */
    invalidate(boxes: readonly Box[]): number {
      // rbush's intersection is bounds.ts' meets: edges touching count.
      const doomed = new Set(unplaced);
      for (const [minX, minY, maxX, maxY] of boxes) for (const place of places.search({ minX, minY, maxX, maxY })) doomed.add(place.key);
      for (const key of doomed) remove(key);
      return doomed.size;
    },

    stats(): { entries: number; bytes: number } {
      return { entries: entries.size, bytes: held };
    },
  };
}

export type TileCache = ReturnType<typeof createTileCache>;
