/**
 * The one module that knows OpenLayers. Pages and islands talk to the map through MapHandle and
 * EditorHandle only, so a later switch of map library touches this file alone.
 *
 * Projections: the API speaks EPSG:4326 (lon/lat); the map draws in Web Mercator (EPSG:3857). All
 * conversions happen here.
 */
import 'ol/ol.css';
import OlMap from 'ol/Map.js';
import View from 'ol/View.js';
import OlFeature from 'ol/Feature.js';
import TileLayer from 'ol/layer/Tile.js';
import VectorLayer from 'ol/layer/Vector.js';
import VectorImageLayer from 'ol/layer/VectorImage.js';
import VectorTileLayer from 'ol/layer/VectorTile.js';
import ImageTileSource from 'ol/source/ImageTile.js';
import TileWMS from 'ol/source/TileWMS.js';
import VectorSource from 'ol/source/Vector.js';
import VectorTileSource from 'ol/source/VectorTile.js';
import Cluster from 'ol/source/Cluster.js';
import GeoJSON from 'ol/format/GeoJSON.js';
import MVT from 'ol/format/MVT.js';
import { Circle as CircleStyle, Fill, Stroke, Style, Text } from 'ol/style.js';
import { Draw, Modify, Snap, Translate } from 'ol/interaction.js';
import { fromLonLat, toLonLat, transformExtent } from 'ol/proj.js';
import { boundingExtent, containsExtent, createEmpty, extend, isEmpty } from 'ol/extent.js';
import Point from 'ol/geom/Point.js';
import CircleGeometry from 'ol/geom/Circle.js';
import Polygon from 'ol/geom/Polygon.js';
import MultiPolygon from 'ol/geom/MultiPolygon.js';
import type { Geometry as OlGeometry } from 'ol/geom.js';
import type { FeatureLike } from 'ol/Feature.js';
import type { Geometry } from '../../../shared/features/schema.js';
import TileState from 'ol/TileState.js';
import type VectorTile from 'ol/VectorTile.js';
import type RenderFeature from 'ol/render/Feature.js';
import { KATEGORIE_COLOURS } from './colours.js';
import { createTileDecoder } from './tile-decoder.js';
import { drawOverviewTile, type OverviewFilter, type OverviewPalette, type OverviewTile } from './overview-tiles.js';
import { DEFAULT_VIEW, GEOJSON_MIN_ZOOM, OVERVIEW_TILE_SIZE } from './first-view.js';
import { keepFeatures, storedFeaturesIn } from './offline/outbox.js';
import type { ClientConfig, Feature } from './types.js';
import type { Basemap } from '../basemaps.js';
import LayerGroup from 'ol/layer/Group.js';
import { createBackground, type OfflineTiles } from './background.js';

export type { OfflineTiles };

export { KATEGORIE_COLOURS };

export { GEOJSON_MIN_ZOOM };
/** Points are clustered below this zoom. */
const CLUSTER_MAX_ZOOM = 15;
// One list page: a view holding more is drawn from tiles. Small enough that loading one page (parse and
// add) stays a short task while panning, large enough for a neighbourhood at editing zooms.
const PAGE_SIZE = 1000;

const FALLBACK_COLOUR = '#37474f';
/** The overview tiles' bytes kept for redrawing under a new filter (lib/map.ts overviewHeld). */
const OVERVIEW_HELD_BYTES = 32 * 1024 * 1024;
/**
 * An image tile source whose tiles can all be drawn again (the overview, after a new filter). Not
 * refresh(): OpenLayers 10.11's tile layer renderer keeps its tiles through a refresh() (it compares
 * the source's key with one it never records). A new key is a new cache key for every tile, so each
 * tile in view is loaded, and drawn, again.
 */
class RedrawnImageTileSource extends ImageTileSource {
  private redraws = 0;
  redraw(): void {
    this.setKey(`redraw-${++this.redraws}`);
  }
}

/** A drawn overview tile: what it holds, its bytes, and the source key it was drawn under. */
interface HeldOverviewTile extends OverviewTile {
  bytes: Uint8Array;
  /** The overview source's key when drawn: another key means a redraw (RedrawnImageTileSource). */
  drawnUnder: string;
}

/** The map page's search and filters: a feature is drawn when it passes each one given. */
export interface FeatureFilter {
  /** A part of the name, in any case. */
  name?: string;
  kategorie?: string;
  status?: string;
}
/**
 * How long the search by name waits for the next keystroke: below GEOJSON_MIN_ZOOM each search asks
 * the API for the view's tiles filtered by name (overview tiles hold no names), and a search of one
 * letter would have it build nearly the whole view's tiles for nothing.
 */
const SEARCH_SETTLE_MS = 250;
/**
 * The features' colours and measures (CSS pixels), read by the OpenLayers styles below and by the
 * overview's canvas drawing (lib/overview-tiles.ts), so both draw a feature alike.
 */
const FEATURE_STYLE: OverviewPalette = {
  colour: (kategorie) => KATEGORIE_COLOURS[String(kategorie)] ?? FALLBACK_COLOUR,
  areaFill: (colour) => `${colour}40`,
  areaOutline: 2,
  lineWidth: 3,
  pointRadius: 6,
  pointOutline: 2,
  pointOutlineColour: '#fff',
};

const format = new GeoJSON({ dataProjection: 'EPSG:4326', featureProjection: 'EPSG:3857' });

export type Bbox = [number, number, number, number];
export interface ViewState {
  bbox: Bbox;
  zoom: number;
  center: [number, number];
}

