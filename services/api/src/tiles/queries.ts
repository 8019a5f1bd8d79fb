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

/**
 * The tile's fingerprint, and the tile itself unless the fingerprint equals `cached` (the one the
 * server-side cache holds the tile under, tiles/cache.ts): one statement, one snapshot, one round
 * trip. A hit costs the fingerprint's scan only (the build is a subquery in a CASE branch, which
 * PostgreSQL evaluates only when the branch is taken); a miss returns bytes and fingerprint read in
 * the same snapshot, so the cache stores them together. The tile is the same SQL as the raw ST_AsMVT
 * query (rawTileQuery). No rows → an empty tile (empty bytes). `cached` '' always builds. The MD5 of
 * the bytes (the ETag) is computed by the API, not here: PostgreSQL's md5() is several times slower
 * than Node's, 0.7 ms of a 15 ms street tile.
 */
export function tileQuery(z: number, x: number, y: number, cached = '', name?: string): Query {
  return {
    text: `
      WITH ${boundsCte()}
      SELECT f.fingerprint,
             CASE WHEN f.fingerprint IS DISTINCT FROM $5::text
                  THEN (SELECT coalesce(t.tile, ''::bytea) FROM (${mvtSelect(z, name, 6)}) t) END AS tile
      FROM (${fingerprintSelect(name, 6)}) f`,
    values: [z, x, y, TILE_BUFFER / TILE_EXTENT, cached, ...(name === undefined ? [] : [name])],
  };
}

/**
 * What a tile is built from, summarised: the count, the sum and the XOR of the stamps (migration 018)
 * of the visible rows whose geometry meets the tile with its buffer — exactly the rows mvtSelect
 * reads. Each write to a row gives it a fresh pseudo-random 64-bit stamp, so an insert, an update, a
 * delete or a feature moving in or out changes the fingerprint, whichever order concurrent writers
 * committed in (the value depends only on the set of row versions this snapshot sees; see 018 for why
 * a max() of sequence values would not do). Reads the stamps, never the geometries' shapes: a few
 * milliseconds where building the tile takes hundreds.
 */
export function fingerprintQuery(z: number, x: number, y: number, name?: string): Query {
  return {
    text: `
      WITH ${boundsCte()}
      ${fingerprintSelect(name, 5)}`,
    values: [z, x, y, TILE_BUFFER / TILE_EXTENT, ...(name === undefined ? [] : [name])],
  };
}

