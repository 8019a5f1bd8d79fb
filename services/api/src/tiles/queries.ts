import type { Bbox } from '../../../shared/features/schema.js';
import { TILE_DETAIL_MIN_ZOOM } from '../../../shared/tiles.js';
import type { Query } from '../db/pool.js';
import { listConditions } from '../features/queries.js';

/**
 * The SQL of the vector tiles: one Mapbox Vector Tile (layer `features`) per z/x/y in Web Mercator,
 * built by PostGIS (ST_AsMVTGeom clips and quantises, ST_AsMVT encodes). Parameters only.
 */
export const TILE_LAYER = 'features';
/** Tile coordinate units per side (the MVT default) and the buffer around a tile, in those units. */
export const TILE_EXTENT = 4096;
export const TILE_BUFFER = 64;

/**
 * Which callers see the same tiles under visibleFeatures(): part of every tile cache key, so a cached
 * tile is never served across a visibility boundary. One class today, as the rule is "everything";
 * a rule that depends on the caller must name the caller's class here (and pass it to the cache key).
 */
export const VISIBILITY_CLASS = 'everyone';

/**
 * What a caller may see — the same rule as GET /api/features, which today lists every feature to
 * everyone with `read`. Kept as one function so the list and the tiles cannot drift apart silently
 * when the rule changes (see docs/api.md "Vector tiles"). `alias` is features.features in the count
 * and features.tile_features (migration 017: id, kategorie, status, name) in the tiles.
 */
export function visibleFeatures(_alias: 'f' | 't' = 'f'): string {
  return 'TRUE';
}

/** A tile's bytes at the overview zooms are at most this many (raw, before gzip): the rule in overviewRows. */
export const OVERVIEW_BUDGET_BYTES = 500_000;
/** What the layer needs besides its features (its name, extent, version, keys and values), kept out of the budget. */
const LAYER_RESERVE_BYTES = 4_096;
/**
 * Pixels per tile side in the overview rule: MapLibre draws a 4096-unit tile on 512 CSS pixels, so a
 * pixel is 8 tile units (a tile's width in metres / 512).
 */
export const TILE_PIXELS = 512;

/**
 * The tile, unless the tile built under snapshot `since` is still current: one statement, one
 * snapshot, one round trip. `fresh` is true when no committed change that `since` does not see
 * (features.tile_changes, migration 023: a row whose xid is not visible in it) has a box meeting the
 * tile with its buffer — an index lookup, whatever the data's size — and the horizon of pruned changes
 * lies below the snapshot's xmin; then `tile` is null (the build is a subquery in a CASE branch, which
 * PostgreSQL evaluates only when the branch is taken). Otherwise `tile` is built (no rows → empty
 * bytes). `snapshot` is the statement's own (pg_current_snapshot(), the one the tile was read in): what
 * the caller stores the build under. `since` null always builds. The MD5 of the bytes (the ETag) is
 * computed by the API, not here: PostgreSQL's md5() is several times slower than Node's.
 */
export function tileQuery(z: number, x: number, y: number, since: string | null = null, name?: string): Query {
  return {
    text: `
      WITH ${boundsCte()}
      SELECT f.fresh, pg_current_snapshot()::text AS snapshot,
             CASE WHEN NOT f.fresh THEN (SELECT coalesce(t.tile, ''::bytea) FROM (${mvtSelect(z, name, 6)}) t) END AS tile
      FROM (${freshSelect(5)}) f`,
    values: [z, x, y, TILE_BUFFER / TILE_EXTENT, since, ...(name === undefined ? [] : [name])],
  };
}

/**
 * Whether the build under snapshot $n (text, or null: never) is current for the tile in `bounds`:
 * see tileQuery. A snapshot whose xmin is not above the horizon may have lost changes to pruning.
 */
