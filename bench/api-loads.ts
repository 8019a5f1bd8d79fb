/**
 * The requests the API's process benchmarks (framework.bench.ts, node-flags.bench.ts) send to the
 * 100 000-feature grid database (grid-database.ts), so that both measure the same work.
 */
import { gridBbox } from './feature-grid.js';
import type { Load } from './support.js';

/** A feature in the middle of the grid. */
export const FEATURE_ID = 'f050000';
/** A tile over the grid, answered from the tile cache after the first request. */
export const TILE = '10/526/510';
/** 100 × 10 grid squares: exactly 1 000 features, so the page has no next link. */
export const LIST_BBOX = gridBbox(100, 10);
export const LIST_LIMIT = 1_000;
export const LIST_QUERY = `bbox=${LIST_BBOX.minLon},${LIST_BBOX.minLat},${LIST_BBOX.maxLon},${LIST_BBOX.maxLat}&limit=${LIST_LIMIT}`;
const POLYGON = { type: 'Polygon', coordinates: [[[13.0, 52.0], [13.1, 52.0], [13.1, 52.1], [13.0, 52.1], [13.0, 52.0]]] };
/** The body of every benchmarked create: a 5-position polygon and three properties. */
export const CREATE_BODY = JSON.stringify({ type: 'Feature', geometry: POLYGON, properties: { name: 'Benchmark', kategorie: 'blumenbeet', telefon: '+49 30 123' } });

/** POST /api/features (or another path taking the same body) with a Bearer token. */
export const createLoad = (token: string, path = '/api/features'): Load => ({
  path,
  method: 'POST',
  headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
  body: CREATE_BODY,
});
