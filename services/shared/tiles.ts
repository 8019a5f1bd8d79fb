/**
 * What the API's vector tiles (GET /api/tiles/{z}/{x}/{y}.mvt) carry, by zoom: shared by the API,
 * which builds them, and the web map, which draws them.
 *
 * From TILE_DETAIL_MIN_ZOOM on, each feature carries `id`, `kategorie`, `status` and `name`: the zooms
 * where the map selects, opens and edits features. Below it a tile is an overview, as vector tile
 * schemas such as OpenMapTiles thin their low zooms: `kategorie` and `status` (for styling and the
 * map's filters), and an integer MVT feature id per feature (`features.tile_features.number`) that
 * tells the same feature apart in neighbouring tiles. The two strings left out are what makes a dense
 * overview tile slow: ST_AsMVT keeps every distinct property value in a table, and each id and name is
 * distinct, so leaving them out made building the whole city's tiles 0.70× as long and their bytes
 * 3.7 MB instead of 6.5 (see docs/api.md "Vector tiles"). A search by name asks for tiles
 * filtered by the API instead (`?name=`).
 *
 * This module imports nothing: the map page's first script (lib/first-view.ts) reads it, and the
 * feature schema (zod) would add 28 KB gzip to that page.
 */
export const TILE_DETAIL_MIN_ZOOM = 12;