function freshSelect(snapshotParam: number): string {
  const since = `$${snapshotParam}::pg_snapshot`;
  return `
        SELECT ${since} IS NOT NULL
               AND (SELECT h.xid FROM features.tile_changes_horizon h) < pg_snapshot_xmin(${since})
               AND NOT EXISTS (
                 SELECT 1 FROM features.tile_changes c, bounds b
                 WHERE c.box && b.filter AND c.xid >= pg_snapshot_xmin(${since}) AND NOT pg_visible_in_snapshot(c.xid, ${since})
               ) AS fresh`;
}

/**
 * The former fingerprint of a tile (count, sum and XOR of the migration-018 stamps of the rows it
 * meets): the API no longer reads it, as it grows with the data (a scan of every stamp in the tile).
 * Kept for bench/tiles.bench.ts, which times it beside the tiles; goes with that row of the benchmark.
 */
export function fingerprintQuery(z: number, x: number, y: number, name?: string): Query {
  return {
    text: `
      WITH ${boundsCte()}
      SELECT count(*) || ':' || coalesce(sum(t.stamp), 0) || ':' || coalesce(bit_xor(t.stamp), 0) AS fingerprint
      FROM features.tile_features t, bounds b
      WHERE ${tileConditions(name, 5)}`,
    values: [z, x, y, TILE_BUFFER / TILE_EXTENT, ...(name === undefined ? [] : [name])],
  };
}

/**
 * The rows a tile reads: visible, meeting the tile with its buffer, and with `name` (when given, as
 * parameter $nameParam) a case-insensitive part of their name — the web map's search by name
 * (lib/map.ts), so a search of the overview, whose tiles hold no names, gets only what it finds.
 */
function tileConditions(name: string | undefined, nameParam: number): string {
  const named = name === undefined ? '' : ` AND strpos(lower(t.name), lower($${nameParam}::text)) > 0`;
  return `t.geom && b.filter AND ${visibleFeatures('t')}${named}`;
}

/** The tile's box, the box with its buffer (what features must meet), both in EPSG:3857, and its pixel in metres. */
function boundsCte(): string {
  return `bounds AS (
        SELECT e.tile, ST_TileEnvelope($1::int, $2::int, $3::int, margin => $4::float8) AS filter,
               (ST_XMax(e.tile) - ST_XMin(e.tile)) / ${TILE_PIXELS} AS pixel
        FROM (SELECT ST_TileEnvelope($1::int, $2::int, $3::int) AS tile) e
      )`;
}

/**
 * The most features an overview tile considers, the largest first: no feature that survives encoding
 * is estimated at less than 31 bytes (withinBudget), so no more than this many can fit the budget.
 * Bounding them before any geometry is read or simplified keeps a dense tile's cost to one narrow pass
 * over its rows plus the work on these.
 */
export const OVERVIEW_CANDIDATES = Math.floor(OVERVIEW_BUDGET_BYTES / 31);

/**
 * What an overview tile (below TILE_DETAIL_MIN_ZOOM) is built from, so that it stays small whatever
 * the data's density; expects a CTE `bounds`. Every visible feature meeting the tile, as at the detail
 * zooms, unless the tile is dense: its features' stored geometries (ST_MemSize, their size
 * uncompressed, read from the header without decoding or detoasting them: about 16 bytes a vertex,
 * where the MVT needs at most 4, plus 26 bytes a feature) say it would not fit OVERVIEW_BUDGET_BYTES.
 * Then:
 * 1. A feature smaller than a pixel (its box narrower and lower than one: every point, and polygons
 *    and lines too small to draw) stands for its pixel: of those whose box centre falls in the same
 *    pixel, only the one with the lowest `number` is kept. Density stays visible; their count is
 *    bounded by the pixels (512 × 512 per tile).
 * 2. Every other feature is simplified to the pixel (ST_Simplify, Douglas-Peucker, tolerance one pixel
 *    in metres); a polygon that collapses is dropped.
 * Of what remains, the OVERVIEW_CANDIDATES largest (reach descending, then number) go on to the budget.
 * The rows are first chosen from narrow columns (their boxes, sizes and numbers, no geometry: OFFSET 0
 * keeps the planner from carrying the geometry through the sorts), and the chosen ones' geometries
 * fetched again by ctid within the same statement: sorting a dense tile's rows with their geometries
 * spilled 165 MB to disk at a million features.
 * Rows: number, kategorie, status, geom (3857), reach (the box's width + height, metres). The budget
 * itself (3., for every overview tile) comes once the geometry is in tile units: withinBudget.
 */
