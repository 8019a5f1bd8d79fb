import type { Query } from '../db/pool.js';
import { boxPage, bboxGeometries, envelopesOf, intersectsAny, keyConditions, listConditions } from '../features/queries.js';

/**
 * A feature's GeoJSON as /api/features serves it: the text kept on its row at write time (migration
 * 006), so the items of any page and of any query shape (the paging subquery below) are the same bytes.
 */
const FEATURE_JSON = 'f.geojson::json';
import type { Bbox, Kategorie } from '../../../shared/features/schema.js';
import { AppError } from '../../../shared/errors.js';
import { isRefusedValue } from '../db/errors.js';
import type { Expr, Scalar, SpatialOperand } from './cql2.js';
import { filterError } from './cql2.js';
import { CRS84, type Crs } from './crs.js';

/**
 * The SQL of /ogcapi. It is the feature API's SQL (features/queries.ts: the same Feature JSON, the same
 * bbox, kategorie and keyset conditions) plus what only OGC API – Features asks for: datetime on
 * updatedAt, status, a CQL2 filter, coordinates in another CRS and paging backwards. Every value is a
 * parameter; property names become columns only through the QUERYABLES table below.
 */

/** The queryables (Part 3): each maps to one column and one CQL2 type. */
export const QUERYABLES = {
  id: { column: 'f.id', type: 'string', description: 'feature identifier' },
  name: { column: 'f.name', type: 'string', description: 'name, 1 to 255 characters' },
  kategorie: { column: 'f.kategorie', type: 'string', description: 'friedhof, blumenbeet or denkmal', enum: ['friedhof', 'blumenbeet', 'denkmal'] },
  adresse: { column: 'f.adresse', type: 'string', description: 'postal address' },
  telefon: { column: 'f.telefon', type: 'string', description: 'telephone number' },
  status: { column: 'f.status', type: 'string', description: 'QC status', enum: ['draft', 'in_qc', 'approved', 'rejected'] },
  version: { column: 'f.version', type: 'number', description: 'version number, also the ETag' },
  createdBy: { column: 'f.created_by', type: 'string', description: 'user id of the creator' },
  createdAt: { column: 'f.created_at', type: 'timestamp', description: 'creation time' },
  updatedBy: { column: 'f.updated_by', type: 'string', description: 'user id of the last editor' },
  updatedAt: { column: 'f.updated_at', type: 'timestamp', description: 'time of the last change' },
  geometry: { column: 'f.geom', type: 'geometry', description: 'the geometry (Point, LineString, Polygon or MultiPolygon)' },
} as const;
type QueryableName = keyof typeof QUERYABLES;
type ValueType = 'string' | 'number' | 'boolean' | 'timestamp' | 'date' | 'geometry';

/** A bbox in a CRS other than CRS84: corners as given, in that CRS's axis order. */
export interface CrsBox {
  coords: [number, number, number, number];
  crs: Crs;
}

export interface TimeInterval {
  /** Inclusive bounds as RFC 3339 timestamps; undefined is open. */
  start?: string;
  end?: string;
}

export interface OgcListFilter {
  /** A CRS84 bbox, handled by the feature API's own condition. */
  bbox?: Bbox;
  crsBox?: CrsBox;
  kategorie?: Kategorie;
  status?: string;
  datetime?: TimeInterval;
  filter?: { expr: Expr; crs: Crs };
  /** Keyset paging: after this id (forwards) or before it (backwards). */
  after?: string;
  before?: string;
  limit: number;
  crs: Crs;
}

class Params {
  constructor(readonly values: unknown[]) {}
  add(value: unknown, cast: string): string {
    this.values.push(value);
    return `$${this.values.length}::${cast}`;
  }
}

/**
 * A Feature as JSON in the requested CRS: the API's Feature JSON, with the geometry replaced when the
 * CRS is not the storage one (so every property stays exactly what /api/features serves).
 */