export interface MapHandle {
  /** Called after every pan or zoom (and once at start). */
  onViewChange(listener: (view: ViewState) => void): void;
  /** Called when a feature is clicked or chosen; undefined when the click hit nothing. */
  onSelect(listener: (id: string | undefined) => void): void;
  /** Adds features; one already present (same id) is replaced, never duplicated. Returns how many are held. */
  upsert(features: Feature[]): number;
  /**
   * Only features passing the filter are drawn (GeoJSON and tiles); a new search by name takes
   * effect once typing pauses (SEARCH_SETTLE_MS), kategorie and status at once.
   */
  setFilter(filter: FeatureFilter): void;
  /** Loads the visible bbox from the API on every view change, following next links. */
  loadFromApi(options: { onProgress?: (held: number, loading: boolean) => void }): void;
  /** The features held, for tests and the list beside the map. */
  size(): number;
  fit(geometries: Geometry[]): void;
  /** Flies to a geometry (a search result): centred, at an editing zoom for a point. */
  flyTo(geometry: Geometry): void;
  /** Flies to a lon/lat (a place, the device's location) and marks it, with its accuracy in metres when known. */
  showLocation(lon: number, lat: number, options?: { accuracy?: number; zoom?: number; extent?: Bbox }): void;
  setWmsVisible(visible: boolean): void;
  /** Shows another configured background map (config/basemaps.yaml), by id. */
  setBasemap(id: string): void;
  /** The background map shown now. */
  basemap(): Basemap;
  /** Called with false when the background map's tiles cannot be loaded (and true once they can). */
  onBasemapReachable(listener: (reachable: boolean) => void): void;
  /** The background map's tiles of the view for offline use, from the view's zoom down to at most maxTiles. */
  offlineTiles(maxTiles: number): OfflineTiles;
  /** The view's lon/lat box. */
  viewBbox(): Bbox;
  /** Two geometries drawn over each other: before (red, dashed) and after (blue). */
  showComparison(before: Geometry | undefined, after: Geometry | undefined): void;
  /** A feature (blue) and its conflation candidates (orange, numbered 1…; the chosen index green). */
  showCandidates(feature: Geometry | undefined, candidates: Geometry[], chosen?: number): void;
  /** Promise resolved after the next completed render. */
  rendered(): Promise<void>;
  readonly olMap: unknown;
}

/** The sources holding the loaded features of a map, for the editor's snapping to other features. */
const contextSources = new WeakMap<MapHandle, Array<VectorSource<OlFeature>>>();

const styleCache = new Map<string, Style>();
function styleFor(kategorie: unknown, kind: 'point' | 'line' | 'area'): Style {
  const colour = FEATURE_STYLE.colour(kategorie);
  const key = `${colour}|${kind}`;
  let style = styleCache.get(key);
  if (!style) {
    style =
      kind === 'point'
        ? new Style({ image: new CircleStyle({ radius: FEATURE_STYLE.pointRadius, fill: new Fill({ color: colour }), stroke: new Stroke({ color: FEATURE_STYLE.pointOutlineColour, width: FEATURE_STYLE.pointOutline }) }) })
        : new Style({ stroke: new Stroke({ color: colour, width: kind === 'line' ? FEATURE_STYLE.lineWidth : FEATURE_STYLE.areaOutline }), fill: kind === 'area' ? new Fill({ color: FEATURE_STYLE.areaFill(colour) }) : undefined });
    styleCache.set(key, style);
  }
  return style;
}

const outlineStyles = new Map<string, Style>();
/**
 * The tile layer's style of an area: styleFor's, without the fill when the area is no wider than its
 * outline at this resolution. The outline is drawn centred on the edge, so it reaches
 * FEATURE_STYLE.areaOutline / 2 inwards from every edge and covers all of such an area with opaque colour:
 * the translucent fill under it cannot be seen, and skipping it halves the canvas work of the views
 * where tiles hold tens of thousands of areas smaller than a pixel (the whole city at zoom 7).
 */
function tileAreaStyle(feature: FeatureLike, resolution: number): Style {
  const kategorie = feature.get('kategorie');
  const [minX, minY, maxX, maxY] = feature.getGeometry()!.getExtent();
  if (Math.min(maxX! - minX!, maxY! - minY!) / resolution > FEATURE_STYLE.areaOutline) return styleFor(kategorie, 'area');
  const colour = FEATURE_STYLE.colour(kategorie);
  let style = outlineStyles.get(colour);
  if (!style) {
    // One zIndex per colour: OpenLayers keeps one instruction list per zIndex, so a tile's outlines
    // of one colour are drawn one after the other with no change of canvas style in between (in tile
    // order the kategorien alternate, and each change of stroke style costs a canvas state change).
    style = new Style({ stroke: new Stroke({ color: colour, width: FEATURE_STYLE.areaOutline }), zIndex: outlineStyles.size });
    outlineStyles.set(colour, style);
  }
  return style;
}

function kindOf(type: string): 'point' | 'line' | 'area' {
  if (type.includes('Point')) return 'point';
  if (type.includes('Line')) return 'line';
  return 'area';
}

const clusterStyles = new Map<number, Style>();
function clusterStyle(feature: FeatureLike): Style | undefined {
  const members = feature.get('features') as OlFeature[] | undefined;
  if (!members || members.length === 0) return undefined;
  if (members.length === 1) return styleFor(members[0]!.get('kategorie'), 'point');
  const size = members.length;
  let style = clusterStyles.get(size);
  if (!style) {
    style = new Style({
      image: new CircleStyle({ radius: Math.min(22, 9 + Math.log2(size) * 2), fill: new Fill({ color: '#12324fcc' }), stroke: new Stroke({ color: '#fff', width: 2 }) }),
      text: new Text({ text: String(size), fill: new Fill({ color: '#fff' }), font: 'bold 12px system-ui, sans-serif' }),
    });
    clusterStyles.set(size, style);
  }
  return style;
}

export function readClientConfig(): ClientConfig {
  const element = document.getElementById('fp-config');
  return JSON.parse(element?.textContent ?? '{}') as ClientConfig;
}

export function apiHeaders(config: ClientConfig, extra: Record<string, string> = {}): Record<string, string> {
  return config.token ? { authorization: `Bearer ${config.token}`, ...extra } : extra;
}

