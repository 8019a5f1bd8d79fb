import type { Geometry } from '../../../shared/features/schema.js';

/** The centre of a geometry's lon/lat bounding box (for "show on map" links), without a map library. */
export function lonLatCenter(geometry: Geometry): [number, number] | undefined {
  let minX = Infinity, minY = Infinity, maxX = -Infinity, maxY = -Infinity;
  const walk = (value: unknown): void => {
    if (!Array.isArray(value)) return;
    if (typeof value[0] === 'number' && typeof value[1] === 'number') {
      minX = Math.min(minX, value[0]); maxX = Math.max(maxX, value[0]);
      minY = Math.min(minY, value[1]); maxY = Math.max(maxY, value[1]);
      return;
    }
    value.forEach(walk);
  };
  walk(geometry.coordinates);
  return Number.isFinite(minX) ? [(minX + maxX) / 2, (minY + maxY) / 2] : undefined;
}

/** Parts and holes of an area geometry, for the editor's text summary (screen readers see the shape). */
export function shapeSummary(geometry: Geometry): { parts: number; holes: number } {
  if (geometry.type === 'Polygon') return { parts: 1, holes: geometry.coordinates.length - 1 };
  if (geometry.type === 'MultiPolygon') return { parts: geometry.coordinates.length, holes: geometry.coordinates.reduce((n, p) => n + p.length - 1, 0) };
  return { parts: 1, holes: 0 };
}