export function featureJsonIn(crs: Crs, params: Params): string {
  if (crs === CRS84) return FEATURE_JSON;
  const geometry = crs.srid === 4326 ? 'ST_FlipCoordinates(f.geom)' : `ST_ForcePolygonCCW(ST_Transform(f.geom, ${params.add(crs.srid, 'int')}))`;
  // Projected coordinates are metres: 4 decimals is 0.1 mm.
  const digits = crs.srid === 4326 ? 9 : 4;
  return `jsonb_set((${FEATURE_JSON})::jsonb, '{geometry}', ST_AsGeoJSON(${geometry}, ${digits})::jsonb)`;
}

/**
 * A box as geometries in storage coordinates: one, or two for a box in longitude/latitude (CRS84, or
 * EPSG:4326 once its axes are swapped) whose west edge lies east of its east edge, which crosses the
 * antimeridian. The split is the feature API's bbox= split (envelopesOf), so `bbox=`, `bbox-crs` and a
 * CQL2 BBOX mean the same box.
 *
 * Each part is ST_Envelope of its two corners rather than ST_MakeEnvelope: for a box of zero width or
 * height it is the line or point itself, which intersects what it touches (ST_MakeEnvelope would make
 * a degenerate polygon that does not).
 */
function boxGeometries(coords: readonly number[], crs: Crs, params: Params): string[] {
  let [x1, y1, x2, y2] = coords as [number, number, number, number];
  if (crs.latitudeFirst) [x1, y1, x2, y2] = [y1, x1, y2, x2];
  const srid = params.add(crs.srid, 'int');
  const envelope = ([a, b, c, d]: readonly number[]) =>
    `ST_Envelope(ST_MakeLine(ST_SetSRID(ST_MakePoint(${params.add(a, 'float8')}, ${params.add(b, 'float8')}), ${srid}), ST_SetSRID(ST_MakePoint(${params.add(c, 'float8')}, ${params.add(d, 'float8')}), ${srid})))`;
  if (crs.srid === 4326) return envelopesOf({ minLon: x1, minLat: y1, maxLon: x2, maxLat: y2 }).map(envelope);
  // Densified before the transformation, so the box's edges stay close to straight lines in the source CRS.
  return [`ST_Transform(ST_Segmentize(${envelope([x1, y1, x2, y2])}, greatest(abs(${params.add(x2 - x1, 'float8')}), abs(${params.add(y2 - y1, 'float8')}), 1) / 32), 4326)`];
}

/** The west and east edge of a box in longitude/latitude, read in the axis order of its CRS. */
function westAndEast(coords: readonly number[], crs: Crs): [number, number] {
  return crs.latitudeFirst ? [coords[1]!, coords[3]!] : [coords[0]!, coords[2]!];
}

/** ST_Intersects of two operands, each one geometry or the parts of one (a box across the antimeridian). */
function intersectsEither(left: string[], right: string[]): string {
  const pairs = left.flatMap((l) => right.map((r) => `ST_Intersects(${l}, ${r})`));
  return pairs.length === 1 ? pairs[0]! : `(${pairs.join(' OR ')})`;
}

export function ogcListConditions(filter: Omit<OgcListFilter, 'limit' | 'crs'>, values: unknown[]): string[] {
  const conditions = listConditions({ bbox: filter.bbox, kategorie: filter.kategorie, after: filter.after }, values);
  const params = new Params(values);
  if (filter.crsBox) conditions.push(intersectsAny('f.geom', boxGeometries(filter.crsBox.coords, filter.crsBox.crs, params)));
  if (filter.before !== undefined) conditions.push(...keyConditions('f', { before: filter.before }, values));
  if (filter.status !== undefined) conditions.push(`f.status = ${params.add(filter.status, 'text')}`);
  if (filter.datetime?.start !== undefined) conditions.push(`f.updated_at >= ${params.add(filter.datetime.start, 'timestamptz')}`);
  if (filter.datetime?.end !== undefined) conditions.push(`f.updated_at <= ${params.add(filter.datetime.end, 'timestamptz')}`);
  if (filter.filter) conditions.push(new FilterTranslator(params, filter.filter.crs).condition(filter.filter.expr));
  return conditions;
}