export function createMap(target: HTMLElement, options: { config: ClientConfig; center?: [number, number]; zoom?: number; interactive?: boolean }): MapHandle {
  const { config } = options;
  // The background map: a group holding the chosen entry's layer (lib/basemaps.ts makes it when first chosen).
  const basemap = new LayerGroup();
  const background = createBackground(basemap, config.basemaps, target);
  const wms = config.wms
    ? new TileLayer({ visible: false, source: new TileWMS({ url: config.wms.url, params: { LAYERS: config.wms.layers, TILED: true }, crossOrigin: 'anonymous' }) })
    : undefined;

  /** The search and filters, for GeoJSON and the dense tiles; undefined while there is none. */
  let filter: OverviewFilter;
  /**
   * The overview's share of them: kategorie and status, which its tiles hold (undefined: it decodes
   * no property values). Its tiles hold no names: a search by name asks the API for tiles filtered
   * by it (`?name=`, lib/map.ts overviewSource), lower case; '' when none.
   */
  let overviewFilter: OverviewFilter;
  let nameQuery = '';
  const held = new globalThis.Map<string, OlFeature>();
  const shapes = new VectorSource<OlFeature>();
  const points = new VectorSource<OlFeature>();
  const cluster = new Cluster({ source: points, distance: 40, minDistance: 8 });
  const visible = (feature: FeatureLike) => !filter || filter(feature.getProperties());

  // Dense views from zoom 12 on (below it, the overview further down draws the same tiles). Off until
  // loadFromApi decides that a view is drawn from tiles. Tiles from zoom 16 on are the zoom-16 tiles
  // scaled up: a denser view than one list page at such a zoom is rare, and no tile is re-fetched.
  // Between two zooms the nearer tile zoom is used (zDirection 0; OpenLayers' default for vector tiles
  // takes the coarser one), and tiles are 256 pixels (OpenLayers' default is 512): a dense view is
  // split into more, smaller tiles, which the API builds in parallel and the map parses and draws one
  // by one, instead of one large tile holding most of the features and everything waiting on it.
  // On devices with cores to spare, tiles are fetched and decoded in a worker (lib/tile-decoder.ts)
  // with the same MVT reader, so the main thread only builds and draws; elsewhere the source reads
  // them itself.
  const decode = createTileDecoder();
  const tileSource = new VectorTileSource({
    format: new MVT({ idProperty: 'id' }),
    url: `${config.apiUrl}/api/tiles/{z}/{x}/{y}.mvt`,
    maxZoom: 16,
    tileSize: 256,
    zDirection: 0,
    ...(decode
      ? {
          tileLoadFunction: (tile, url) => {
            const vectorTile = tile as VectorTile<RenderFeature>;
            vectorTile.setLoader((extent) => {
              decode(url, extent).then(
                (features) => {
                  // A tile dropped from the cache while it was loading is not revived.
                  if (vectorTile.getState() === TileState.LOADING) vectorTile.setFeatures(features);
                },
                () => {
                  if (vectorTile.getState() === TileState.LOADING) vectorTile.onError();
                },
              );
            });
          },
        }
      : {}),
  });
  const tiles = new VectorTileLayer({
    visible: false,
    source: tileSource,
    style: (feature, resolution) => {
      if (!visible(feature)) return undefined;
      const kind = kindOf(feature.getGeometry()?.getType() ?? '');
      return kind === 'area' ? tileAreaStyle(feature, resolution) : styleFor(feature.get('kategorie'), kind);
    },
  });
  // The overview, below GEOJSON_MIN_ZOOM: the same vector tiles, each drawn onto one canvas by
  // lib/overview-tiles.ts instead of becoming OpenLayers features (that module says why). What each
  // drawn tile holds is kept by its path (z/x/y and the search) for "features loaded"
  // (overviewCount), with the tile's bytes: a new kategorie or status filter redraws the view's tiles
  // from those bytes, with no request (each change used to revalidate every tile of the view with the
  // API); a new search by name asks for the view's tiles filtered by it (overview tiles hold no
  // names), and clearing it redraws the whole ones from their bytes. The nearest tile zoom again: the
  // whole city at zoom 6.8 is four dense zoom-7 tiles of about 25 000 features, which the API builds
  // in parallel, instead of zoom-6 tiles with one of 57 000.
  const overviewHeld = new globalThis.Map<string, HeldOverviewTile>();
  /**
   * A tile's path under /api/tiles/ with the current search: also the key it is held under, as a
   * search's tiles are other tiles than the whole ones.
   */
  const overviewTilePath = (z: number, x: number, y: number) => `${z}/${x}/${y}.mvt${nameQuery ? `?name=${encodeURIComponent(nameQuery)}` : ''}`;
  let overviewHeldBytes = 0;
  const holdOverviewTile = (key: string, tile: HeldOverviewTile) => {
    const previous = overviewHeld.get(key);
    if (previous) overviewHeldBytes -= previous.bytes.length;
    overviewHeld.delete(key);
    overviewHeld.set(key, tile);
    overviewHeldBytes += tile.bytes.length;
    // Least recently drawn first out; a view needs far less (the whole city is 20 tiles, 6.5 MB).
    for (const [oldest, held] of overviewHeld) {
      if (overviewHeldBytes <= OVERVIEW_HELD_BYTES || oldest === key) break;
      overviewHeld.delete(oldest);
      overviewHeldBytes -= held.bytes.length;
    }
  };
  const overviewSource = new RedrawnImageTileSource({
    tileSize: OVERVIEW_TILE_SIZE,
    maxZoom: GEOJSON_MIN_ZOOM,
    zDirection: 0,
    // Drawn fully as it arrives: OpenLayers' default 250 ms fade-in delayed the whole city's last
    // complete frame by that much, and redraws every layer each frame while a tile fades.
    transition: 0,
    loader: async (z, x, y, { signal }) => {
      const key = overviewTilePath(z, x, y);
      const drawnUnder = overviewSource.getKey();
      const held = overviewHeld.get(key);
      let bytes: Uint8Array;
      // Loaded again by a redraw (a new filter): the bytes already here. Otherwise (first view, or the
      // tile left OpenLayers' cache) from the API, which answers from its cache while it is current.
      if (held && held.drawnUnder !== drawnUnder) bytes = held.bytes;
      else {
        // No credentials and no headers (tiles are the same for everyone): the request mode of the
        // map page's preload links (lib/first-view.ts), so the first view's tiles come from those.
        const response = await fetch(`${config.apiUrl}/api/tiles/${key}`, { signal });
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        bytes = new Uint8Array(await response.arrayBuffer());
      }
      const pixelRatio = Math.min(2, globalThis.devicePixelRatio || 1);
      const canvas = document.createElement('canvas');
      canvas.width = canvas.height = OVERVIEW_TILE_SIZE * pixelRatio;
      holdOverviewTile(key, { ...drawOverviewTile(bytes, canvas.getContext('2d')!, canvas.width, pixelRatio, FEATURE_STYLE, overviewFilter), bytes, drawnUnder });
      return canvas;
    },
  });
  const overview = new TileLayer({ visible: false, source: overviewSource });
  /** The features of the overview's tiles that cover `extent`, each counted once (OverviewTile). */
  const overviewCount = (extent: number[], resolution: number): number => {
    const grid = overviewSource.getTileGrid()!;
    let own = 0;
    const shared = new Set<string>();
    grid.forEachTileCoord(extent, grid.getZForResolution(resolution, 0), (coord) => {
      const held = overviewHeld.get(overviewTilePath(...(coord as [number, number, number])));
      if (!held) return;
      own += held.own;
      for (const id of held.shared) shared.add(id);
    });
    return own + shared.size;
  };

  // When the last tile finished loading: "everything in view loaded" for the benchmark and status line.
  let lastTileLoaded = 0;
  let tilesFailed = false;
  for (const source of [tileSource, overviewSource]) {
    source.on('tileloadend', () => {
      lastTileLoaded = performance.now();
    });
    source.on('tileloaderror', () => {
      lastTileLoaded = performance.now();
      tilesFailed = true;
    });
  }
  // Thousands of areas: drawn once into an image that pans and zooms as a whole, instead of replaying
  // every polygon each frame (the longest main-thread task while panning).
  const shapeLayer = new VectorImageLayer({ source: shapes, imageRatio: 1.5, style: (feature) => styleFor(feature.get('kategorie'), kindOf(feature.getGeometry()?.getType() ?? '')) });
  const clusterLayer = new VectorLayer({ source: cluster, style: clusterStyle });
  /** Which draws the features (tiles: the overview below GEOJSON_MIN_ZOOM): only one, or each feature would be drawn twice. */
  const drawFromTiles = (fromTiles: boolean) => {
    const overviewZoom = (map.getView().getZoom() ?? 0) < GEOJSON_MIN_ZOOM;
    overview.setVisible(fromTiles && overviewZoom);
    tiles.setVisible(fromTiles && !overviewZoom);
    shapeLayer.setVisible(!fromTiles);
    clusterLayer.setVisible(!fromTiles);
  };
  /** Whether the features are drawn from tiles now (either tile layer), as drawFromTiles last chose. */
  const drawsFromTiles = () => tiles.getVisible() || overview.getVisible();
  // A located place or the device's location: a dot, and the accuracy as a translucent circle.
  const located = new VectorSource<OlFeature>();
  const locationLayer = new VectorLayer({
    source: located,
    zIndex: 20,
    style: (feature) =>
      feature.get('kind') === 'accuracy'
        ? new Style({ fill: new Fill({ color: '#1565c022' }), stroke: new Stroke({ color: '#1565c0', width: 1 }) })
        : new Style({ image: new CircleStyle({ radius: 8, fill: new Fill({ color: '#1565c0' }), stroke: new Stroke({ color: '#fff', width: 3 }) }) }),
  });
  const comparison = new VectorSource<OlFeature>();
  const comparisonLayer = new VectorLayer({
    source: comparison,
    style: (feature) =>
      feature.get('role') === 'before'
        ? new Style({ stroke: new Stroke({ color: '#c62828', width: 3, lineDash: [8, 6] }), fill: new Fill({ color: '#c6282820' }), image: new CircleStyle({ radius: 7, stroke: new Stroke({ color: '#c62828', width: 3 }) }) })
        : new Style({ stroke: new Stroke({ color: '#1565c0', width: 2 }), fill: new Fill({ color: '#1565c030' }), image: new CircleStyle({ radius: 5, fill: new Fill({ color: '#1565c0' }) }) }),
  });

  const map = new OlMap({
    target,
    layers: [basemap, ...(wms ? [wms] : []), overview, tiles, shapeLayer, clusterLayer, comparisonLayer, locationLayer],
    // Every tile of a view is requested at once (OpenLayers' default is 16, basemap tiles included):
    // otherwise the rest are requested only after a frame, and a frame waits while the main thread
    // parses and draws the dense tiles that came first — the whole city's last requests left 1.5 s
    // after its first. Chromium queues what exceeds its six connections per host off the main thread.
    maxTilesLoading: 64,
    view: new View({ center: fromLonLat(options.center ?? DEFAULT_VIEW.center), zoom: options.zoom ?? DEFAULT_VIEW.zoom, maxZoom: 20 }),
  });
  // The map's own keyboard interactions (arrows pan, +/- zoom) need a focusable viewport.
  target.tabIndex = 0;
  // When the last frame was fully drawn (tiles and features), for the benchmark and tests to wait on.
  map.on('rendercomplete', () => {
    target.dataset.renderedAt = String(performance.now());
  });

  const viewListeners: Array<(view: ViewState) => void> = [];
  const viewState = (): ViewState => {
    const size = map.getSize() ?? [target.clientWidth, target.clientHeight];
    const extent = transformExtent(map.getView().calculateExtent(size), 'EPSG:3857', 'EPSG:4326');
    const clamp = (v: number, limit: number) => Math.max(-limit, Math.min(limit, v));
    const center = toLonLat(map.getView().getCenter() ?? [0, 0]) as [number, number];
    return { bbox: [clamp(extent[0]!, 180), clamp(extent[1]!, 90), clamp(extent[2]!, 180), clamp(extent[3]!, 90)], zoom: map.getView().getZoom() ?? 0, center };
  };
  map.on('moveend', () => {
    const zoom = map.getView().getZoom() ?? 0;
    cluster.setDistance(zoom < CLUSTER_MAX_ZOOM ? 40 : 0);
    const state = viewState();
    for (const listener of viewListeners) listener(state);
  });

  const selectListeners: Array<(id: string | undefined) => void> = [];
  map.on('singleclick', (event) => {
    let id: string | undefined;
    map.forEachFeatureAtPixel(event.pixel, (feature) => {
      const members = feature.get('features') as OlFeature[] | undefined;
      const hit = members && members.length === 1 ? members[0] : members ? undefined : feature;
      if (hit?.getId() !== undefined) {
        id = String(hit.getId());
        return true;
      }
      return false;
    }, { layerFilter: (layer) => layer === shapeLayer || layer === clusterLayer || layer === tiles });
    // The overview has no features to hit: ask the API what lies under the pointer (as a WMS
    // GetFeatureInfo would), within a few pixels.
    if (id === undefined && overview.getVisible()) {
      void featureNear(event.pixel).then((found) => {
        for (const listener of selectListeners) listener(found);
      });
      return;
    }
    for (const listener of selectListeners) listener(id);
  });
  const featureNear = async (pixel: number[]): Promise<string | undefined> => {
    const tolerance = 4;
    const corners = [map.getCoordinateFromPixel([pixel[0]! - tolerance, pixel[1]! + tolerance]), map.getCoordinateFromPixel([pixel[0]! + tolerance, pixel[1]! - tolerance])];
    const bbox = transformExtent(boundingExtent(corners as number[][]), 'EPSG:3857', 'EPSG:4326').map((v) => v.toFixed(7)).join(',');
    const response = await fetch(`${config.apiUrl}/api/features?bbox=${bbox}&limit=1`, { headers: apiHeaders(config, { accept: 'application/geo+json' }), credentials: 'include' }).catch(() => undefined);
    if (!response?.ok) return undefined;
    const page = (await response.json()) as { features: Feature[] };
    return page.features[0]?.id;
  };

  /** Count the features drawn from tiles after the next complete frame (loadFromApi's status line). */
  let awaitingTiles = false;
  /** A new search by name waiting for typing to pause (setFilter). */
  let settling: ReturnType<typeof setTimeout> | undefined;
  const place = (feature: OlFeature) => ((feature.getGeometry()?.getType() ?? '') === 'Point' ? points : shapes);
  const rebuild = () => {
    const keepShapes: OlFeature[] = [];
    const keepPoints: OlFeature[] = [];
    for (const feature of held.values()) if (visible(feature)) (place(feature) === points ? keepPoints : keepShapes).push(feature);
    shapes.clear(true);
    points.clear(true);
    shapes.addFeatures(keepShapes);
    points.addFeatures(keepPoints);
    tiles.changed();
    overviewSource.redraw();
    // What the tiles in view hold under the new filter is counted once they are drawn again.
    if (drawsFromTiles()) awaitingTiles = true;
  };

  const handle: MapHandle = {
    olMap: map,
    onViewChange: (listener) => viewListeners.push(listener),
    onSelect: (listener) => selectListeners.push(listener),
    upsert(features) {
      const fresh: OlFeature[] = [];
      for (const input of features) {
        const previous = held.get(input.id);
        // Panning reloads overlapping areas: a feature already held in the same version is kept as is
        // (parsing and re-adding thousands of them would block the main thread for nothing).
        if (previous && previous.get('version') === input.properties.version) continue;
        const feature = format.readFeature(input) as OlFeature;
        if (previous) place(previous).removeFeature(previous);
        held.set(input.id, feature);
        if (visible(feature)) fresh.push(feature);
      }
      const freshPoints = fresh.filter((f) => place(f) === points);
      if (freshPoints.length) points.addFeatures(freshPoints);
      if (fresh.length > freshPoints.length) shapes.addFeatures(fresh.filter((f) => place(f) === shapes));
      return held.size;
    },
    setFilter(next) {
      const name = next.name?.trim().toLowerCase() ?? '';
      const { kategorie, status } = next;
      const apply = () => {
        const byProperties: OverviewFilter = kategorie || status ? (p) => (!kategorie || p.kategorie === kategorie) && (!status || p.status === status) : undefined;
        nameQuery = name;
        overviewFilter = byProperties;
        filter = name ? (p) => String(p.name ?? '').toLowerCase().includes(name) && (!byProperties || byProperties(p)) : byProperties;
        rebuild();
      };
      clearTimeout(settling);
      if (name === nameQuery) apply();
      else settling = setTimeout(apply, SEARCH_SETTLE_MS);
    },
    size: () => held.size,
    loadFromApi({ onProgress }) {
      // Extents already loaded completely: a view inside one of them needs no request (no duplicates
      // either way — upsert keys by id).
      const loaded: number[][] = [];
      let controller: AbortController | undefined;
      /** Set while a view drawn from tiles waits for its tiles; the next complete frame reports it. */
      const done = (count: number) => {
        target.dataset.loadedAt = String(performance.now());
        onProgress?.(count, false);
      };
      const fromTiles = () => {
        drawFromTiles(true);
        awaitingTiles = true;
        onProgress?.(held.size, true);
        map.render(); // a frame, so a rendercomplete follows even when every tile is already held
      };
      map.on('rendercomplete', () => {
        if (!awaitingTiles || !drawsFromTiles()) return;
        awaitingTiles = false;
        // The features in view, counted once each (a feature crossing tile borders is in several tiles).
        const extent = map.getView().calculateExtent(map.getSize());
        let count = 0;
        if (overview.getVisible()) count = overviewCount(extent, map.getView().getResolution()!);
        else {
          const ids = new Set<unknown>();
          for (const feature of tiles.getFeaturesInExtent(extent)) if (visible(feature)) ids.add(feature.getId());
          count = ids.size;
        }
        // Loaded when the last tile arrived, which is before this frame was drawn.
        target.dataset.loadedAt = String(lastTileLoaded || Number(target.dataset.renderedAt ?? 0));
        onProgress?.(count, false);
      });
      let lastView = '';
      const load = async (state: ViewState) => {
        // The first frame's moveend repeats the view loaded at start: keep that load going.
        const view = `${state.zoom}|${state.bbox.join(',')}`;
        if (view === lastView) return;
        lastView = view;
        controller?.abort();
        const mine = new AbortController();
        controller = mine;
        if (state.zoom < GEOJSON_MIN_ZOOM && !tilesFailed) {
          fromTiles();
          return;
        }
        awaitingTiles = false;
        if (loaded.some((extent) => containsExtent(extent, state.bbox))) {
          drawFromTiles(false);
          done(held.size);
          return;
        }
        onProgress?.(held.size, true);
        // While the count is under way, the map keeps drawing the way it drew the last view (tiles at
        // the start): a dense view's tiles are then already loading when the answer says "tiles",
        // and a sparse view's GeoJSON replaces them as soon as its page is in.
        if (tiles.getVisible()) map.render();
        const bbox = state.bbox.map((v) => v.toFixed(6)).join(',');
        let url: string | undefined = `${config.apiUrl}/api/features?bbox=${bbox}&limit=${PAGE_SIZE}`;
        try {
          // More than one list page in view: tiles draw it at a fraction of the cost of GeoJSON pages
          // (bytes, parsing, and features to hold); at most one page: GeoJSON, selectable and editable.
          if (!tilesFailed) {
            const response = await fetch(`${config.apiUrl}/api/tiles/count?bbox=${bbox}&atMost=${PAGE_SIZE}`, { headers: apiHeaders(config), signal: mine.signal, credentials: 'include' });
            // No answer (an API without the endpoint): GeoJSON pages, as before tiles existed.
            const density = response.ok ? ((await response.json()) as { exceeds: boolean; tiles: boolean }) : { exceeds: false, tiles: true };
            if (!density.tiles) tilesFailed = true;
            else if (density.exceeds) {
              fromTiles();
              return;
            }
          }
          while (url) {
            const response = await fetch(url, { headers: apiHeaders(config, { accept: 'application/geo+json' }), signal: mine.signal, credentials: 'include' });
            if (!response.ok) throw new Error(`HTTP ${response.status}`);
            const page = (await response.json()) as { features: Feature[]; links: Array<{ rel: string; href: string }> };
            handle.upsert(page.features);
            // Viewed areas stay available offline (lib/offline, docs/web.md "Offline editing").
            void keepFeatures(page.features);
            const next = page.links.find((link) => link.rel === 'next')?.href;
            url = next ? new URL(next, config.apiUrl).toString() : undefined;
          }
          drawFromTiles(false);
          loaded.push(state.bbox);
          done(held.size);
        } catch (error) {
          if ((error as Error).name === 'AbortError') return;
          // No network: what this browser has kept of the area, including edits not yet synced.
          drawFromTiles(false);
          handle.upsert(await storedFeaturesIn(state.bbox).catch(() => []));
          onProgress?.(held.size, false);
        }
      };
      handle.onViewChange((state) => void load(state));
      if (!tilesFailed) drawFromTiles(true);
      if (map.getSize()) void load(viewState());
    },
    fit(geometries) {
      const extent = createEmpty();
      for (const geometry of geometries) extend(extent, (format.readGeometry(geometry) as OlGeometry).getExtent());
      if (isEmpty(extent)) return;
      map.getView().fit(extent, { padding: [40, 40, 40, 40], maxZoom: 18 });
    },
    flyTo(geometry) {
      const extent = (format.readGeometry(geometry) as OlGeometry).getExtent();
      map.getView().fit(extent, { padding: [60, 60, 60, 60], maxZoom: 18, duration: 400 });
    },
    showLocation(lon, lat, { accuracy, zoom = 17, extent } = {}) {
      const at = fromLonLat([lon, lat]);
      located.clear();
      located.addFeature(new OlFeature({ geometry: new Point(at), kind: 'centre' }));
      // The accuracy as a circle on the ground: metres in Web Mercator grow with 1 / cos(latitude).
      if (accuracy) located.addFeature(new OlFeature({ geometry: new CircleGeometry(at, accuracy / Math.cos((lat * Math.PI) / 180)), kind: 'accuracy' }));
      if (extent) map.getView().fit(transformExtent(extent, 'EPSG:4326', 'EPSG:3857'), { padding: [40, 40, 40, 40], maxZoom: 18, duration: 400 });
      else map.getView().animate({ center: at, zoom: Math.max(map.getView().getZoom() ?? zoom, zoom), duration: 400 });
    },
    setWmsVisible(isVisible) {
      wms?.setVisible(isVisible);
    },
    showComparison(before, after) {
      comparison.clear();
      const shown: Geometry[] = [];
      for (const [role, geometry] of [['before', before], ['after', after]] as const) {
        if (!geometry) continue;
        comparison.addFeature(new OlFeature({ geometry: format.readGeometry(geometry) as OlGeometry, role }));
        shown.push(geometry);
      }
      handle.fit(shown);
    },
    showCandidates(feature, candidates, chosen) {
      handle.showComparison(undefined, feature);
      for (const [index, geometry] of candidates.entries()) {
        const colour = index === chosen ? '#2e7d32' : '#e65100';
        const label = new Text({ text: String(index + 1), font: 'bold 13px system-ui, sans-serif', fill: new Fill({ color: '#fff' }), backgroundFill: new Fill({ color: colour }), padding: [1, 4, 1, 4], offsetY: -16, offsetX: (index - (candidates.length - 1) / 2) * 22 }); // side by side where candidates overlap
        const candidate = new OlFeature({ geometry: format.readGeometry(geometry) as OlGeometry, role: 'candidate' });
        candidate.setStyle(new Style({ stroke: new Stroke({ color: colour, width: index === chosen ? 5 : 3, lineDash: index === chosen ? undefined : [6, 4] }), fill: new Fill({ color: `${colour}30` }), image: new CircleStyle({ radius: index === chosen ? 9 : 7, stroke: new Stroke({ color: colour, width: 3 }), fill: new Fill({ color: '#ffffffaa' }) }), text: label, zIndex: index === chosen ? 2 : 1 }));
        comparison.addFeature(candidate);
      }
      handle.fit([...(feature ? [feature] : []), ...candidates]);
    },
    rendered: () => new Promise((resolve) => map.once('rendercomplete', () => resolve())),
    setBasemap: (id) => background.choose(id),
    basemap: () => background.current(),
    onBasemapReachable: (listener) => background.onReachable(listener),
    offlineTiles(maxTiles) {
      const view = map.getView();
      return background.tilesFor(view.calculateExtent(map.getSize()), Math.round(view.getZoom() ?? 13), maxTiles);
    },
    viewBbox() {
      return transformExtent(map.getView().calculateExtent(map.getSize()), 'EPSG:3857', 'EPSG:4326') as Bbox;
    },
  };
  contextSources.set(handle, [shapes, points]);
  return handle;
}

