import type { FeatureGeometry, Position } from './types.js';

/** OSM stores coordinates with 7 decimals; comparing at that precision avoids no-op modifications. */
export function roundCoordinate(value: number): number {
  return Math.round(value * 1e7) / 1e7;
}

export function samePosition(a: Position, b: Position): boolean {
  return roundCoordinate(a[0]) === roundCoordinate(b[0]) && roundCoordinate(a[1]) === roundCoordinate(b[1]);
}

/** A problem that makes a geometry unexportable; the exporter turns it into a `failed` outcome. */
export class InvalidGeometryError extends Error {
  override readonly name = 'InvalidGeometryError';
}

function checkPosition(p: Position, where: string): void {
  const [lon, lat] = p;
  if (!Number.isFinite(lon) || !Number.isFinite(lat) || lon < -180 || lon > 180 || lat < -90 || lat > 90) {
    throw new InvalidGeometryError(`${where}: position ${JSON.stringify(p)} is outside EPSG:4326`);
  }
}

function checkRing(ring: Position[], where: string): void {
  if (ring.length < 4) throw new InvalidGeometryError(`${where}: a ring needs at least 4 positions`);
  ring.forEach((p, i) => checkPosition(p, `${where}[${i}]`));
  if (!samePosition(ring[0]!, ring[ring.length - 1]!)) throw new InvalidGeometryError(`${where}: the ring is not closed`);
}

/** Validate what the exporters rely on (the API validates too; a snapshot may come from elsewhere). */
export function assertExportableGeometry(geometry: FeatureGeometry): void {
  switch (geometry.type) {
    case 'Point':
      checkPosition(geometry.coordinates, 'Point');
      return;
    case 'LineString':
      if (geometry.coordinates.length < 2) throw new InvalidGeometryError('LineString: needs at least 2 positions');
      geometry.coordinates.forEach((p, i) => checkPosition(p, `LineString[${i}]`));
      return;
    case 'Polygon':
      if (geometry.coordinates.length === 0) throw new InvalidGeometryError('Polygon: has no ring');
      geometry.coordinates.forEach((ring, i) => checkRing(ring, `Polygon ring ${i}`));
      return;
    case 'MultiPolygon':
      if (geometry.coordinates.length === 0) throw new InvalidGeometryError('MultiPolygon: has no polygon');
      geometry.coordinates.forEach((polygon, j) => {
        if (polygon.length === 0) throw new InvalidGeometryError(`MultiPolygon polygon ${j}: has no ring`);
        polygon.forEach((ring, i) => checkRing(ring, `MultiPolygon polygon ${j} ring ${i}`));
      });
      return;
    default:
      throw new InvalidGeometryError(`unsupported geometry type ${(geometry as { type: string }).type}`);
  }
}

/** Signed area and centroid of one closed ring (shoelace formula, planar in degrees). */
function ringMoments(ring: Position[]): { area: number; cx: number; cy: number } {
  let area = 0;
  let cx = 0;
  let cy = 0;
  for (let i = 0; i < ring.length - 1; i++) {
    const [x0, y0] = ring[i]!;
    const [x1, y1] = ring[i + 1]!;
    const cross = x0 * y1 - x1 * y0;
    area += cross;
    cx += (x0 + x1) * cross;
    cy += (y0 + y1) * cross;
  }
  return { area: area / 2, cx, cy };
}

function averagePosition(positions: Position[]): Position {
  const sum = positions.reduce<[number, number]>((acc, p) => [acc[0] + p[0], acc[1] + p[1]], [0, 0]);
  return [sum[0] / positions.length, sum[1] / positions.length];
}

/** Length-weighted midpoint of a line: the centroid of its segments. */
function lineCentroid(line: Position[]): Position {
  let total = 0;
  let x = 0;
  let y = 0;
  for (let i = 0; i < line.length - 1; i++) {
    const [x0, y0] = line[i]!;
    const [x1, y1] = line[i + 1]!;
    const length = Math.hypot(x1 - x0, y1 - y0);
    total += length;
    x += ((x0 + x1) / 2) * length;
    y += ((y0 + y1) / 2) * length;
  }
  return total === 0 ? averagePosition(line) : [x / total, y / total];
}

/**
 * The centroid used for Wikibase P625. Planar in degrees, which is accurate to well under a metre for
 * city-sized features; holes are subtracted, polygons weighted by area. Degenerate (zero-area)
 * polygons fall back to the average of their vertices.
 */
export function centroidOf(geometry: FeatureGeometry): { longitude: number; latitude: number } {
  let position: Position;
  switch (geometry.type) {
    case 'Point':
      position = geometry.coordinates;
      break;
    case 'LineString':
      position = lineCentroid(geometry.coordinates);
      break;
    case 'Polygon':
    case 'MultiPolygon': {
      const polygons = geometry.type === 'Polygon' ? [geometry.coordinates] : geometry.coordinates;
      let area = 0;
      let cx = 0;
      let cy = 0;
      for (const polygon of polygons) {
        polygon.forEach((ring, index) => {
          const m = ringMoments(ring);
          // Outer rings count positive and holes negative, whatever their winding order.
          const sign = index === 0 ? Math.sign(m.area) : -Math.sign(m.area);
          area += sign * m.area;
          cx += sign * m.cx;
          cy += sign * m.cy;
        });
      }
      position = Math.abs(area) < 1e-18 ? averagePosition(polygons.flat(2)) : [cx / (6 * area), cy / (6 * area)];
      break;
    }
  }
  return { longitude: position[0], latitude: position[1] };
}