/**
 * One page in id order: forwards after a cursor, or backwards before one (fetched in descending order;
 * the service returns it ascending). One row more than asked tells whether more follow in that
 * direction. Rows are [id, Feature JSON text] (rowMode array), read with readPage and written out as
 * /api/features does: in CRS84 the stored text itself, never parsed.
 *
 * A page chosen by a box alone (bbox or bbox-crs, with kategorie and the cursor at most) is the
 * feature API's box page (features/queries.ts boxPage: candidates by bounding box from
 * features.list_keys, then the page's own rows), so it reads about as many rows as it returns. With
 * status, datetime or a CQL2 filter, conditions on the features' own columns decide, and the page is
 * read from features.features as before.
 */
export function listPage(filter: OgcListFilter): Query {
  const values: unknown[] = [];
  const params = new Params(values);
  const descending = filter.before !== undefined;
  const rows = filter.limit + 1;
  if ((filter.bbox || filter.crsBox) && filter.status === undefined && filter.datetime === undefined && filter.filter === undefined) {
    const areas: string[][] = [];
    if (filter.bbox) areas.push(bboxGeometries(filter.bbox, values));
    if (filter.crsBox) areas.push(boxGeometries(filter.crsBox.coords, filter.crsBox.crs, params));
    const keys = keyConditions('k', { kategorie: filter.kategorie, after: filter.after, before: filter.before }, values);
    return boxPage({ areas, keys, rows, json: featureTextIn(filter.crs, params), descending, values });
  }
  const conditions = ogcListConditions(filter, values);
  const json = featureTextIn(filter.crs, params);
  const limit = params.add(rows, 'int');
  return {
    text: `
      SELECT f.id, ${json}
      FROM features.features f
      ${conditions.length ? `WHERE ${conditions.join(' AND ')}` : ''}
      ORDER BY f.id ${descending ? 'DESC' : 'ASC'}
      LIMIT ${limit}`,
    values,
    rowMode: 'array',
  };
}

/** A Feature's text in the requested CRS: in CRS84 the stored text itself. */
function featureTextIn(crs: Crs, params: Params): string {
  return crs === CRS84 ? 'f.geojson' : `(${featureJsonIn(crs, params)})::text`;
}

export function getFeatureIn(id: string, crs: Crs): Query {
  const values: unknown[] = [id];
  const json = featureJsonIn(crs, new Params(values));
  return {
    text: `SELECT f.version, f.kategorie, (${json})::text AS "featureJson" FROM features.features f WHERE f.id = $1::text`,
    values,
  };
}

/**
 * The stored geometry at full precision (PostGIS writes the shortest text that reads back as the same
 * double): the base of a merge patch, so a patch that leaves the geometry out leaves it bit-identical
 * instead of rounding it to the 9 decimals features are served with.
 */
export function exactGeometry(id: string): Query {
  return { text: `SELECT ST_AsGeoJSON(f.geom, 20) AS "geometryJson" FROM features.features f WHERE f.id = $1::text`, values: [id] };
}

/**
 * How far (in the units of the CRS: metres for every projected CRS offered) a position may move on its
 * way to storage coordinates and back before it counts as outside the CRS's valid domain. A position
 * inside comes back to within a few micrometres (a UTM zone's far edge included); one outside comes
 * back kilometres or more away, or not at all.
 */
export const ROUND_TRIP_TOLERANCE = 0.001;

/**
 * A GeoJSON geometry given in a projected CRS (a write with Content-Crs), as GeoJSON in storage
 * coordinates, with the first position outside the CRS's valid domain (or null).
 *
 * PROJ transforms many positions outside a projection's domain without an error, into wrong places:
 * EPSG:3857 [0, -5e9] becomes the South Pole, a UTM northing beyond the pole a point near the equator.
 * So each position is transformed back and compared with what was sent (positions paired by their order,
 * which ST_Transform keeps); a position that does not come back, or lands outside longitude/latitude,
 * is outside the domain. NaN compares greater than every number in PostgreSQL, so a NaN or an infinite
 * result fails the comparisons too.
 */
