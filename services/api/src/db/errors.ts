import { AppError } from '../../../shared/errors.js';

/**
 * The one place that maps PostgreSQL failures to API errors. Messages are ours, never the
 * database's, so no SQL, table or constraint name reaches a client.
 */
export function fromDatabaseError(error: unknown): AppError | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return undefined;
  // Raised by features.api_insert (migration 007) with PostGIS's ST_IsValidReason as the message.
  if (code === INVALID_GEOMETRY_SQLSTATE) return invalidGeometry(String((error as { message?: unknown }).message ?? 'invalid geometry'), error);
  if (code === '23505') return new AppError('CONFLICT', 'a feature with this id already exists', { cause: error });
  if (code === '23514' || code === '23502') return new AppError('VALIDATION_FAILED', 'the feature violates a data rule of the database', { cause: error });
  // Class 22: data exceptions (invalid text, out-of-range numbers, unparsable GeoJSON) — bad input.
  if (code.startsWith('22') || code === 'XX000') {
    // XX000 is what PostGIS raises for geometry it cannot parse or process.
    return code === 'XX000' && !isGeometryError(error) ? undefined : new AppError('VALIDATION_FAILED', 'the database refused a value of this request as invalid', { cause: error });
  }
  if (code === '40001' || code === '40P01') return new AppError('SERVICE_UNAVAILABLE', 'a concurrent change conflicted; retry the request', { cause: error, headers: { 'Retry-After': '1' } });
  if (code === '57014') return new AppError('SERVICE_UNAVAILABLE', 'the database query took too long', { cause: error });
  if (code === '57P01' || code === '57P03' || code === 'ECONNREFUSED' || code === 'ECONNRESET' || code.startsWith('08')) {
    return new AppError('SERVICE_UNAVAILABLE', 'the database is not reachable', { cause: error, headers: { 'Retry-After': '5' } });
  }
  return undefined;
}

/**
 * Whether the database refused a value it was computing with: a data exception (class 22, e.g. a LIKE
 * pattern ending in its escape character, a number out of range) or PostGIS's XX000 (a geometry it
 * cannot build, a coordinate outside a projection's domain). For a statement whose values all come
 * from the request, such as a CQL2 filter, that is the request's fault. The caller answers in its own
 * words: the database's message names its internals (functions, error numbers) and is never passed on.
 */
export function isRefusedValue(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('22') || code === 'XX000');
}

export const INVALID_GEOMETRY_SQLSTATE = 'GF001';

/** A geometry PostGIS finds invalid (self-intersection, degenerate ring): 400 naming the geometry with the reason. */
export function invalidGeometry(reason: string, cause?: unknown): AppError {
  return new AppError('VALIDATION_FAILED', `invalid feature: geometry: ${reason}`, {
    fields: [{ field: 'geometry', message: `is not valid: ${reason}` }],
    ...(cause === undefined ? {} : { cause }),
  });
}

function isGeometryError(error: unknown): boolean {
  const message = String((error as { message?: unknown }).message ?? '');
  return /geojson|geometry|lwgeom|ring|coordinates/i.test(message);
}
