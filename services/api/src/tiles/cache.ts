import { promisify } from 'node:util';
import { gzip as gzipCallback, constants } from 'node:zlib';

const gzip = promisify(gzipCallback);

/**
 * Built vector tiles kept in memory, at most `maxBytes` of them (raw and gzip bytes counted), least
 * recently used first out. One entry per tile and visibility class: the newest build, with the
 * fingerprint it was built under (tiles/queries.ts). The service asks the database for the current
 * fingerprint and serves the entry only while it is equal, so the cache needs no invalidation
 * messages and stays correct for every writer (API, SQL, GeoServer WFS-T); a stale entry is merely
 * replaced by the next build of its tile.
 */
export interface CachedTile {
  fingerprint: string;
  /** MD5 of `bytes`, hex: the ETag's core. */
  digest: string;
  bytes: Buffer;
  /** The gzip encoding of `bytes`, made on first demand and kept; null when not worth it (small tiles). */
  gzipped?: Promise<Buffer | null>;
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

  return {
    /** The entry for `key` if it was built under `fingerprint` (and marks it recently used). */
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

    /** Stores a build, replacing the tile's older one. A tile larger than the whole cache is not kept. */
    set(key: string, entry: CachedTile): void {
      remove(key);
      if (entry.bytes.length > maxBytes) return;
      entries.set(key, entry);
      held += entry.bytes.length;
      evict();
    },

    /** The gzip bytes of a (possibly cached) tile, compressed once; null when the tile is too small. */
    gzipped(key: string, entry: CachedTile): Promise<Buffer | null> {
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
    },

    stats(): { entries: number; bytes: number } {
      return { entries: entries.size, bytes: held };
    },
  };
}

export type TileCache = ReturnType<typeof createTileCache>;