export function geometryToStorage(geometryJson: string, crs: Crs): Query {
  return {
    text: `
      WITH given AS (SELECT ST_SetSRID(ST_GeomFromGeoJSON($1::text), $2::int) AS given),
      stored AS (SELECT given, ST_Transform(given, 4326) AS stored FROM given)
      SELECT ST_AsGeoJSON(stored, 15) AS "geometryJson",
        (SELECT ARRAY[ST_X(a.geom), ST_Y(a.geom)]
           FROM ST_DumpPoints(given) WITH ORDINALITY a (path, geom, n)
           JOIN ST_DumpPoints(ST_Transform(stored, $2::int)) WITH ORDINALITY b (path, geom, n) USING (n)
           JOIN ST_DumpPoints(stored) WITH ORDINALITY s (path, geom, n) USING (n)
          WHERE NOT (abs(ST_X(b.geom) - ST_X(a.geom)) <= $3::float8 AND abs(ST_Y(b.geom) - ST_Y(a.geom)) <= $3::float8
                     AND ST_X(s.geom) BETWEEN -180 AND 180 AND ST_Y(s.geom) BETWEEN -90 AND 90)
          ORDER BY n
          LIMIT 1) AS "outside"
      FROM stored`,
    values: [geometryJson, crs.srid, ROUND_TRIP_TOLERANCE],
  };
}

// --- CQL2 → SQL -----------------------------------------------------------------------------------

class FilterTranslator {
  constructor(
    private readonly params: Params,
    private readonly crs: Crs,
  ) {}

  condition(expr: Expr): string {
    switch (expr.kind) {
      case 'and':
      case 'or':
        return `(${expr.args.map((a) => this.condition(a)).join(expr.kind === 'and' ? ' AND ' : ' OR ')})`;
      case 'not':
        return `(NOT ${this.condition(expr.arg)})`;
      case 'literal':
        return expr.value ? 'TRUE' : 'FALSE';
      case 'compare': {
        const [left, right] = this.comparable([expr.left, expr.right], expr.op);
        return `(${left} ${expr.op} ${right})`;
      }
      case 'like': {
        const [value, pattern] = this.comparable([expr.value, expr.pattern], 'LIKE');
        if (this.typeOf(expr.value) !== 'string') throw filterError('LIKE compares strings only', {});
        // CQL2's wildcards are SQL's (% and _), its escape character the backslash, as in PostgreSQL.
        return `(${value} LIKE ${pattern})`;
      }
      case 'between': {
        const [value, low, high] = this.comparable([expr.value, expr.low, expr.high], 'BETWEEN');
        if (this.typeOf(expr.value) !== 'number' && this.typeOf(expr.value) !== 'timestamp') throw filterError('BETWEEN compares numbers or timestamps', {});
        return `(${value} BETWEEN ${low} AND ${high})`;
      }
      case 'in': {
        const [value, ...list] = this.comparable([expr.value, ...expr.list], 'IN');
        return `(${value} IN (${list.join(', ')}))`;
      }
      case 'isNull':
        return `(${this.scalar(expr.value)} IS NULL)`;
      case 's_intersects':
        return intersectsEither(this.spatial(expr.left), this.spatial(expr.right));
    }
  }

  private queryable(name: string): (typeof QUERYABLES)[QueryableName] {
    if (!Object.hasOwn(QUERYABLES, name)) {
      throw filterError(`unknown property ${JSON.stringify(name)}; the queryables are ${Object.keys(QUERYABLES).join(', ')}`, {});
    }
    return QUERYABLES[name as QueryableName];
  }

