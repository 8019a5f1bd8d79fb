import { firstView } from '../lib/first-view.js';
import { apiHeaders, createMap, readClientConfig, type MapHandle } from '../lib/map.js';
import { OFFLINE_TILE_CACHE, markKept } from '../lib/background.js';
import { keepFeatures } from '../lib/offline/outbox.js';
import { problemMessage, readProblem } from '../lib/problems.js';
import { readSearchPage, searchPath } from '../lib/search.js';
import type { ClientConfig, Feature } from '../lib/types.js';
import type { Translate } from '../i18n/index.js';
import { clientTranslator } from './messages.js';

/** How many features a search lists beside the map; the list page (/features?q=) pages through all. */
const SEARCH_RESULTS = 8;
/** The API search waits this long after the last keystroke. */
const SEARCH_SETTLE_MS = 300;

/**
 * The map page's island: loads the visible bbox, applies the search and the filters, and shows the
 * clicked feature with a link to its page. Every action here also exists in the list (/features).
 * The search box also asks the API across the whole dataset (lib/search.ts) and, when a geocoder is
 * configured, for places; choosing a result flies there. The address follows the view
 * (?center=lon,lat&zoom=z), so a reload or a shared link opens the same view.
 */
export function mountMapPage(): void {
  const config = readClientConfig();
  const t = clientTranslator();
  const target = document.getElementById('map')!;
  const map = createMap(target, { config, ...firstView(location.search) });
  (window as unknown as { fpMap: unknown }).fpMap = map; // for the benchmark and tests' waits

  const status = document.getElementById('map-status')!;
  map.loadFromApi({
    onProgress(held, loading) {
      status.textContent = loading ? t('map.loading') : t('map.loaded', { count: held });
      target.dataset.loaded = loading ? 'false' : String(held);
    },
  });
  followViewInAddress(map);
  mountBackground(map);
  mountOfflineArea(map, config, t);

  const form = document.getElementById('map-filters') as HTMLFormElement;
  const search = mountSearch(map, config, t, form);
  const apply = () => {
    const data = new FormData(form);
    map.setFilter({ name: String(data.get('q') ?? ''), kategorie: String(data.get('kategorie') ?? ''), status: String(data.get('status') ?? '') });
  };
  form.addEventListener('input', () => {
    apply();
    search.typed();
  });
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    apply();
    search.submitted();
  });
  const wms = document.getElementById('wms-toggle') as HTMLInputElement | null;
  wms?.addEventListener('change', () => map.setWmsVisible(wms.checked));

  const locateMessage = document.getElementById('locate-message')!;
  document.getElementById('locate-me')!.addEventListener('click', () => {
    locateMessage.textContent = '';
    navigator.geolocation.getCurrentPosition(
      (position) => {
        map.showLocation(position.coords.longitude, position.coords.latitude, { accuracy: position.coords.accuracy });
        locateMessage.textContent = t('map.located', { metres: Math.round(position.coords.accuracy) });
      },
      () => (locateMessage.textContent = t('map.locateFailed')),
      { enableHighAccuracy: true, timeout: 10_000 },
    );
  });

  const selected = document.getElementById('selected-feature')!;
  map.onSelect((id) => {
    selected.replaceChildren();
    if (!id) return;
    const link = document.createElement('a');
    link.href = `/features/${encodeURIComponent(id)}`;
    link.textContent = id;
    selected.append(link);
    void fetch(`${config.apiUrl}/api/features/${encodeURIComponent(id)}`, { credentials: 'include', headers: apiHeaders(config) })
      .then((response) => (response.ok ? response.json() : undefined))
      .then((feature: { properties?: { name?: string } } | undefined) => {
        if (feature?.properties?.name) link.textContent = feature.properties.name;
      });
  });
}

/** Keeps ?center=lon,lat&zoom=z of the address on the view (replaceState: no history entry per pan). */
function followViewInAddress(map: MapHandle): void {
  map.onViewChange((view) => {
    const others = new URLSearchParams(location.search);
    others.delete('center');
    others.delete('zoom');
    // Written by hand: URLSearchParams would escape the comma, and the address is meant to be read and shared.
    const search = `?center=${view.center[0].toFixed(5)},${view.center[1].toFixed(5)}&zoom=${Math.round(view.zoom * 100) / 100}${others.size ? `&${others.toString()}` : ''}`;
    if (search !== location.search) history.replaceState(history.state, '', `${location.pathname}${search}${location.hash}`);
  });
}

interface Place {
  display_name: string;
  lat: string;
  lon: string;
  boundingbox?: [string, string, string, string];
}

/**
 * The search's results beside the map: the API's features matching the text (as typing pauses) and,
 * with a geocoder, places (only when the search is submitted). A result is a button; choosing it
 * flies there. Enter in the box flies to the first feature found.
 */