export type EditTool = 'draw' | 'modify' | 'translate' | 'hole' | 'part';
export type GeometryType = Geometry['type'];

/** What the editor's undo and redo can do now, and whether a shape is being drawn. */
export interface EditorState {
  canUndo: boolean;
  canRedo: boolean;
  drawing: boolean;
  /** A vertex is selected (Edit vertices: clicked or just moved), so Delete can remove it. */
  vertexSelected: boolean;
}

export interface EditorHandle {
  setType(type: GeometryType): void;
  setTool(tool: EditTool): void;
  /** A point from the keyboard or the device's location. */
  setPoint(lon: number, lat: number): void;
  geometry(): Geometry | undefined;
  setGeometry(geometry: Geometry | undefined): void;
  clear(): void;
  /** While drawing: removes the last vertex. Otherwise: the geometry as before the last edit. */
  undo(): void;
  redo(): void;
  /** Esc: the shape being drawn is dropped; what was there before stays. */
  cancelDrawing(): boolean;
  /** The keyboard's "click": a vertex (or the point) at the map's centre; editing vertices, selects the one there. */
  placeAtCentre(): void;
  /** Enter: the line or polygon being drawn is finished. */
  finishDrawing(): boolean;
  /** Delete/Backspace: the selected vertex goes (a line keeps two, a ring three). */
  removeSelectedVertex(): boolean;
  onState(listener: (state: EditorState) => void): void;
}