function fingerprintSelect(name: string | undefined, nameParam: number): string {
  return `
        SELECT count(*) || ':' || coalesce(sum(t.stamp), 0) || ':' || coalesce(bit_xor(t.stamp), 0) AS fingerprint
        FROM features.tile_features t, bounds b
        WHERE ${tileConditions(name, nameParam)}`;
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

/** The tile's box and the box with its buffer (what features must meet), both in EPSG:3857. */
function boundsCte(): string {
  return `bounds AS (
        SELECT ST_TileEnvelope($1::int, $2::int, $3::int) AS tile,
               ST_TileEnvelope($1::int, $2::int, $3::int, margin => $4::float8) AS filter
      )`;
}

/**
 * The tile alone; expects a CTE `bounds`. It reads features.tile_features (migration 017), where each
 * feature's geometry is already in Web Mercator: no projection per request, and ST_AsMVTGeom clips
 * to the tile and its buffer. What each feature carries depends on the zoom (services/shared/tiles.ts):
 * from TILE_DETAIL_MIN_ZOOM id, kategorie, status and name; below it kategorie and status, with
 * `number` (migration 019) as the MVT feature id. Rows go in id (number) order, so the same rows give
 * the same bytes. No "WHERE geom IS NOT NULL": ST_AsMVT skips the rows whose geometry ST_AsMVTGeom
 * dropped, and such a filter would be pushed into the scan and compute every geometry twice.
 */
function mvtSelect(z: number, name: string | undefined, nameParam: number): string {
  const detail = z >= TILE_DETAIL_MIN_ZOOM;
  return `
        SELECT ST_AsMVT(mvt, '${TILE_LAYER}', ${TILE_EXTENT}, 'geom'${detail ? ' ORDER BY mvt.id' : ", 'number' ORDER BY mvt.number"}) AS tile
        FROM (
          SELECT ST_AsMVTGeom(t.geom, b.tile, ${TILE_EXTENT}, ${TILE_BUFFER}, true) AS geom,
                 ${detail ? 't.id, t.kategorie, t.status, t.name' : 't.number, t.kategorie, t.status'}
          FROM features.tile_features t, bounds b
          WHERE ${tileConditions(name, nameParam)}
        ) mvt`;
}

/**
 * The tile's fingerprint and, unless it equals `cached`, the tile's rows with their geometry already
 * in tile coordinates (GeoJSON, integers): for a database whose PostGIS lacks protobuf-c (the embedded
 * PGlite has neither ST_AsMVT nor ST_AsMVTGeom), where the API encodes the MVT from these rows
 * (tiles/encode.ts). Same rows, same order and same properties as mvtSelect, in one statement as
 * tileQuery; `rows` is null when the fingerprint matched, else a (possibly empty) array.
 *
 * The geometry is ST_AsMVTGeom(geom, tile, 4096, 64, true) spelled out with functions every PostGIS
 * has, in PostGIS' own order (postgis/mvt.c mvt_geom): map the tile's box onto 0…4096 with y pointing
 * down (ST_Affine), snap to the integer grid (ST_SnapToGrid, which drops points that fall together and
 * parts that collapse), drop points on straight lines (ST_Simplify with tolerance 0), then clip to the
 * tile with its buffer (GEOS' rectangle clip, ST_ClipByBox2D, as PostGIS does for points and lines; a
 * line or point inside the box is left alone) and snap again, and turn polygons so that exterior rings
 * have a positive area in tile coordinates (MVT 2.1, 4.3.4.4): counter-clockwise when read as plain
 * x/y, ST_ForcePolygonCCW (on polygons only: it reverses lines). PostGIS clips polygons with wagyu, which may start a ring at another vertex;
 * services/api/test/tiles-encoded.test.ts compares both encodings on PostGIS.
 */
export function tileRowsQuery(z: number, x: number, y: number, cached = '', name?: string): Query {
  const detail = z >= TILE_DETAIL_MIN_ZOOM;
  const nameParam = 6;
  return {
    text: `
      WITH ${boundsCte()},
      frame AS (
        SELECT ST_XMin(b.tile) AS x0, ST_YMax(b.tile) AS y0, ${TILE_EXTENT} / (ST_XMax(b.tile) - ST_XMin(b.tile)) AS scale
        FROM bounds b
      )
      SELECT f.fingerprint,
             CASE WHEN f.fingerprint IS DISTINCT FROM $5::text
                  THEN (SELECT coalesce(json_agg(r ORDER BY ${detail ? 'r.id' : 'r.number'}), '[]'::json) FROM (
                    SELECT ${detail ? 'm.id, m.kategorie, m.status, m.name' : 'm.number, m.kategorie, m.status'}, ST_AsGeoJSON(m.geom, 0)::json AS geometry
                    FROM (
                      SELECT c.id, c.number, c.kategorie, c.status, c.name,
                             CASE WHEN ST_Dimension(c.geom) < 2 AND c.geom @ ST_MakeEnvelope(${-TILE_BUFFER}, ${-TILE_BUFFER}, ${TILE_EXTENT + TILE_BUFFER}, ${TILE_EXTENT + TILE_BUFFER}, 3857) THEN c.geom
                                  WHEN ST_Dimension(c.geom) < 2 THEN ST_SnapToGrid(ST_ClipByBox2D(c.geom, ST_MakeEnvelope(${-TILE_BUFFER}, ${-TILE_BUFFER}, ${TILE_EXTENT + TILE_BUFFER}, ${TILE_EXTENT + TILE_BUFFER}, 3857)), 1)
                                  ELSE ST_ForcePolygonCCW(ST_SnapToGrid(ST_ClipByBox2D(c.geom, ST_MakeEnvelope(${-TILE_BUFFER}, ${-TILE_BUFFER}, ${TILE_EXTENT + TILE_BUFFER}, ${TILE_EXTENT + TILE_BUFFER}, 3857)), 1)) END AS geom
                      FROM (
                        SELECT t.id, t.number, t.kategorie, t.status, t.name,
                               ST_Simplify(ST_SnapToGrid(ST_Affine(t.geom, fr.scale, 0, 0, -fr.scale, -fr.x0 * fr.scale, fr.y0 * fr.scale), 1), 0) AS geom
                        FROM features.tile_features t, bounds b, frame fr
                        WHERE ${tileConditions(name, nameParam)}
                      ) c
                    ) m
                    WHERE m.geom IS NOT NULL AND NOT ST_IsEmpty(m.geom)
                  ) r) END AS rows
      FROM (${fingerprintSelect(name, nameParam)}) f`,
    values: [z, x, y, TILE_BUFFER / TILE_EXTENT, cached, ...(name === undefined ? [] : [name])],
  };
}

/** The same tile straight from ST_AsMVT, without the fingerprint: the benchmark's baseline. */
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
