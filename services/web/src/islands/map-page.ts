import { firstView } from '../lib/first-view.js';
import { createMap, readClientConfig } from '../lib/map.js';
import { clientTranslator } from './messages.js';

/**
 * The map page's island: loads the visible bbox, applies the search and the filters, and shows the
 * clicked feature with a link to its page. Every action here also exists in the list (/features).
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

  const form = document.getElementById('map-filters') as HTMLFormElement;
  const apply = () => {
    const data = new FormData(form);
    map.setFilter({ name: String(data.get('q') ?? ''), kategorie: String(data.get('kategorie') ?? ''), status: String(data.get('status') ?? '') });
  };
  form.addEventListener('input', apply);
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    apply();
  });
  const wms = document.getElementById('wms-toggle') as HTMLInputElement | null;
  wms?.addEventListener('change', () => map.setWmsVisible(wms.checked));

  const selected = document.getElementById('selected-feature')!;
  map.onSelect((id) => {
    selected.replaceChildren();
    if (!id) return;
    const link = document.createElement('a');
    link.href = `/features/${encodeURIComponent(id)}`;
    link.textContent = id;
    selected.append(link);
    void fetch(`${config.apiUrl}/api/features/${encodeURIComponent(id)}`, { credentials: 'include', headers: config.token ? { authorization: `Bearer ${config.token}` } : {} })
      .then((response) => (response.ok ? response.json() : undefined))
      .then((feature: { properties?: { name?: string } } | undefined) => {
        if (feature?.properties?.name) link.textContent = feature.properties.name;
      });
  });
}
