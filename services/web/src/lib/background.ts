/**
 * The map's background maps (config/basemaps.yaml, src/basemaps.ts): one OpenLayers layer per entry,
 * made when the entry is first chosen (a vector style is fetched only then, and an entry nobody picks
 * costs nothing), whether the chosen one can be reached, and its tiles for "make this area available
 * offline". Part of the map module: only lib/map.ts uses it.
 */
import TileLayer from 'ol/layer/Tile.js';
import type BaseLayer from 'ol/layer/Base.js';
import LayerGroup from 'ol/layer/Group.js';
import XYZ from 'ol/source/XYZ.js';
import TileWMS from 'ol/source/TileWMS.js';
import type TileImage from 'ol/source/TileImage.js';
import type ImageTile from 'ol/ImageTile.js';
import type Tile from 'ol/Tile.js';
import { apply } from 'ol-mapbox-style';
import type { Basemap } from '../basemaps.js';

/** Cache Storage of the tiles kept for offline use, shared by every background map. */
export const OFFLINE_TILE_CACHE = 'fp-offline-tiles';
/** localStorage: the ids of the background maps some of whose tiles are kept (their loads look there first). */
const KEPT_KEY = 'fp-offline-basemaps';
/** So many failed tiles and not one loaded: the background map is taken as unreachable. */
const UNREACHABLE_AFTER = 3;
/** How deep an offline area reaches below the view's zoom (street level for field work). */
const OFFLINE_EXTRA_ZOOMS = 3;

export function keptBasemaps(): string[] {
  try {
    return JSON.parse(localStorage.getItem(KEPT_KEY) ?? '[]') as string[];
  } catch {
    return [];
  }
}
export function markKept(id: string): void {
  const kept = new Set(keptBasemaps());
  kept.add(id);
  localStorage.setItem(KEPT_KEY, JSON.stringify([...kept]));
}

/**
 * Loads an image tile from the offline cache when this background map has kept tiles there, else
 * from the network (OpenLayers' default). Without kept tiles nothing is looked up.
 */
function tileLoader(id: string): (tile: Tile, src: string) => void {
  return (tile, src) => {
    const image = (tile as ImageTile).getImage() as HTMLImageElement;
    if (!keptBasemaps().includes(id) || typeof caches === 'undefined') {
      image.src = src;
      return;
    }
    void caches
      .open(OFFLINE_TILE_CACHE)
      .then((cache) => cache.match(src))
      .then(async (hit) => {
        if (!hit) {
          image.src = src;
          return;
        }
        const url = URL.createObjectURL(await hit.blob());
        image.addEventListener('load', () => URL.revokeObjectURL(url), { once: true });
        image.src = url;
      })
      .catch(() => (image.src = src));
  };
}

/** A WMTS RESTful template on a Web Mercator (GoogleMapsCompatible) matrix set is an XYZ template. */
const wmtsAsXyz = (url: string) => url.replace('{TileMatrix}', '{z}').replace('{TileRow}', '{y}').replace('{TileCol}', '{x}');

function rasterSource(entry: Basemap): TileImage | undefined {
  const common = { attributions: entry.attribution, crossOrigin: 'anonymous', tileLoadFunction: tileLoader(entry.id) } as const;
  if (entry.type === 'xyz' || entry.type === 'wmts') return new XYZ({ ...common, url: entry.type === 'wmts' ? wmtsAsXyz(entry.url) : entry.url, maxZoom: entry.maxZoom });
  if (entry.type === 'wms') return new TileWMS({ ...common, url: entry.url, params: { LAYERS: entry.layers, TILED: true } });
  return undefined;
}

export interface OfflineTiles {
  urls: string[];
  minZoom: number;
  maxZoom: number;
  /** The view alone, at its own zoom, has more tiles than allowed. */
  tooLarge: boolean;
  /** The view's tiles at its own zoom. */
  viewTiles: number;
  /** The provider's terms do not allow downloading (offline.allowed false in config/basemaps.yaml). */
  refused: boolean;
}