function overviewRows(name: string | undefined, nameParam: number): string {
  return `
          SELECT k.number, k.kategorie, k.status, k.reach,
                 CASE WHEN k.dense AND NOT k.small THEN ST_Simplify(g.geom, k.pixel) ELSE g.geom END AS geom
          FROM (
            SELECT s.* FROM (
              SELECT r.*,
                     sum(26 + r.stored / 4) OVER () > ${OVERVIEW_BUDGET_BYTES} AS dense,
                     row_number() OVER (
                       PARTITION BY r.small, CASE WHEN r.small THEN floor((r.x0 + r.x1) / 2 / r.pixel) ELSE r.number END,
                                    CASE WHEN r.small THEN floor((r.y0 + r.y1) / 2 / r.pixel) END
                       ORDER BY r.number) AS rank
              FROM (
                SELECT t.ctid AS tid, t.number, t.kategorie, t.status, ST_MemSize(t.geom) AS stored, b.pixel, x0, y0, x1, y1,
                       (x1 - x0) + (y1 - y0) AS reach, x1 - x0 < b.pixel AND y1 - y0 < b.pixel AS small
                FROM features.tile_features t, bounds b,
                     LATERAL (SELECT ST_XMin(e) AS x0, ST_YMin(e) AS y0, ST_XMax(e) AS x1, ST_YMax(e) AS y1 FROM (SELECT box2d(t.geom) AS e) e) box
                WHERE ${tileConditions(name, nameParam)}
                OFFSET 0
              ) r
            ) s
            WHERE NOT s.dense OR NOT s.small OR s.rank = 1
            ORDER BY s.reach DESC, s.number
            LIMIT ${OVERVIEW_CANDIDATES}
          ) k
          JOIN features.tile_features g ON g.ctid = k.tid`;
}

/**
 * 3. The overview's budget: of `rows` (number, reach and geom in tile units), the largest first
 * (reach descending, then number: a deterministic order) while the running total of an upper bound of
 * each feature's encoded size stays within OVERVIEW_BUDGET_BYTES minus the layer's reserve. The bound
 * (MVT 2.1 as ST_AsMVT and vt-pbf write it): 22 bytes per feature (its message's key and length, id,
 * two property tags, type, geometry key and length), 5 per part or ring (MoveTo, LineTo and
 * ClosePath commands) and 4 per vertex (two zigzag deltas within ±4224: at most two bytes each), so
 * the tile never exceeds the budget.
 */
function withinBudget(rows: string): string {
  return `
          SELECT w.* FROM (
            SELECT k.*, sum(22 + 5 * CASE WHEN ST_Dimension(k.geom) = 2 THEN ST_NRings(k.geom) ELSE ST_NumGeometries(k.geom) END + 4 * ST_NPoints(k.geom))
                          OVER (ORDER BY k.reach DESC, k.number ROWS UNBOUNDED PRECEDING) AS running
            FROM (${rows}) k
          ) w
          WHERE w.running <= ${OVERVIEW_BUDGET_BYTES - LAYER_RESERVE_BYTES}`;
}

/**
 * The tile alone; expects a CTE `bounds`. It reads features.tile_features (migration 017), where each
 * feature's geometry is already in Web Mercator: no projection per request, and ST_AsMVTGeom clips
 * to the tile and its buffer. What each feature carries depends on the zoom (services/shared/tiles.ts):
 * from TILE_DETAIL_MIN_ZOOM id, kategorie, status and name, every feature; below it kategorie and
 * status, with `number` (migration 019) as the MVT feature id, thinned and within the budget
 * (overviewRows, withinBudget). Rows go in id (number) order, so the same rows give the same bytes.
 * No "WHERE geom IS NOT NULL" at the detail zooms: ST_AsMVT skips the rows whose geometry
 * ST_AsMVTGeom dropped, and such a filter would be pushed into the scan and compute every geometry twice.
 */
