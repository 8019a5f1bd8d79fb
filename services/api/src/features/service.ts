import { assertMayUpdate } from '../auth/permissions.js';
import type { Principal } from '../../../shared/principal.js';
import { fromDatabaseError } from '../db/errors.js';
import { withTransaction, type Db, type DbClient, type Queryable } from '../db/pool.js';
import { AppError } from '../../../shared/errors.js';
import * as sql from './queries.js';
import type { FeatureInput, ListQuery } from '../../../shared/features/schema.js';
import { DEFAULT_LIMIT } from '../../../shared/features/schema.js';

/**
 * What the feature endpoints do, independent of HTTP: reads, and changes that run in one
 * transaction with the caller recorded as the history actor. Feature bodies come back as JSON text
 * built by Postgres, so they are forwarded without being parsed and serialised again.
 */

export interface FeatureDocument {
  version: number;
  json: string;
}

export interface FeaturePage {
  featuresJson: string;
  count: number;
  /** Id of the last feature on this page when another page follows. */
  nextAfter: string | null;
}

/**
 * The versions a caller accepts, from If-Match: undefined means no precondition, '*' any existing
 * version, a list the listed ones (empty when only weak or malformed tags were sent: never matches,
 * as If-Match compares strongly).
 */
export type ExpectedVersion = readonly number[] | '*' | undefined;

export function createFeatureService(db: Db) {
  return {
    async list(query: ListQuery, after: string | undefined): Promise<FeaturePage> {
      const limit = query.limit ?? DEFAULT_LIMIT;
      const { rows } = await run(db, sql.listFeatures({ bbox: query.bbox, kategorie: query.kategorie, after, limit }));
      const row = rows[0] as { hasMore: boolean; lastId: string | null; count: number; featuresJson: string };
      return { featuresJson: row.featuresJson, count: row.count, nextAfter: row.hasMore ? row.lastId : null };
    },

    async get(id: string): Promise<FeatureDocument> {
      const { rows } = await run(db, sql.getFeature(id));
      const row = rows[0] as { version: number; featureJson: string } | undefined;
      if (!row) throw notFound(id);
      return { version: row.version, json: row.featureJson };
    },

    async create(principal: Principal, input: FeatureInput): Promise<FeatureDocument & { id: string }> {
      return transaction(db, principal, async (client) => {
        await assertValidGeometry(client, input);
        const { rows } = await run(client, sql.insertFeature(input.id, valuesOf(input), principal.id));
        const row = rows[0] as { id: string; version: number; featureJson: string };
        return { id: row.id, version: row.version, json: row.featureJson };
      });
    },

    async replace(principal: Principal, id: string, input: FeatureInput, expected: ExpectedVersion): Promise<FeatureDocument> {
      if (input.id !== undefined && input.id !== id) {
        throw new AppError('VALIDATION_FAILED', `invalid feature: id: must equal the id in the URL (${id})`, {
          fields: [{ field: 'id', message: `must equal the id in the URL (${id})` }],
        });
      }
      return transaction(db, principal, async (client) => {
        const current = await lockOrThrow(client, id);
        assertMayUpdate(principal, current.createdBy);
        assertPrecondition(expected, current.version);
        assertNotInQc(current.status);
        await assertValidGeometry(client, input);
        const { rows } = await run(client, sql.replaceFeature(id, valuesOf(input)));
        const row = rows[0] as { version: number; featureJson: string };
        return { version: row.version, json: row.featureJson };
      });
    },

    async remove(principal: Principal, id: string, expected: ExpectedVersion): Promise<void> {
      await transaction(db, principal, async (client) => {
        const current = await lockOrThrow(client, id);
        assertPrecondition(expected, current.version);
        assertNotInQc(current.status);
        await run(client, sql.deleteFeature(id));
      });
    },

    async history(id: string): Promise<string> {
      const { rows } = await run(db, sql.featureHistory(id));
      const row = rows[0] as { versionsJson: string; count: number };
      if (row.count === 0) {
        // No history at all: the feature never existed (a deleted one keeps its rows).
        throw notFound(id);
      }
      return row.versionsJson;
    },
  };
}

export type FeatureService = ReturnType<typeof createFeatureService>;

function notFound(id: string): AppError {
  return new AppError('FEATURE_NOT_FOUND', `no feature with id ${id}`);
}

function valuesOf(input: FeatureInput): sql.FeatureValues {
  return {
    name: input.properties.name,
    kategorie: input.properties.kategorie,
    adresse: input.properties.adresse ?? null,
    telefon: input.properties.telefon ?? null,
    geometryJson: JSON.stringify(input.geometry),
  };
}

async function run(db: Queryable, query: sql.Query) {
  try {
    return await db.query(query.text, query.values);
  } catch (error) {
    throw fromDatabaseError(error) ?? error;
  }
}

async function transaction<T>(db: Db, principal: Principal, work: (client: DbClient) => Promise<T>): Promise<T> {
  try {
    return await withTransaction(db, work, { actor: principal.id });
  } catch (error) {
    throw fromDatabaseError(error) ?? error;
  }
}

async function lockOrThrow(client: DbClient, id: string): Promise<{ version: number; createdBy: string | null; status: string }> {
  const { rows } = await run(client, sql.lockFeature(id));
  const row = rows[0] as { version: number; createdBy: string | null; status: string } | undefined;
  if (!row) throw notFound(id);
  return row;
}

/** A feature under review stays as submitted until a reviewer decides (docs/qc.md). */
function assertNotInQc(status: string): void {
  if (status === 'in_qc') throw new AppError('INVALID_STATE', 'the feature is in review (in_qc); it can be changed or deleted once a reviewer has approved or rejected it');
}

function assertPrecondition(expected: ExpectedVersion, current: number): void {
  if (expected === undefined || expected === '*' || expected.includes(current)) return;
  throw new AppError('PRECONDITION_FAILED', `the feature is at version ${current}; fetch it again and reapply your change`, {
    headers: { ETag: etagOf(current) },
  });
}

async function assertValidGeometry(client: DbClient, input: FeatureInput): Promise<void> {
  const { rows } = await run(client, sql.checkGeometry(JSON.stringify(input.geometry)));
  const row = rows[0] as { valid: boolean; reason: string };
  if (!row.valid) {
    throw new AppError('VALIDATION_FAILED', `invalid feature: geometry: ${row.reason}`, {
      fields: [{ field: 'geometry', message: `is not valid: ${row.reason}` }],
    });
  }
}

/** Strong entity tag of a feature version. */
export function etagOf(version: number): string {
  return `"${version}"`;
}

/** Parse If-Match (RFC 9110 §13.1.1) into the versions it accepts. */
export function parseIfMatch(header: string | undefined): ExpectedVersion {
  if (header === undefined) return undefined;
  if (header.trim() === '*') return '*';
  const versions: number[] = [];
  for (const tag of header.split(',')) {
    const match = /^\s*"(\d{1,9})"\s*$/.exec(tag);
    if (match) versions.push(Number(match[1]));
  }
  return versions;
}