function mountSearch(map: MapHandle, config: ClientConfig, t: Translate, form: HTMLFormElement): { typed(): void; submitted(): void } {
  const section = document.getElementById('search-results')!;
  const count = document.getElementById('search-results-count')!;
  const featureList = document.getElementById('feature-results')!;
  const placeList = document.getElementById('place-results');
  let settle: ReturnType<typeof setTimeout> | undefined;
  let controller: AbortController | undefined;
  let first: Feature | undefined;
  let flyToFirst = false;

  const text = () => String(new FormData(form).get('q') ?? '').trim();
  const item = (label: string, detail: string | undefined, choose: () => void) => {
    const li = document.createElement('li');
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'secondary';
    button.textContent = label;
    button.addEventListener('click', choose);
    li.append(button);
    if (detail) li.append(Object.assign(document.createElement('span'), { className: 'hint', textContent: ` ${detail}` }));
    return li;
  };

  const findFeatures = async (query: string) => {
    controller?.abort();
    const mine = new AbortController();
    controller = mine;
    if (!query) {
      section.hidden = true;
      featureList.replaceChildren();
      placeList?.replaceChildren();
      document.getElementById('places')?.setAttribute('hidden', '');
      first = undefined;
      return;
    }
    const data = new FormData(form);
    try {
      const response = await fetch(`${config.apiUrl}${searchPath({ q: query, kategorie: String(data.get('kategorie') ?? ''), status: String(data.get('status') ?? ''), limit: SEARCH_RESULTS })}`, {
        headers: apiHeaders(config, { accept: 'application/geo+json' }),
        credentials: 'include',
        signal: mine.signal,
      });
      section.hidden = false;
      if (!response.ok) {
        count.textContent = t('map.searchFailed', { message: problemMessage(t, await readProblem(response)) });
        return;
      }
      const { features } = readSearchPage((await response.json()) as { features: Feature[] });
      first = features[0];
      count.textContent = features.length ? '' : t('map.searchNone');
      featureList.replaceChildren(...features.map((feature) => item(feature.properties.name, feature.properties.adresse ?? undefined, () => map.flyTo(feature.geometry))));
      if (flyToFirst && first) map.flyTo(first.geometry);
    } catch (error) {
      if ((error as Error).name !== 'AbortError') count.textContent = t('map.searchFailed', { message: String((error as Error).message) });
    } finally {
      flyToFirst = false;
    }
  };

  const findPlaces = async (query: string) => {
    if (!config.geocoder || !placeList || !query) return;
    const url = new URL(`${config.geocoder.url}/search`);
    url.search = new URLSearchParams({ format: 'jsonv2', q: query, limit: '5', 'accept-language': config.lang }).toString();
    try {
      const response = await fetch(url);
      const places = response.ok ? ((await response.json()) as Place[]) : [];
      section.hidden = false;
      // The heading and the geocoder's attribution only with places to show.
      document.getElementById('places')!.hidden = places.length === 0;
      placeList.replaceChildren(
        ...places.map((place) =>
          item(place.display_name, undefined, () => {
            const box = place.boundingbox?.map(Number);
            // Nominatim's boundingbox is [south, north, west, east].
            map.showLocation(Number(place.lon), Number(place.lat), box && box.every(Number.isFinite) ? { extent: [box[2]!, box[0]!, box[3]!, box[1]!] } : {});
          }),
        ),
      );
    } catch {
      placeList.replaceChildren();
    }
  };

  return {
    typed() {
      clearTimeout(settle);
      settle = setTimeout(() => void findFeatures(text()), SEARCH_SETTLE_MS);
    },
    submitted() {
      clearTimeout(settle);
      flyToFirst = true;
      void findFeatures(text());
      void findPlaces(text());
    },
  };
}

/** A panel opened and closed by its button (aria-expanded). */
function disclosure(button: HTMLElement, panel: HTMLElement, onOpen: () => void = () => undefined): void {
  button.addEventListener('click', () => {
    const open = panel.hidden;
    panel.hidden = !open;
    button.setAttribute('aria-expanded', String(open));
    if (open) onOpen();
  });
}

/** "Background map": the radio group of config/basemaps.yaml; the attribution of the chosen one; a note when it cannot be reached. */
function mountBackground(map: MapHandle): void {
  const panel = document.getElementById('basemap-panel')!;
  const attribution = document.getElementById('basemap-attribution')!;
  const note = document.getElementById('basemap-note')!;
  disclosure(document.getElementById('basemap-open')!, panel);
  const radios = [...panel.querySelectorAll<HTMLInputElement>('input[name="basemap"]')];
  const showChosen = () => {
    const chosen = map.basemap();
    for (const radio of radios) radio.checked = radio.value === chosen.id;
    attribution.textContent = chosen.attribution;
  };
  for (const radio of radios)
    radio.addEventListener('change', () => {
      if (!radio.checked) return;
      map.setBasemap(radio.value);
      showChosen();
    });
  map.onBasemapReachable((reachable) => (note.hidden = reachable));
  showChosen();
}