function mvtSelect(z: number, name: string | undefined, nameParam: number): string {
  if (z >= TILE_DETAIL_MIN_ZOOM) {
    return `
        SELECT ST_AsMVT(mvt, '${TILE_LAYER}', ${TILE_EXTENT}, 'geom' ORDER BY mvt.id) AS tile
        FROM (
          SELECT ST_AsMVTGeom(t.geom, b.tile, ${TILE_EXTENT}, ${TILE_BUFFER}, true) AS geom, t.id, t.kategorie, t.status, t.name
          FROM features.tile_features t, bounds b
          WHERE ${tileConditions(name, nameParam)}
        ) mvt`;
  }
  // OFFSET 0 keeps PostgreSQL from pulling the subquery up into the budget's window, which would
  // compute ST_AsMVTGeom once per mention of its column there. A null geometry counts nothing and
  // ST_AsMVT skips it.
  const rows = `
          SELECT o.number, o.kategorie, o.status, o.reach, ST_AsMVTGeom(o.geom, b.tile, ${TILE_EXTENT}, ${TILE_BUFFER}, true) AS geom
          FROM (${overviewRows(name, nameParam)}) o, bounds b
          OFFSET 0`;
  return `
        SELECT ST_AsMVT(mvt, '${TILE_LAYER}', ${TILE_EXTENT}, 'geom', 'number' ORDER BY mvt.number) AS tile
        FROM (
          SELECT v.number, v.kategorie, v.status, v.geom FROM (${withinBudget(rows)}) v
        ) mvt`;
}

/**
 * As tileQuery (`fresh`, `snapshot`), with the tile's rows instead of its bytes: their geometry
 * already in tile coordinates (GeoJSON, integers), for a database whose PostGIS lacks protobuf-c (the
 * embedded PGlite has neither ST_AsMVT nor ST_AsMVTGeom), where the API encodes the MVT from these rows
 * (tiles/encode.ts). Same rows, same order and same properties as mvtSelect, the overview's rule
 * included; `rows` is null when fresh, else a (possibly empty) array.
 *
 * The geometry is ST_AsMVTGeom(geom, tile, 4096, 64, true) spelled out with functions every PostGIS
 * has, in PostGIS' own order (postgis/mvt.c mvt_geom): map the tile's box onto 0…4096 with y pointing
 * down (ST_Affine), snap to the integer grid (ST_SnapToGrid, which drops points that fall together and
 * parts that collapse), drop points on straight lines (ST_Simplify with tolerance 0), then clip to the
 * tile with its buffer (GEOS' rectangle clip, ST_ClipByBox2D, as PostGIS does for points and lines; a
 * line or point inside the box is left alone) and snap again, and turn polygons so that exterior rings
 * have a positive area in tile coordinates (MVT 2.1, 4.3.4.4): counter-clockwise when read as plain
 * x/y, ST_ForcePolygonCCW (on polygons only: it reverses lines). PostGIS clips polygons with wagyu, which
 * may start a ring at another vertex (and may differ in a vertex or two, so where the budget binds the
 * two encoders may keep a slightly different last few features); services/api/test/tiles-encoded.test.ts
 * compares both encodings on PostGIS.
 */
