/**
 * The map page's first view, and the overview tiles it shows, known before the map's code has loaded.
 *
 * The map module (OpenLayers and lib/map.ts, about 600 KB before gzip) takes a few hundred
 * milliseconds to arrive, compile and run before OpenLayers asks for its first tiles. A view below
 * GEOJSON_MIN_ZOOM is drawn from the API's vector tiles alone, and a cold dense tile takes the API
 * as long again to build. So the page asks for those tiles itself while it is still being parsed,
 * as `<link rel="preload" as="fetch">` (the "preload key requests" of web performance work): the
 * builds overlap the map's start-up instead of following it, and when OpenLayers' tile loader
 * (lib/map.ts) fetches the same URL in the same request mode (CORS, no credentials), the browser
 * hands it the preloaded response instead of asking again. A tile computed here that OpenLayers
 * does not ask for is one wasted request; one it asks for that was not computed here is simply
 * fetched then. Nothing depends on the two agreeing but speed.
 *
 * preloadOverviewTiles and firstView run inline in the page (pages/index.astro renders their source
 * into a script right after the map's element), so they are self-contained: they use no imports, no module
 * constants, no helper functions.
 */

import { TILE_DETAIL_MIN_ZOOM } from '../../../shared/tiles.js';

/**
 * Below this zoom the map always draws vector tiles, as the overview (lib/overview-tiles.ts). From it
 * on, a view holding at most one list page of features is drawn from GeoJSON — features that can be
 * selected, clustered and snapped to while editing — and a denser view from vector tiles (GET
 * /api/tiles/count decides; lib/map.ts). It is where the API's tiles start to carry ids and names
 * (services/shared/tiles.ts): the overview needs neither.
 */
export const GEOJSON_MIN_ZOOM = TILE_DETAIL_MIN_ZOOM;
/** The overview's tile size, CSS pixels. */
export const OVERVIEW_TILE_SIZE = 256;

/** The view the map page opens with: `?center=lon,lat&zoom=z`, else Berlin-Mitte at zoom 13. */
export function firstView(search: string): { center: [number, number]; zoom: number } {
  const params = new URLSearchParams(search);
  const center = params.get('center')?.split(',').map(Number);
  const zoom = params.has('zoom') ? Number(params.get('zoom')) : NaN;
  return {
    center: center && center.length === 2 && center.every(Number.isFinite) ? [center[0]!, center[1]!] : [13.4, 52.52],
    zoom: Number.isFinite(zoom) ? zoom : 13,
  };
}

/** Where a map opens when nothing says otherwise. */
export const DEFAULT_VIEW = firstView('');

export interface OverviewPreload {
  /** The API's public base URL (ClientConfig.apiUrl). */
  apiUrl: string;
  /** The id of the map's element: its box is the view's size. */
  mapId: string;
  /** The overview's tile size in CSS pixels (lib/map.ts overviewSource). */
  tileSize: number;
  /** Views at or above this zoom are not the overview: nothing is preloaded. */
  belowZoom: number;
}

/**
 * Adds a preload link for each overview tile of the first view; returns their URLs. The tile zoom
 * and range are OpenLayers' own: the grid zoom whose resolution is nearest the view's (zDirection 0,
 * ol/array linearFindNearest), and the tiles meeting the view's extent (ol/tilegrid/TileGrid).
 */
export function preloadOverviewTiles(view: { center: [number, number]; zoom: number }, options: OverviewPreload): string[] {
  const map = document.getElementById(options.mapId);
  if (!map || !(view.zoom < options.belowZoom) || view.zoom < 0) return [];
  const whole = 2 * Math.PI * 6378137; // Web Mercator's width in metres
  // Resolutions r and r/2 around the view's: the nearer one's zoom (OpenLayers compares linearly).
  const below = Math.floor(view.zoom);
  const fraction = 2 ** (below - view.zoom);
  const z = Math.min(options.belowZoom, below + (fraction - 0.5 < 1 - fraction ? 1 : 0));
  const resolution = whole / options.tileSize / 2 ** view.zoom;
  const x = (view.center[0] / 360) * whole;
  const latitude = Math.max(-85.0511, Math.min(85.0511, view.center[1])) * (Math.PI / 180);
  const y = (Math.log(Math.tan(Math.PI / 4 + latitude / 2)) / (2 * Math.PI)) * whole;
  const halfWidth = (map.clientWidth / 2) * resolution;
  const halfHeight = (map.clientHeight / 2) * resolution;
  const span = whole / 2 ** z;
  const last = 2 ** z - 1;
  // Columns and rows from the west and north edges; at the east and south edges the last one the
  // view touches, not the next (written out, not as helpers: this runs as inline source, see above).
  const west = Math.max(0, Math.floor((x - halfWidth + whole / 2) / span));
  const east = Math.min(last, Math.ceil((x + halfWidth + whole / 2) / span) - 1);
  const north = Math.max(0, Math.floor((whole / 2 - y - halfHeight) / span));
  const south = Math.min(last, Math.ceil((whole / 2 - y + halfHeight) / span) - 1);
  // Nearest the view's centre first, as OpenLayers' tile queue orders its own requests: over HTTP/1.1
  // the browser sends six at a time per host, and a city's densest tiles (the slowest to build) are
  // usually those at its centre, so they start building first.
  const centreX = (x + whole / 2) / span - 0.5;
  const centreY = (whole / 2 - y) / span - 0.5;
  const tiles: [number, number, number][] = [];
  for (let tileX = west; tileX <= east; tileX++) {
    for (let tileY = north; tileY <= south; tileY++) tiles.push([tileX, tileY, (tileX - centreX) ** 2 + (tileY - centreY) ** 2]);
  }
  tiles.sort((a, b) => a[2] - b[2]);
  const urls: string[] = [];
  for (const [tileX, tileY] of tiles) {
    const link = document.createElement('link');
    link.rel = 'preload';
    link.as = 'fetch';
    // CORS without credentials: the request mode of OpenLayers' tile fetch, so it is the one reused.
    link.crossOrigin = 'anonymous';
    link.href = `${options.apiUrl}/api/tiles/${z}/${tileX}/${tileY}.mvt`;
    document.head.append(link);
    urls.push(link.href);
  }
  return urls;
}

/** The inline script's source per map element and API URL: the same for every request, so written once. */
const preloadScripts = new Map<string, string>();

/**
 * The map page's inline script: the first view from the page's own query string, then its overview
 * tiles preloaded. Both functions run as their own source text, so they may use nothing outside
 * themselves; `<` is escaped because the text ends up inside a `<script>` element.
 */
export function preloadScript(mapId: string, apiUrl: string): string {
  const key = JSON.stringify([mapId, apiUrl]);
  let script = preloadScripts.get(key);
  if (script === undefined) {
    const options: OverviewPreload = { apiUrl, mapId, tileSize: OVERVIEW_TILE_SIZE, belowZoom: GEOJSON_MIN_ZOOM };
    script = `(${preloadOverviewTiles.toString()})((${firstView.toString()})(location.search), ${JSON.stringify(options).replace(/</g, '\\u003c')});`;
    preloadScripts.set(key, script);
  }
  return script;
}
