import type { Geometry } from '../../../shared/features/schema.js';
import { createMap, readClientConfig } from '../lib/map.js';

/** The feature page's maps: the current geometry, and the before/after overlay of the compared versions. */
export function mountFeatureMaps(): void {
  const config = readClientConfig();
  const data = JSON.parse(document.getElementById('fp-feature-maps')?.textContent ?? '{}') as { geometry: Geometry; before: Geometry | null; after: Geometry | null };
  const featureMap = document.getElementById('feature-map');
  if (featureMap && data.geometry) createMap(featureMap, { config }).showComparison(undefined, data.geometry);
  const diffMap = document.getElementById('diff-map');
  if (diffMap) createMap(diffMap, { config }).showComparison(data.before ?? undefined, data.after ?? undefined);
}
