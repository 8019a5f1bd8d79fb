import { AppError } from '../../../shared/errors.js';
import { CRS84, parseCrs, type Crs } from './crs.js';

/**
 * Write bodies in a Content-Crs other than CRS84 (Part 4 with Part 2), brought to what the feature
 * schema reads, so that they are refused for exactly what a CRS84 body is refused for:
 *
 * - EPSG:4326 (latitude first): every position and every bbox member has its two axes swapped. The
 *   schema then checks each bbox against the swapped coordinates, which is checking it in EPSG:4326.
 * - A projected CRS: PostGIS transforms the geometry's type and coordinates (the routes do that). A
 *   bbox member (of the feature or of the geometry) is checked here, in the CRS's own coordinates, and
 *   then dropped: it is not stored, and transformed it would be another box. Every other member stays
 *   where it was, so the schema refuses an unknown one (a geometry's `crs`) as it does in CRS84.
 */

type Body = Record<string, unknown>;

const isRecord = (v: unknown): v is Body => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The CRS of a request body: its Content-Crs header (`<uri>` or a bare URI), CRS84 without one. */
export function contentCrsOf(header: string | undefined): Crs {
  return header === undefined ? CRS84 : parseCrs(header.trim().replace(/^<(.*)>$/, '$1'), 'Content-Crs');
}

/** A body in EPSG:4326 (latitude first) with longitude first, bbox members included. */
export function withAxesSwapped(body: Body): Body {
  const result: Body = { ...body };
  if (Array.isArray(body.bbox)) result.bbox = swapBox(body.bbox);
  if (isRecord(body.geometry)) {
    const geometry: Body = { ...body.geometry, coordinates: swapPositions(body.geometry.coordinates) };
    if (Array.isArray(body.geometry.bbox)) geometry.bbox = swapBox(body.geometry.bbox);
    result.geometry = geometry;
  }
  return result;
}

/**
 * A body in a projected CRS with its bbox members checked against its coordinates and removed. The
 * geometry keeps its other members; its type and coordinates are what PostGIS must transform.
 */
export function withoutCheckedBoxes(body: Body, crs: Crs): Body {
  const result: Body = { ...body };
  const geometry = isRecord(body.geometry) ? { ...body.geometry } : undefined;
  if (Array.isArray(body.bbox)) {
    // A merge patch may carry a bbox without the geometry it encloses, which is then in CRS84.
    if (!geometry) throw refused('bbox', `can only be checked against a geometry in the same body when Content-Crs is ${crs.uri}`);
    checkBox(body.bbox, geometry.coordinates, 'bbox');
    delete result.bbox;
  }
  if (geometry && Array.isArray(geometry.bbox)) {
    checkBox(geometry.bbox, geometry.coordinates, 'geometry.bbox');
    delete geometry.bbox;
  }
  if (geometry) result.geometry = geometry;
  return result;
}

function checkBox(box: unknown[], coordinates: unknown, field: string): void {
  if (box.length !== 4 || !box.every((n) => typeof n === 'number' && Number.isFinite(n))) {
    throw refused(field, 'must be [minimum x, minimum y, maximum x, maximum y] (four numbers) in the coordinates of Content-Crs');
  }
  const [minX, minY, maxX, maxY] = box as [number, number, number, number];
  if (minX > maxX || minY > maxY) throw refused(field, 'its minimum must not exceed its maximum');
  const outside = firstPosition(coordinates, ([x, y]) => x < minX || x > maxX || y < minY || y > maxY);
  if (outside) throw refused(field, `does not enclose the geometry: position [${outside.join(', ')}] lies outside`);
}

/** The first position of two numbers in coordinates (nested arrays, walked without recursion) that matches. */
function firstPosition(coordinates: unknown, matches: (position: [number, number]) => boolean): [number, number] | undefined {
  const stack: unknown[] = [coordinates];
  while (stack.length > 0) {
    const next = stack.pop();
    if (!Array.isArray(next)) continue;
    if (typeof next[0] === 'number') {
      if (next.length === 2 && typeof next[1] === 'number' && matches(next as [number, number])) return next as [number, number];
    } else {
      for (let i = next.length - 1; i >= 0; i--) stack.push(next[i]);
    }
  }
  return undefined;
}

/** [a, b, c, d] read latitude first as [b, a, d, c]; anything else is left for the schema to refuse. */
function swapBox(box: unknown[]): unknown[] {
  return box.length === 4 ? [box[1], box[0], box[3], box[2]] : box;
}

const isPosition = (array: unknown[]): boolean => array.length === 2 && typeof array[0] === 'number' && typeof array[1] === 'number';

/** A copy of coordinates with the two axes of every position swapped, walked without recursion. */
function swapPositions(coordinates: unknown): unknown {
  if (!Array.isArray(coordinates)) return coordinates;
  const copy = (array: unknown[]): unknown[] => (isPosition(array) ? [array[1], array[0]] : [...array]);
  const root = copy(coordinates);
  const pending: unknown[][] = [root];
  while (pending.length > 0) {
    const array = pending.pop()!;
    if (isPosition(array)) continue;
    array.forEach((item, i) => {
      if (!Array.isArray(item)) return;
      const copied = copy(item);
      array[i] = copied;
      pending.push(copied);
    });
  }
  return root;
}

function refused(field: string, message: string): AppError {
  return new AppError('VALIDATION_FAILED', `invalid feature: ${field}: ${message}`, { fields: [{ field, message }] });
}
