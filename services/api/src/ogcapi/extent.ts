import type { Db } from '../db/pool.js';
import { KATEGORIEN } from '../../../shared/features/schema.js';

/**
 * The spatial extent of each collection (OGC API – Features /req/core/fc-md-extent), in CRS84.
 *
 * Why cached: the exact extent is an ST_Extent over every feature, a full scan (about 40 ms on
 * 100 000 features), too much for each /collections request. ST_EstimatedExtent would be cheap but
 * comes from the planner statistics (stale until the next ANALYZE) and knows no kategorie.
 *
 * Freshness: a change through this API (either /api/features or /ogcapi: both call invalidate via the
 * feature service) empties the cache at once, so the next request computes it again. Writers outside
 * the API (GeoServer WFS-T, SQL) are seen after at most maxAgeMs (default 60 s).
 */

export type Bbox4 = [minLon: number, minLat: number, maxLon: number, maxLat: number];

export interface CollectionExtents {
  /** The extent per collection id (`features` and each kategorie); a collection without features has none. */
  get(): Promise<ReadonlyMap<string, Bbox4>>;
  invalidate(): void;
}

export const EXTENT_MAX_AGE_MS = 60_000;

export function createCollectionExtents(db: Db, options: { maxAgeMs?: number; now?: () => number } = {}): CollectionExtents {
  const maxAgeMs = options.maxAgeMs ?? EXTENT_MAX_AGE_MS;
  const now = options.now ?? Date.now;
  // Emptied by invalidate(), so a computation that started before a write is never kept after it.
  let cached: { at: number; extents: Promise<ReadonlyMap<string, Bbox4>> } | undefined;

  async function compute(): Promise<ReadonlyMap<string, Bbox4>> {
    const { rows } = await db.query<{ kategorie: string; minLon: number; minLat: number; maxLon: number; maxLat: number }>(
      `SELECT kategorie, ST_XMin(e) AS "minLon", ST_YMin(e) AS "minLat", ST_XMax(e) AS "maxLon", ST_YMax(e) AS "maxLat"
       FROM (SELECT f.kategorie, ST_Extent(f.geom) AS e FROM features.features f GROUP BY f.kategorie) x`,
    );
    const extents = new Map<string, Bbox4>();
    let all: Bbox4 | undefined;
    for (const row of rows) {
      const box: Bbox4 = [row.minLon, row.minLat, row.maxLon, row.maxLat];
      if ((KATEGORIEN as readonly string[]).includes(row.kategorie)) extents.set(row.kategorie, box);
      all = all ? [Math.min(all[0], box[0]), Math.min(all[1], box[1]), Math.max(all[2], box[2]), Math.max(all[3], box[3])] : box;
    }
    if (all) extents.set('features', all);
    return extents;
  }

  return {
    get() {
      if (cached && now() - cached.at < maxAgeMs) return cached.extents;
      const entry = { at: now(), extents: compute() };
      cached = entry;
      // A failed computation is not remembered: the next request tries again.
      entry.extents.catch(() => {
        if (cached === entry) cached = undefined;
      });
      return entry.extents;
    },
    invalidate() {
      cached = undefined;
    },
  };
}