/** How near (CSS pixels) a click must be to a vertex to select it, as OpenLayers' Modify snaps. */
const VERTEX_TOLERANCE = 10;
/** The keyboard's reach: the vertex nearest the map centre within this many pixels. */
const KEYBOARD_VERTEX_TOLERANCE = 60;

/**
 * Editing one feature's geometry: Draw, then Modify and Snap (to this feature and the others on the
 * map) and Translate — added in that order, as OpenLayers' draw-and-modify example does. Holes are
 * drawn as polygons and cut into the polygon (or MultiPolygon part) that contains them; parts are
 * drawn as polygons and appended to the MultiPolygon.
 *
 * History (iD's core/history in small): every finished edit — a drawn shape, hole or part, a moved or
 * removed vertex, a translation, a cleared geometry, a point from the keyboard — is one entry holding a
 * copy of the geometry; undo and redo step through them. While a shape is being drawn, undo removes
 * its last vertex instead.
 */
export function createEditor(
  handle: MapHandle,
  options: { type: GeometryType; initial?: Geometry; onChange: (geometry: Geometry | undefined) => void; onTypeChange?: (type: GeometryType) => void },
): EditorHandle {
  const map = handle.olMap as OlMap;
  const source = new VectorSource<OlFeature>();
  const layer = new VectorLayer({
    source,
    style: new Style({
      stroke: new Stroke({ color: '#e65100', width: 3 }),
      fill: new Fill({ color: '#e6510033' }),
      image: new CircleStyle({ radius: 7, fill: new Fill({ color: '#e65100' }), stroke: new Stroke({ color: '#fff', width: 2 }) }),
    }),
  });
  map.addLayer(layer);
  // The selected vertex, drawn as a ring around it.
  const selection = new VectorSource<OlFeature>();
  map.addLayer(new VectorLayer({ source: selection, zIndex: 10, style: new Style({ image: new CircleStyle({ radius: 10, stroke: new Stroke({ color: '#12324f', width: 3 }) }) }) }));
  let type = options.type;
  let tool: EditTool = 'draw';
  let interactions: Array<Draw | Modify | Snap | Translate> = [];
  let draw: Draw | undefined;
  let modify: Modify | undefined;
  let drawing = false;
  let selected: number[] | undefined;

  const current = (): OlFeature | undefined => source.getFeatures()[0];
  const emit = () => options.onChange(editor.geometry());
  source.on('changefeature', emit);

  // The history: `present` is the geometry now; `past` and `future` what undo and redo bring back.
  let present: OlGeometry | undefined = options.initial ? (format.readGeometry(options.initial) as OlGeometry) : undefined;
  const past: Array<OlGeometry | undefined> = [];
  const future: Array<OlGeometry | undefined> = [];
  const stateListeners: Array<(state: EditorState) => void> = [];
  const notify = () => {
    const state = { canUndo: drawing || past.length > 0, canRedo: !drawing && future.length > 0, drawing, vertexSelected: selected !== undefined };
    for (const listener of stateListeners) listener(state);
  };
  const select = (coordinate: number[] | undefined) => {
    selected = coordinate;
    selection.clear();
    if (coordinate) selection.addFeature(new OlFeature(new Point(coordinate)));
    notify();
  };
  /** Records the geometry as it is now as one edit. */
  const commit = () => {
    past.push(present?.clone());
    present = current()?.getGeometry()?.clone();
    future.length = 0;
    notify();
  };
  const restore = (geometry: OlGeometry | undefined) => {
    select(undefined);
    source.clear();
    if (geometry) {
      source.addFeature(new OlFeature({ geometry: geometry.clone() }));
      const restoredType = geometry.getType() as GeometryType;
      if (restoredType !== type) {
        type = restoredType;
        options.onTypeChange?.(type);
        install(tool);
      }
    }
    emit();
    notify();
  };

  const setOlGeometry = (geometry: OlGeometry | undefined) => {
    source.clear();
    if (geometry) source.addFeature(new OlFeature({ geometry }));
    emit();
    commit();
  };

  const drawType = (): 'Point' | 'LineString' | 'Polygon' => (type === 'MultiPolygon' ? 'Polygon' : type);

  const onDrawn = (drawnWith: EditTool, drawn: OlGeometry) => {
    const existing = current()?.getGeometry();
    if (drawnWith === 'hole' && drawn instanceof Polygon && existing) {
      const ring = drawn.getLinearRing(0)!.getCoordinates();
      if (existing instanceof Polygon) {
        existing.appendLinearRing(drawn.getLinearRing(0)!);
      } else if (existing instanceof MultiPolygon) {
        const coordinates = existing.getCoordinates();
        const partIndex = existing.getPolygons().findIndex((part) => part.intersectsCoordinate(ring[0]!));
        coordinates[partIndex === -1 ? 0 : partIndex]!.push(ring);
        existing.setCoordinates(coordinates);
      }
      emit();
      commit();
      return;
    }
    if (type === 'MultiPolygon' && drawn instanceof Polygon) {
      if (drawnWith === 'part' && existing instanceof MultiPolygon) {
        existing.appendPolygon(drawn);
        emit();
        commit();
        return;
      }
      setOlGeometry(new MultiPolygon([drawn.getCoordinates()]));
      return;
    }
    setOlGeometry(drawn);
  };

  /** The vertex of the geometry nearest to a map coordinate, within VERTEX_TOLERANCE pixels. */
  const vertexNear = (coordinate: number[], tolerance = VERTEX_TOLERANCE): number[] | undefined => {
    const geometry = current()?.getGeometry();
    if (!geometry || geometry instanceof Point) return undefined;
    const pixel = map.getPixelFromCoordinate(coordinate);
    let best: number[] | undefined;
    let bestDistance = tolerance;
    const walk = (value: unknown) => {
      if (!Array.isArray(value)) return;
      if (typeof value[0] === 'number') {
        const at = map.getPixelFromCoordinate(value as number[]);
        const distance = Math.hypot(at[0]! - pixel[0]!, at[1]! - pixel[1]!);
        if (distance <= bestDistance) {
          bestDistance = distance;
          best = value as number[];
        }
      } else value.forEach(walk);
    };
    walk((geometry as Polygon).getCoordinates());
    return best;
  };

  const install = (next: EditTool) => {
    tool = next;
    if (drawing) draw?.abortDrawing();
    drawing = false;
    select(undefined);
    for (const interaction of interactions) map.removeInteraction(interaction);
    interactions = [];
    draw = undefined;
    modify = undefined;
    if (next === 'draw' || next === 'hole' || next === 'part') {
      draw = new Draw({ type: next === 'draw' ? drawType() : 'Polygon' });
      draw.on('drawstart', () => {
        drawing = true;
        notify();
      });
      draw.on('drawabort', () => {
        drawing = false;
        notify();
      });
      draw.on('drawend', (event) => {
        drawing = false;
        onDrawn(next, event.feature.getGeometry() as OlGeometry);
      });
      interactions.push(draw);
    } else if (next === 'modify') {
      // Vertices are removed with Delete or Backspace after selecting them (not by a hidden Alt+click).
      modify = new Modify({ source, deleteCondition: () => false });
      modify.on('modifyend', (event) => {
        commit();
        // The vertex just dragged stays selected, so Delete removes it.
        const coordinate = event.mapBrowserEvent?.coordinate;
        if (coordinate) select(vertexNear(coordinate));
      });
      interactions.push(modify);
    } else {
      const translate = new Translate({ layers: [layer] });
      translate.on('translateend', commit);
      interactions.push(translate);
    }
    // Snap last, so it sees the pointer before the others (OpenLayers' snap example): to this
    // feature's own vertices and to the other features on the map.
    interactions.push(new Snap({ source }));
    for (const other of contextSources.get(handle) ?? []) interactions.push(new Snap({ source: other }));
    for (const interaction of interactions) map.addInteraction(interaction);
    notify();
  };
  map.on('singleclick', (event) => {
    if (tool === 'modify') select(vertexNear(event.coordinate));
  });

  const editor: EditorHandle = {
    setType(next) {
      if (next !== type) {
        type = next;
        if (current()) {
          source.clear();
          emit();
          commit();
        }
      }
      install('draw');
    },
    setTool: install,
    setPoint(lon, lat) {
      setOlGeometry(new Point(fromLonLat([lon, lat])));
      map.getView().animate({ center: fromLonLat([lon, lat]), duration: 0 });
    },
    geometry() {
      const geometry = current()?.getGeometry();
      return geometry ? (format.writeGeometryObject(geometry, { decimals: 7 }) as Geometry) : undefined;
    },
    setGeometry(geometry) {
      setOlGeometry(geometry ? (format.readGeometry(geometry) as OlGeometry) : undefined);
    },
    clear() {
      if (drawing) draw?.abortDrawing();
      setOlGeometry(undefined);
    },
    undo() {
      if (drawing && draw) {
        draw.removeLastPoint();
        return;
      }
      if (past.length === 0) return;
      future.push(present?.clone());
      present = past.pop();
      restore(present);
    },
    redo() {
      if (drawing || future.length === 0) return;
      past.push(present?.clone());
      present = future.pop();
      restore(present);
    },
    cancelDrawing() {
      if (!drawing || !draw) return false;
      draw.abortDrawing();
      return true;
    },
    placeAtCentre() {
      const centre = map.getView().getCenter();
      if (!centre) return;
      // Editing vertices, the key selects the vertex nearest the centre instead (then Delete removes it).
      if (tool === 'modify') {
        select(vertexNear(centre, KEYBOARD_VERTEX_TOLERANCE));
        return;
      }
      if (tool === 'draw' && type === 'Point') {
        setOlGeometry(new Point(centre));
        return;
      }
      if (!draw) return;
      draw.appendCoordinates([centre]);
      drawing = true;
      notify();
    },
    finishDrawing() {
      if (!drawing || !draw) return false;
      draw.finishDrawing();
      return true;
    },
    removeSelectedVertex() {
      if (!modify || !selected) return false;
      const removed = modify.removePoint(selected);
      select(undefined);
      return removed;
    },
    onState(listener) {
      stateListeners.push(listener);
      listener({ canUndo: past.length > 0, canRedo: future.length > 0, drawing, vertexSelected: selected !== undefined });
    },
  };
  if (options.initial) {
    source.addFeature(new OlFeature({ geometry: format.readGeometry(options.initial) as OlGeometry }));
    handle.fit([options.initial]);
  }
  install(options.initial ? 'modify' : 'draw');
  return editor;
}

/** Lon/lat extent of geometries (for links from the list to the map). */
export function lonLatExtent(geometries: Geometry[]): Bbox | undefined {
  const coordinates: number[][] = [];
  const walk = (value: unknown) => {
    if (Array.isArray(value) && typeof value[0] === 'number') coordinates.push(value as number[]);
    else if (Array.isArray(value)) value.forEach(walk);
  };
  for (const geometry of geometries) walk(geometry.coordinates);
  return coordinates.length ? (boundingExtent(coordinates) as Bbox) : undefined;
}
