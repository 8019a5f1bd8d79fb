import { z } from 'zod';
import { AppError } from '../../../shared/errors.js';
import { BboxSchema, DEFAULT_LIMIT, KATEGORIEN, MAX_LIMIT, type Bbox, type Kategorie } from '../../../shared/features/schema.js';
import { parseOrThrow } from '../http/validate.js';
import { isRealDate, parseCql2Json, parseCql2Text, type Expr } from './cql2.js';
import { CRS84, parseCrs, type Crs } from './crs.js';
import type { CrsBox, TimeInterval } from './queries.js';

/**
 * The query parameters of /ogcapi, validated with the feature API's own zod pieces (kategorie, a CRS84
 * bbox) where the two agree, and the OGC ones (limit, crs, bbox-crs, datetime, filter) here. Unknown
 * parameters are refused (Part 1 /req/core/query-param-unknown), each parameter may appear once.
 *
 * Every pattern here is anchored and matches each input one way only (no nested or adjacent
 * quantifiers over the same characters), so it runs in time linear in its input, which the server's
 * 16 KiB limit on the request line bounds before any of this runs.
 */

export const ITEMS_PARAMETERS = ['f', 'bbox', 'bbox-crs', 'crs', 'limit', 'datetime', 'kategorie', 'status', 'filter', 'filter-lang', 'filter-crs', 'cursor'] as const;
export const ITEM_PARAMETERS = ['f', 'crs'] as const;
export const STATUSES = ['draft', 'in_qc', 'approved', 'rejected'] as const;

export type Format = 'json' | 'html';

export interface ItemsQuery {
  format: Format | undefined;
  limit: number;
  bbox?: Bbox;
  crsBox?: CrsBox;
  crs: Crs;
  datetime?: TimeInterval;
  kategorie?: Kategorie;
  status?: string;
  filter?: { expr: Expr; crs: Crs };
  cursor?: { after: string } | { before: string };
}

function invalid(field: string, message: string): AppError {
  return new AppError('INVALID_QUERY', `invalid query: ${field}: ${message}`, { fields: [{ field, message }] });
}

/** One value per parameter, and only the parameters this resource knows. */
export function singleValues(query: Record<string, unknown>, known: readonly string[]): Record<string, string> {
  const result: Record<string, string> = {};
  for (const [key, value] of Object.entries(query)) {
    if (!known.includes(key)) throw invalid(key, `is not a parameter of this resource (known: ${known.join(', ')})`);
    // GDAL's OAPIF driver appends the query of its URL to every next link, so a parameter can arrive
    // twice with one value; only differing values are ambiguous.
    const values = Array.isArray(value) ? value : [value];
    if (!values.every((v) => typeof v === 'string' && v === values[0])) throw invalid(key, 'must be given once (or repeated with the same value)');
    result[key] = values[0] as string;
  }
  return result;
}

export function parseFormat(value: string | undefined): Format | undefined {
  if (value === undefined) return undefined;
  if (value === 'json' || value === 'geojson') return 'json';
  if (value === 'html') return 'html';
  throw invalid('f', 'must be json or html');
}

/** No query parameter is longer than a request line may be (http/server.ts: 16 KiB for line and headers). */
const MAX_PARAMETER_LENGTH = 16 * 1024;

/**
 * limit (Part 1 /req/core/fc-limit-response): a larger value than the maximum is capped, so any run of
 * digits is a limit, however long (GDAL, QGIS and scripts ask for "everything" with big numbers). The
 * length is checked before the pattern, though the pattern is linear and the URL capped at 16 KiB anyway.
 */
export function parseLimit(value: string | undefined): number {
  if (value === undefined) return DEFAULT_LIMIT;
  if (value.length > MAX_PARAMETER_LENGTH || !/^\d+$/.test(value)) throw invalid('limit', 'must be a positive integer');
  const digits = value.replace(/^0+/, '');
  if (digits === '') throw invalid('limit', 'must be at least 1');
  return digits.length > String(MAX_LIMIT).length ? MAX_LIMIT : Math.min(Number(digits), MAX_LIMIT);
}

const FieldsSchema = z.strictObject({
  kategorie: z.enum(KATEGORIEN, { error: `must be one of ${KATEGORIEN.join(', ')}` }).optional(),
  status: z.enum(STATUSES, { error: `must be one of ${STATUSES.join(', ')}` }).optional(),
});

