import { promisify } from 'node:util';
import { gzip as gzipCallback, constants } from 'node:zlib';
import { meets, type Box } from './bounds.js';

const gzip = promisify(gzipCallback);

/**
 * Built vector tiles kept in memory, at most `maxBytes` of them (raw and gzip bytes counted), least
 * recently used first out. One entry per tile and visibility class: the newest build, with the
 * fingerprint of the data it was built from (the snapshot of its statement, tiles/queries.ts) and the
 * box its features meet. A change that meets the box drops the entry (invalidate, from the change
 * notifications, tiles/changes.ts); whether an entry may be served without asking the database is
 * the service's decision (tiles/service.ts).
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

export function createTileCache(maxBytes: number) {
  const entries = new Map<string, CachedTile>();
  let held = 0;
  /** gzip sizes per entry, counted once their compression finished. */
  const sizes = new WeakMap<CachedTile, number>();
  const remove = (key: string) => {
    const entry = entries.get(key);
    if (!entry) return;
    entries.delete(key);
    held -= entry.bytes.length + (sizes.get(entry) ?? 0);
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
      if (entry.bytes.length > maxBytes) return;
      entries.set(key, entry);
      held += entry.bytes.length;
      evict();
      // A failure surfaces to the request that awaits it (render), not as an unhandled rejection here.
      gzipped(key, entry).catch(() => undefined);
    },

    /** The gzip bytes of a (possibly cached) tile, compressed once; null when the tile is too small. */
    gzipped,

    /** Drops every entry whose bounds meet one of `boxes` (and every entry without bounds); returns how many. */
    invalidate(boxes: readonly Box[]): number {
      let dropped = 0;
      for (const [key, entry] of entries) {
        if (entry.bounds && !boxes.some((box) => meets(box, entry.bounds!))) continue;
        remove(key);
        dropped++;
      }
      return dropped;
    },

    stats(): { entries: number; bytes: number } {
      return { entries: entries.size, bytes: held };
    },
  };
}

export type TileCache = ReturnType<typeof createTileCache>;