export function tileRowsQuery(z: number, x: number, y: number, since: string | null = null, name?: string): Query {
  const detail = z >= TILE_DETAIL_MIN_ZOOM;
  const nameParam = 6;
  const clipBox = `ST_MakeEnvelope(${-TILE_BUFFER}, ${-TILE_BUFFER}, ${TILE_EXTENT + TILE_BUFFER}, ${TILE_EXTENT + TILE_BUFFER}, 3857)`;
  const source = detail
    ? `SELECT t.id, t.number, t.kategorie, t.status, t.name, 0 AS reach, t.geom FROM features.tile_features t, bounds b WHERE ${tileConditions(name, nameParam)}`
    : `SELECT NULL::text AS id, o.number, o.kategorie, o.status, NULL::text AS name, o.reach, o.geom FROM (${overviewRows(name, nameParam)}) o`;
  // Each OFFSET 0 keeps a geometry computed once: without it PostgreSQL pulls the subquery up and
  // computes the expression again for every mention of its column (the filters, the budget).
  const rows = `
                    SELECT m.id, m.number, m.kategorie, m.status, m.name, m.reach, m.geom
                    FROM (
                      SELECT c.id, c.number, c.kategorie, c.status, c.name, c.reach,
                             CASE WHEN ST_Dimension(c.geom) < 2 AND c.geom @ ${clipBox} THEN c.geom
                                  WHEN ST_Dimension(c.geom) < 2 THEN ST_SnapToGrid(ST_ClipByBox2D(c.geom, ${clipBox}), 1)
                                  ELSE ST_ForcePolygonCCW(ST_SnapToGrid(ST_ClipByBox2D(c.geom, ${clipBox}), 1)) END AS geom
                      FROM (
                        SELECT s.id, s.number, s.kategorie, s.status, s.name, s.reach,
                               ST_Simplify(ST_SnapToGrid(ST_Affine(s.geom, fr.scale, 0, 0, -fr.scale, -fr.x0 * fr.scale, fr.y0 * fr.scale), 1), 0) AS geom
                        FROM (${source}) s, frame fr
                        OFFSET 0
                      ) c
                      OFFSET 0
                    ) m
                    WHERE m.geom IS NOT NULL AND NOT ST_IsEmpty(m.geom)`;
  return {
    text: `
      WITH ${boundsCte()},
      frame AS (
        SELECT ST_XMin(b.tile) AS x0, ST_YMax(b.tile) AS y0, ${TILE_EXTENT} / (ST_XMax(b.tile) - ST_XMin(b.tile)) AS scale
        FROM bounds b
      )
      SELECT f.fresh, pg_current_snapshot()::text AS snapshot,
             CASE WHEN NOT f.fresh
                  THEN (SELECT coalesce(json_agg(r ORDER BY ${detail ? 'r.id' : 'r.number'}), '[]'::json) FROM (
                    SELECT ${detail ? 'v.id, v.kategorie, v.status, v.name' : 'v.number, v.kategorie, v.status'}, ST_AsGeoJSON(v.geom, 0)::json AS geometry
                    FROM (${detail ? rows : withinBudget(rows)}) v
                  ) r) END AS rows
      FROM (${freshSelect(5)}) f`,
    values: [z, x, y, TILE_BUFFER / TILE_EXTENT, since, ...(name === undefined ? [] : [name])],
  };
}

/**
 * The same tile straight from ST_AsMVT, without the freshness check: the API's own SQL for the tile,
 * the benchmarks' baseline (bench/tiles.bench.ts, bench/tile-growth.bench.ts).
 */
export function rawTileQuery(z: number, x: number, y: number, name?: string): Query {
  return {
    text: `
      WITH ${boundsCte()}
      ${mvtSelect(z, name, 5)}`,
    values: [z, x, y, TILE_BUFFER / TILE_EXTENT, ...(name === undefined ? [] : [name])],
  };
}

/**
 * How many features the list (GET /api/features?bbox=…) holds for a bbox, counted up to `atMost + 1`
 * only: the map asks "more than one list page?" to choose between vector tiles and GeoJSON, and the
 * answer must stay cheap (an index scan of at most that many rows) for any view. Same conditions as
 * the list (listConditions), so the answer cannot drift from what the list would return.
 */
export function countQuery(bbox: Bbox, atMost: number): Query {
  const values: unknown[] = [];
  const conditions = [...listConditions({ bbox }, values), visibleFeatures()];
  values.push(atMost + 1);
  return {
    text: `SELECT count(*)::int AS count FROM (SELECT 1 FROM features.features f WHERE ${conditions.join(' AND ')} LIMIT $${values.length}::int) f`,
    values,
  };
}
