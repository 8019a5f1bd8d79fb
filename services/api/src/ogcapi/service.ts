import { fromDatabaseError } from '../db/errors.js';
import { query, type Db } from '../db/pool.js';
import { readPage } from '../features/queries.js';
import { AppError } from '../../../shared/errors.js';
import type { Crs } from './crs.js';
import { exactGeometry, filterEvaluationError, geometryToStorage, getFeatureIn, listPage, type OgcListFilter } from './queries.js';

/**
 * The reads of /ogcapi. Writes are not here: the routes call the feature API's own service
 * (features/service.ts), so roles, If-Match, the QC rules and the history are the same code.
 */

export interface OgcPage {
  /** The features' GeoJSON texts in page order (ascending ids), written out by features/routes.ts sendEnvelope. */
  features: string[];
  count: number;
  firstId: string | null;
  lastId: string | null;
  /** More features follow in the direction of the request (after: forwards, before: backwards). */
  hasMore: boolean;
}

export interface OgcFeature {
  version: number;
  kategorie: string;
  json: string;
}

export function createOgcReadService(db: Db) {
  return {
    async list(filter: OgcListFilter): Promise<OgcPage> {
      const backwards = filter.before !== undefined;
      const read = async (from: string | undefined, rows: number) =>
        (await query(db, listPage({ ...filter, ...(backwards ? { before: from } : { after: from }), limit: rows - 1 }), filter.filter !== undefined ? refusedFilteredRead : refusedRead)).rows;
      const all = await readPage(read, backwards ? filter.before : filter.after, filter.limit + 1);
      const hasMore = all.length > filter.limit;
      const page = hasMore ? all.slice(0, filter.limit) : all;
      // A backwards page was read in descending order; pages are always served ascending.
      if (backwards) page.reverse();
      return {
        features: page.map((row) => row[1]),
        count: page.length,
        firstId: page[0]?.[0] ?? null,
        lastId: page[page.length - 1]?.[0] ?? null,
        hasMore,
      };
    },

    async get(id: string, crs: Crs): Promise<OgcFeature | undefined> {
      const { rows } = await query(db, getFeatureIn(id, crs), refusedRead);
      const row = rows[0] as { version: number; kategorie: string; featureJson: string } | undefined;
      return row && { version: row.version, kategorie: row.kategorie, json: row.featureJson };
    },

    async exactGeometry(id: string): Promise<unknown> {
      const { rows } = await query(db, exactGeometry(id), refusedRead);
      const row = rows[0] as { geometryJson: string } | undefined;
      return row && JSON.parse(row.geometryJson);
    },

    /**
     * A geometry in a projected CRS transformed to storage coordinates by PostGIS; a position outside
     * the CRS's valid domain (queries.ts geometryToStorage) is a 400 naming the coordinates.
     */
    async geometryToStorage(geometry: unknown, crs: Crs): Promise<unknown> {
      const { rows } = await query(db, geometryToStorage(JSON.stringify(geometry), crs), (error) => {
        const unavailable = fromDatabaseError(error);
        if (unavailable?.statusCode === 503) return unavailable;
        return new AppError('VALIDATION_FAILED', `invalid feature: geometry: is not a geometry PostGIS can transform from ${crs.uri}`, {
          fields: [{ field: 'geometry', message: `is not a geometry PostGIS can transform from ${crs.uri}` }],
          cause: error,
        });
      });
      const row = rows[0] as { geometryJson: string; outside: number[] | null };
      if (row.outside !== null) {
        const message = `position [${row.outside.join(', ')}] lies outside the valid domain of ${crs.uri}: it does not transform to longitude/latitude and back`;
        throw new AppError('VALIDATION_FAILED', `invalid feature: geometry.coordinates: ${message}`, { fields: [{ field: 'geometry.coordinates', message }] });
      }
      return JSON.parse(row.geometryJson);
    },
  };
}

export type OgcReadService = ReturnType<typeof createOgcReadService>;

/**
 * What a read's failure means for the request (db/pool.ts query asks this first): a transformation
 * PostGIS cannot do (a coordinate outside the requested CRS's domain, which db/errors.ts does not
 * take for a geometry error) is the query's fault.
 */
function refusedRead(error: unknown): AppError | undefined {
  if ((error as { code?: unknown } | null)?.code === 'XX000' && !fromDatabaseError(error)) {
    return new AppError('INVALID_QUERY', 'the coordinates could not be transformed into the requested CRS', { statusCode: 400, cause: error });
  }
  return undefined;
}

/** The same for a read with a CQL2 filter: a value the database cannot evaluate is the filter's fault first. */
function refusedFilteredRead(error: unknown): AppError | undefined {
  return filterEvaluationError(error) ?? refusedRead(error);
}