export function createBackground(group: LayerGroup, entries: Basemap[], target: HTMLElement) {
  const layers = new Map<string, BaseLayer>();
  const sources = new Map<string, TileImage>();
  const reachableListeners: Array<(reachable: boolean) => void> = [];
  const remembered = (() => {
    try {
      return localStorage.getItem('fp-basemap');
    } catch {
      return null;
    }
  })();
  let chosen = entries.find((entry) => entry.id === remembered) ?? entries[0]!;
  let loaded = 0;
  let failed = 0;
  let reachable = true;
  const report = (now: boolean) => {
    if (now === reachable) return;
    reachable = now;
    for (const listener of reachableListeners) listener(now);
  };
  // Without any background map the features sit on a plain grey, not on white.
  target.style.background = '#e8eaed';

  const layerFor = (entry: Basemap): BaseLayer => {
    let layer = layers.get(entry.id);
    if (layer) return layer;
    const source = rasterSource(entry);
    if (source) {
      sources.set(entry.id, source);
      source.on('tileloadend', () => {
        if (entry !== chosen) return;
        loaded++;
        report(true);
      });
      source.on('tileloaderror', () => {
        if (entry !== chosen) return;
        failed++;
        if (loaded === 0 && failed >= UNREACHABLE_AFTER) report(false);
      });
      layer = new TileLayer({ source });
    } else {
      // A MapLibre/Mapbox style: ol-mapbox-style builds its layers into this group.
      const styleGroup = new LayerGroup();
      apply(styleGroup, entry.url).then(
        () => {
          if (entry === chosen) report(true);
          for (const styleLayer of styleGroup.getLayersArray()) (styleLayer.getSource() as { setAttributions?(a: string): void } | null)?.setAttributions?.(entry.attribution);
        },
        () => {
          if (entry === chosen) report(false);
        },
      );
      layer = styleGroup;
    }
    layers.set(entry.id, layer);
    return layer;
  };

  const show = (entry: Basemap) => {
    chosen = entry;
    loaded = 0;
    failed = 0;
    report(true);
    group.getLayers().clear();
    group.getLayers().push(layerFor(entry));
  };
  show(chosen);

  return {
    current: () => chosen,
    choose(id: string) {
      const entry = entries.find((candidate) => candidate.id === id);
      if (!entry || entry === chosen) return;
      try {
        localStorage.setItem('fp-basemap', id);
      } catch {
        // private mode: the choice lasts for this page only
      }
      show(entry);
    },
    onReachable(listener: (reachable: boolean) => void) {
      reachableListeners.push(listener);
    },
    /**
     * The chosen map's tile URLs covering `extent` (EPSG:3857) from `zoom` down OFFLINE_EXTRA_ZOOMS
     * levels (no deeper than the map has), as many levels as fit into maxTiles.
     */
    tilesFor(extent: number[], zoom: number, maxTiles: number): OfflineTiles {
      const source = sources.get(chosen.id);
      const minZoom = Math.max(0, Math.min(zoom, chosen.maxZoom));
      if (!chosen.offline.allowed || !source) return { urls: [], minZoom, maxZoom: minZoom, tooLarge: false, viewTiles: 0, refused: true };
      const grid = source.getTileGridForProjection(source.getProjection()!);
      const urlFor = source.getTileUrlFunction();
      const projection = source.getProjection()!;
      const urls: string[] = [];
      let maxZoom = minZoom - 1;
      let viewTiles = 0;
      for (let z = minZoom; z <= Math.min(chosen.maxZoom, minZoom + OFFLINE_EXTRA_ZOOMS); z++) {
        const level: string[] = [];
        grid.forEachTileCoord(extent, z, (coord) => {
          const url = urlFor(coord, 1, projection);
          if (url) level.push(url);
        });
        if (z === minZoom) viewTiles = level.length;
        if (urls.length + level.length > Math.min(maxTiles, chosen.offline.maxTiles)) break;
        urls.push(...level);
        maxZoom = z;
      }
      return { urls, minZoom, maxZoom, tooLarge: maxZoom < minZoom, viewTiles, refused: false };
    },
  };
}
