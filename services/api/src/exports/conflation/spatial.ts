import type { FeatureGeometry, Position } from '../types.js';

/**
 * Planar geometry in metres around a reference point (equirectangular projection): accurate to well
 * under a metre across a city, which is all conflation needs.
 */
export type Xy = [number, number];

/** The shape of a feature or a candidate, in lon/lat: a point, a line, or areas (outer rings, closed). */
export type Shape = { kind: 'point'; position: Position } | { kind: 'line'; positions: Position[] } | { kind: 'area'; rings: Position[][] };

export function shapeOfGeometry(geometry: FeatureGeometry): Shape {
  switch (geometry.type) {
    case 'Point':
      return { kind: 'point', position: geometry.coordinates };
    case 'LineString':
      return { kind: 'line', positions: geometry.coordinates };
    case 'Polygon':
      return { kind: 'area', rings: [geometry.coordinates[0]!] };
    case 'MultiPolygon':
      return { kind: 'area', rings: geometry.coordinates.map((p) => p[0]!) };
  }
}

export function positionsOf(shape: Shape): Position[] {
  return shape.kind === 'point' ? [shape.position] : shape.kind === 'line' ? shape.positions : shape.rings.flat();
}

export interface Projection {
  toXy(p: Position): Xy;
}

export function projectionAround(reference: Position): Projection {
  const [lon0, lat0] = reference;
  const kx = 111_320 * Math.cos((lat0 * Math.PI) / 180);
  const ky = 110_574;
  return { toXy: (p) => [(p[0] - lon0) * kx, (p[1] - lat0) * ky] };
}

/** Degrees of latitude and longitude that `metres` span at `latitude`. */
export function metresToDegrees(metres: number, latitude: number): { dLat: number; dLon: number } {
  return { dLat: metres / 110_574, dLon: metres / (111_320 * Math.cos((latitude * Math.PI) / 180)) };
}

export interface Bounds {
  south: number;
  west: number;
  north: number;
  east: number;
}

export function boundsOf(positions: Position[]): Bounds {
  let south = Infinity;
  let west = Infinity;
  let north = -Infinity;
  let east = -Infinity;
  for (const [lon, lat] of positions) {
    south = Math.min(south, lat);
    north = Math.max(north, lat);
    west = Math.min(west, lon);
    east = Math.max(east, lon);
  }
  return { south, west, north, east };
}

/** The feature's bounds grown by `metres` on every side. */
export function searchBounds(shape: Shape, metres: number): Bounds {
  const b = boundsOf(positionsOf(shape));
  const { dLat, dLon } = metresToDegrees(metres, (b.south + b.north) / 2);
  return { south: b.south - dLat, west: b.west - dLon, north: b.north + dLat, east: b.east + dLon };
}

function pointInRing(p: Xy, ring: Xy[]): boolean {
  let inside = false;
  for (let i = 0, j = ring.length - 1; i < ring.length; j = i++) {
    const [xi, yi] = ring[i]!;
    const [xj, yj] = ring[j]!;
    if (yi > p[1] !== yj > p[1] && p[0] < ((xj - xi) * (p[1] - yi)) / (yj - yi) + xi) inside = !inside;
  }
  return inside;
}

function segmentDistance(p: Xy, a: Xy, b: Xy): number {
  const dx = b[0] - a[0];
  const dy = b[1] - a[1];
  const length2 = dx * dx + dy * dy;
  const t = length2 === 0 ? 0 : Math.max(0, Math.min(1, ((p[0] - a[0]) * dx + (p[1] - a[1]) * dy) / length2));
  return Math.hypot(p[0] - (a[0] + t * dx), p[1] - (a[1] + t * dy));
}

function polylineDistance(p: Xy, line: Xy[]): number {
  if (line.length === 1) return Math.hypot(p[0] - line[0]![0], p[1] - line[0]![1]);
  let best = Infinity;
  for (let i = 1; i < line.length; i++) best = Math.min(best, segmentDistance(p, line[i - 1]!, line[i]!));
  return best;
}

interface Projected {
  kind: Shape['kind'];
  points: Xy[];
  rings: Xy[][];
}

function project(shape: Shape, projection: Projection): Projected {
  if (shape.kind === 'area') return { kind: 'area', points: shape.rings.flat().map(projection.toXy), rings: shape.rings.map((r) => r.map(projection.toXy)) };
  const positions = shape.kind === 'point' ? [shape.position] : shape.positions;
  return { kind: shape.kind, points: positions.map(projection.toXy), rings: [] };
}

function distanceToShape(p: Xy, shape: Projected): number {
  if (shape.kind === 'area') {
    if (shape.rings.some((ring) => pointInRing(p, ring))) return 0;
    return Math.min(...shape.rings.map((ring) => polylineDistance(p, ring)));
  }
  return polylineDistance(p, shape.points);
}

function ringArea(ring: Xy[]): number {
  let sum = 0;
  for (let i = 0, j = ring.length - 1; i < ring.length; j = i++) sum += (ring[j]![0] + ring[i]![0]) * (ring[j]![1] - ring[i]![1]);
  return sum / 2;
}

/**
 * Overlap of two areas as intersection / smaller area, estimated on a 32×32 grid over the smaller
 * area's bounding box (a few per cent): containment counts as full overlap, which is what a city
 * polygon drawn inside the mapped cemetery is.
 */
function overlapOfAreas(a: Projected, b: Projected): number {
  const area = (s: Projected) => s.rings.reduce((sum, ring) => sum + Math.abs(ringArea(ring)), 0);
  const [small, large] = area(a) <= area(b) ? [a, b] : [b, a];
  const xs = small.points.map((p) => p[0]);
  const ys = small.points.map((p) => p[1]);
  const [minX, maxX, minY, maxY] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const steps = 32;
  let inSmall = 0;
  let inBoth = 0;
  for (let i = 0; i < steps; i++) {
    for (let j = 0; j < steps; j++) {
      const p: Xy = [minX + ((i + 0.5) / steps) * (maxX - minX), minY + ((j + 0.5) / steps) * (maxY - minY)];
      if (!small.rings.some((ring) => pointInRing(p, ring))) continue;
      inSmall++;
      if (large.rings.some((ring) => pointInRing(p, ring))) inBoth++;
    }
  }
  return inSmall === 0 ? 0 : inBoth / inSmall;
}

export interface SpatialRelation {
  /** Smallest distance in metres; 0 when the shapes touch, overlap or one contains the other. */
  distanceM: number;
  /** Areas only: intersection / smaller area (0..1); null when either is not an area. */
  overlap: number | null;
}

export function spatialRelation(feature: Shape, candidate: Shape, projection: Projection): SpatialRelation {
  const a = project(feature, projection);
  const b = project(candidate, projection);
  const overlap = a.kind === 'area' && b.kind === 'area' ? overlapOfAreas(a, b) : null;
  if (overlap !== null && overlap > 0) return { distanceM: 0, overlap };
  let best = Infinity;
  for (const p of a.points) best = Math.min(best, distanceToShape(p, b));
  for (const p of b.points) best = Math.min(best, distanceToShape(p, a));
  return { distanceM: best, overlap };
}