export function parseItemsQuery(raw: Record<string, unknown>): ItemsQuery {
  const q = singleValues(raw, ITEMS_PARAMETERS);
  const limit = parseLimit(q.limit);
  const fields = parseOrThrow(FieldsSchema, { kategorie: q.kategorie, status: q.status }, 'INVALID_QUERY', 'query');
  const crs = parseCrs(q.crs, 'crs');
  const result: ItemsQuery = { format: parseFormat(q.f), limit, crs, kategorie: fields.kategorie, status: fields.status };
  if (q.bbox !== undefined) {
    const bboxCrs = parseCrs(q['bbox-crs'], 'bbox-crs');
    const parts = q.bbox.split(',');
    // A 3D box (6 numbers): its vertical extent does not apply to 2D features.
    const flat = parts.length === 6 ? [parts[0], parts[1], parts[3], parts[4]].join(',') : q.bbox;
    if (bboxCrs === CRS84) {
      result.bbox = parseOrThrow(z.strictObject({ bbox: BboxSchema }), { bbox: flat }, 'INVALID_QUERY', 'query').bbox;
    } else {
      const numbers = flat.split(',').map((p) => (/^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$/.test(p) ? Number(p) : NaN));
      if (numbers.length !== 4 || !numbers.every(Number.isFinite)) throw invalid('bbox', 'must be four (or six) comma-separated numbers in the axis order of bbox-crs');
      const [a, b, c, d] = numbers as [number, number, number, number];
      // In EPSG:4326 (latitude first) a west longitude greater than the east one crosses the
      // antimeridian, as in CRS84; in a projected CRS it is a mistake.
      const crossing = bboxCrs.latitudeFirst && b > d && a <= c;
      if (crossing && (Math.abs(b) > 180 || Math.abs(d) > 180)) throw invalid('bbox', 'a box crossing the antimeridian needs longitudes within [-180, 180]');
      if (!crossing && (a > c || b > d)) throw invalid('bbox', 'the lower corner must not exceed the upper corner');
      result.crsBox = { coords: [a, b, c, d], crs: bboxCrs };
    }
  } else if (q['bbox-crs'] !== undefined) {
    parseCrs(q['bbox-crs'], 'bbox-crs');
  }
  if (q.datetime !== undefined) result.datetime = parseDatetime(q.datetime);
  if (q.filter !== undefined) {
    const language = q['filter-lang'] ?? 'cql2-text';
    if (language !== 'cql2-text' && language !== 'cql2-json') throw invalid('filter-lang', 'must be cql2-text or cql2-json');
    const expr = language === 'cql2-json' ? parseCql2Json(q.filter) : parseCql2Text(q.filter);
    result.filter = { expr, crs: parseCrs(q['filter-crs'], 'filter-crs') };
  } else {
    if (q['filter-lang'] !== undefined && q['filter-lang'] !== 'cql2-text' && q['filter-lang'] !== 'cql2-json') throw invalid('filter-lang', 'must be cql2-text or cql2-json');
    if (q['filter-crs'] !== undefined) parseCrs(q['filter-crs'], 'filter-crs');
  }
  if (q.cursor !== undefined) result.cursor = decodeCursor(q.cursor);
  return result;
}

const INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$/i;
const DAY = /^\d{4}-\d{2}-\d{2}$/;

/**
 * datetime (Part 1 /req/core/fc-time-definition) on updatedAt: an instant, or an interval start/end
 * with `..` or nothing for an open end. A date alone means that whole day (UTC).
 */
export function parseDatetime(value: string): TimeInterval {
  const bound = (text: string, end: boolean): string | undefined => {
    if (text === '' || text === '..') return undefined;
    // As given (PostgreSQL reads RFC 3339): a Date would cut the microseconds updatedAt is stored with.
    if (INSTANT.test(text) && !Number.isNaN(Date.parse(text)) && isRealDate(text.slice(0, 10))) return text;
    if (DAY.test(text) && isRealDate(text)) {
      return end ? new Date(Date.parse(`${text}T00:00:00Z`) + 86_400_000 - 1).toISOString() : `${text}T00:00:00.000Z`;
    }
    throw invalid('datetime', `${JSON.stringify(text)} is not an RFC 3339 date or date-time with a time zone`);
  };
  const parts = value.split('/');
  if (parts.length === 1) {
    if (value === '' || value === '..') throw invalid('datetime', 'an instant must be a date or date-time');
    return DAY.test(value) ? { start: bound(value, false), end: bound(value, true) } : { start: bound(value, false), end: bound(value, false) };
  }
  if (parts.length !== 2) throw invalid('datetime', 'must be an instant or an interval start/end');
  const [start, end] = [bound(parts[0]!, false), bound(parts[1]!, true)];
  if (start === undefined && end === undefined) throw invalid('datetime', 'an interval needs at least one bound');
  if (start !== undefined && end !== undefined && Date.parse(start) > Date.parse(end)) throw invalid('datetime', 'the start must not be after the end');
  return { ...(start ? { start } : {}), ...(end ? { end } : {}) };
}

/** Cursors are opaque to clients: a direction and the id at the page's edge. */
export function encodeCursor(direction: 'after' | 'before', id: string): string {
  return `${direction === 'after' ? 'a' : 'b'}.${Buffer.from(id, 'utf8').toString('base64url')}`;
}

function decodeCursor(cursor: string): { after: string } | { before: string } {
  const match = /^([ab])\.([A-Za-z0-9_-]{1,400})$/.exec(cursor);
  const id = match ? Buffer.from(match[2]!, 'base64url').toString('utf8') : '';
  if (!match || id.length === 0 || id.includes('\u0000') || encodeCursor(match[1] === 'a' ? 'after' : 'before', id) !== cursor) {
    throw invalid('cursor', 'is not a cursor issued by this API');
  }
  return match[1] === 'a' ? { after: id } : { before: id };
}
