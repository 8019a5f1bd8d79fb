import type { Principal } from '../../../shared/principal.js';
import type { Bbox } from '../../../shared/features/schema.js';
import { AppError } from '../../../shared/errors.js';
import { query, withTransaction, type Db } from '../db/pool.js';
import { DEFAULT_THRESHOLDS, mySubmissions, reviewItem, type CheckThresholds } from './checks-queries.js';

/**
 * The review view's data (docs/qc.md "Review checks" and "My submissions"): checks a reviewer should
 * know about, computed by PostGIS and listed, never blocking a decision; the last approved version
 * for the diff; and a contributor's own submissions with their outcome.
 */
export interface CheckSettings {
  /** The city's extent (QC_CITY_EXTENT); without it the outside_city check does not run. */
  cityExtent?: Bbox | undefined;
  thresholds?: Partial<CheckThresholds>;
}

export function createCheckService(db: Db, settings: CheckSettings = {}) {
  const thresholds = { ...DEFAULT_THRESHOLDS, ...settings.thresholds };
  return {
    /** The QC item of a feature as JSON text; 404 when the feature does not exist (now). */
    async item(featureId: string): Promise<string> {
      // The checks' set-returning functions (ST_DumpPoints, generate_series) inflate the planner's
      // cost estimate past the JIT threshold; compiling then takes seconds for a millisecond query.
      const { rows } = await withTransaction(db, async (client) => {
        await query(client, { text: 'SET LOCAL jit = off', values: [] });
        return query(client, reviewItem(featureId, thresholds, settings.cityExtent));
      });
      const row = rows[0] as { json: string } | undefined;
      if (!row) throw new AppError('FEATURE_NOT_FOUND', `no feature with id ${featureId}`);
      return row.json;
    },

    /** The caller's submissions, the latest first, as a JSON array text. */
    async mine(principal: Principal, limit: number): Promise<string> {
      if (principal.id === null) throw new AppError('UNAUTHENTICATED', 'authentication required');
      const { rows } = await query(db, mySubmissions(principal.id, limit));
      return (rows[0] as { json: string }).json;
    },
  };
}

export type CheckService = ReturnType<typeof createCheckService>;