  private typeOf(s: Scalar): ValueType {
    switch (s.kind) {
      case 'property':
        return this.queryable(s.name).type;
      case 'string':
        return 'string';
      case 'number':
        return 'number';
      case 'boolean':
        return 'boolean';
      case 'timestamp':
        return 'timestamp';
      case 'date':
        return 'date';
      case 'casei':
        if (this.typeOf(s.arg) !== 'string') throw filterError('CASEI applies to strings only', {});
        return 'string';
    }
  }

  /** SQL for operands that must be of one type; a date literal compares with the UTC date of a timestamp. */
  private comparable(operands: Scalar[], op: string): string[] {
    const types = operands.map((s) => this.typeOf(s));
    if (types.includes('geometry')) throw filterError(`${op} does not apply to geometries; use S_INTERSECTS`, {});
    const temporal = types.every((t) => t === 'timestamp' || t === 'date');
    const asDate = temporal && types.includes('date');
    if (!temporal && new Set(types).size > 1) {
      throw filterError(`${op} compares values of one type, not ${[...new Set(types)].join(' and ')}`, {});
    }
    return operands.map((s, i) => {
      const sql = this.scalar(s);
      return asDate && types[i] === 'timestamp' ? `((${sql}) AT TIME ZONE 'UTC')::date` : sql;
    });
  }

  private scalar(s: Scalar): string {
    switch (s.kind) {
      case 'property':
        return this.queryable(s.name).column;
      case 'string':
        return this.params.add(s.value, 'text');
      case 'number':
        return this.params.add(s.value, 'float8');
      case 'boolean':
        return this.params.add(s.value, 'boolean');
      case 'timestamp':
        return this.params.add(s.value, 'timestamptz');
      case 'date':
        return this.params.add(s.value, 'date');
      case 'casei':
        // Unicode lower case (the database's UTF-8 rules) on both sides of the comparison.
        return `lower(${this.scalar(s.arg)})`;
    }
  }

  /** A spatial operand as SQL geometries: one, or the two halves of a box across the antimeridian. */
  private spatial(operand: SpatialOperand): string[] {
    switch (operand.kind) {
      case 'property': {
        const queryable = this.queryable(operand.name);
        if (queryable.type !== 'geometry') throw filterError(`S_INTERSECTS needs a geometry, ${operand.name} is a ${queryable.type}`, {});
        return [queryable.column];
      }
      case 'bbox': {
        const [west, east] = westAndEast(operand.coords, this.crs);
        // Split at ±180, a box reaching beyond would select around the rest of the globe.
        if (this.crs.srid === 4326 && west > east && (Math.abs(west) > 180 || Math.abs(east) > 180)) {
          throw filterError('a BBOX crossing the antimeridian (west greater than east) needs longitudes within [-180, 180]', {});
        }
        return boxGeometries(operand.coords, this.crs, this.params);
      }
      case 'geometry': {
        const geometry = this.crs.latitudeFirst ? flip(operand.geometry) : operand.geometry;
        const literal = `ST_SetSRID(ST_GeomFromGeoJSON(${this.params.add(JSON.stringify(geometry), 'text')}), ${this.params.add(this.crs.srid, 'int')})`;
        return [this.crs.srid === 4326 ? literal : `ST_Transform(${literal}, 4326)`];
      }
    }
  }
}

function flip<T extends { coordinates: unknown }>(geometry: T): T {
  const swap = (c: unknown): unknown => (Array.isArray(c) && typeof c[0] === 'number' ? [c[1], c[0]] : Array.isArray(c) ? c.map(swap) : c);
  return { ...geometry, coordinates: swap(geometry.coordinates) };
}

/**
 * A filter the database could not evaluate (a coordinate outside the domain of filter-crs, a LIKE
 * pattern ending in its escape character, a self-intersecting literal) is the caller's, not the
 * server's: 400 naming the filter, in our words; the database's own message stays in the log (cause).
 */
export function filterEvaluationError(error: unknown): AppError | undefined {
  if (!isRefusedValue(error)) return undefined;
  return filterError('it cannot be evaluated: a geometry in it lies outside the area its CRS (filter-crs) covers, or a value in it is outside what can be compared', {}, error);
}