/** A raster tile's size for the estimate: a typical 256 px PNG or JPEG of a town. */
const TILE_BYTES = 20_000;
/** Tiles downloaded at once: a few, to stay a polite client of the tile server. */
const TILE_DOWNLOADS = 4;

/**
 * "Make this area available offline": the chosen background map's tiles of the view (a few zoom
 * levels deeper, within the entry's offline.maxTiles, only where config/basemaps.yaml allows it) into
 * Cache Storage, which the map's tile loads read first; and the area's features into the offline store
 * (IndexedDB, the same one the outbox works from). A size estimate first, a progress bar while it runs.
 */
function mountOfflineArea(map: MapHandle, config: ClientConfig, t: Translate): void {
  const panel = document.getElementById('offline-panel')!;
  const estimate = document.getElementById('offline-estimate')!;
  const start = document.getElementById('offline-start') as HTMLButtonElement;
  const progress = document.getElementById('offline-progress') as HTMLProgressElement;
  const result = document.getElementById('offline-result')!;
  const size = (bytes: number) => new Intl.NumberFormat(config.lang, { style: 'unit', unit: 'megabyte', maximumFractionDigits: 1 }).format(bytes / 1_000_000);
  let planned = map.offlineTiles(0);
  const plan = () => {
    const basemap = map.basemap();
    planned = map.offlineTiles(basemap.offline.maxTiles);
    result.textContent = '';
    progress.hidden = true;
    const name = basemap.title[config.lang];
    if (planned.refused) estimate.textContent = t('map.offlineRefused', { name });
    else if (planned.tooLarge) estimate.textContent = t('map.offlineTooLarge', { tiles: planned.viewTiles, max: basemap.offline.maxTiles });
    else estimate.textContent = t('map.offlineEstimate', { tiles: planned.urls.length, name, minZoom: planned.minZoom, maxZoom: planned.maxZoom, size: size(planned.urls.length * TILE_BYTES) });
  };
  disclosure(document.getElementById('offline-open')!, panel, plan);
  map.onViewChange(() => {
    if (!panel.hidden && !start.disabled) plan();
  });
  document.querySelectorAll<HTMLInputElement>('input[name="basemap"]').forEach((radio) => radio.addEventListener('change', () => !panel.hidden && plan()));

  start.addEventListener('click', () => {
    const basemap = map.basemap();
    const urls = planned.refused || planned.tooLarge ? [] : planned.urls;
    const bbox = map.viewBbox();
    start.disabled = true;
    result.textContent = '';
    // One step per tile, and one for the features.
    progress.max = urls.length + 1;
    progress.value = 0;
    progress.hidden = false;
    void (async () => {
      try {
        let kept = 0;
        if (urls.length) {
          const cache = await caches.open(OFFLINE_TILE_CACHE);
          markKept(basemap.id);
          let next = 0;
          const worker = async () => {
            while (next < urls.length) {
              const url = urls[next++]!;
              const response = await fetch(url, { mode: 'cors' }).catch(() => undefined);
              if (response?.ok) {
                await cache.put(url, response);
                kept++;
              }
              progress.value += 1;
            }
          };
          await Promise.all(Array.from({ length: TILE_DOWNLOADS }, worker));
        }
        const features = await keepAreaFeatures(config, bbox);
        progress.value = progress.max;
        result.textContent = t('map.offlineDone', { tiles: kept, features });
      } catch (error) {
        result.textContent = t('map.offlineFailed', { message: String((error as Error).message) });
      } finally {
        start.disabled = false;
      }
    })();
  });
}

/** The features of a box, every page of the API's answer, into the offline store; how many. */
async function keepAreaFeatures(config: ClientConfig, bbox: [number, number, number, number]): Promise<number> {
  let url: string | undefined = `${config.apiUrl}/api/features?bbox=${bbox.map((v) => v.toFixed(6)).join(',')}&limit=1000`;
  let count = 0;
  while (url) {
    const response = await fetch(url, { headers: apiHeaders(config, { accept: 'application/geo+json' }), credentials: 'include' });
    if (!response.ok) throw new Error(problemMessage(clientTranslator(), await readProblem(response)));
    const page = (await response.json()) as { features: Feature[]; links: Array<{ rel: string; href: string }> };
    await keepFeatures(page.features);
    count += page.features.length;
    const next = page.links.find((link) => link.rel === 'next')?.href;
    url = next ? new URL(next, config.apiUrl).toString() : undefined;
  }
  return count;
}
