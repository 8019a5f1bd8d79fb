import { assertMayUpdate } from '../auth/permissions.js';
import type { Principal } from '../../../shared/principal.js';
import { invalidGeometry } from '../db/errors.js';
import { query, withTransaction, type Db, type DbClient } from '../db/pool.js';
import { AppError } from '../../../shared/errors.js';
import * as sql from './queries.js';
import type { FeatureInput, ListQuery } from '../../../shared/features/schema.js';
import { DEFAULT_LIMIT } from '../../../shared/features/schema.js';
import { setImmediate as nextTurn } from 'node:timers/promises';

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
  /** The features' stored GeoJSON texts, in page order, written out by routes.ts sendEnvelope. */
  features: string[];
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

export interface FeatureServiceOptions {
  /** Called after every committed change of a feature's data (the /ogcapi extent cache listens). */
  onWrite?: () => void;
}

export function createFeatureService(db: Db, options: FeatureServiceOptions = {}) {
  const changed = options.onWrite ?? (() => undefined);
  return {
    async list(filter: ListQuery, after: string | undefined): Promise<FeaturePage> {
      const limit = filter.limit ?? DEFAULT_LIMIT;
      const read = async (from: string | undefined, rows: number) =>
        (await query(db, sql.listFeatures({ bbox: filter.bbox, kategorie: filter.kategorie, after: from, limit: rows - 1 }))).rows;
      const all = await sql.readPage(read, after, limit + 1);
      const hasMore = all.length > limit;
      const count = Math.min(all.length, limit);
      const features = new Array<string>(count);
      for (let i = 0; i < count; i++) features[i] = all[i]![1];
      return { features, count, nextAfter: hasMore ? all[count - 1]![0] : null };
    },

    async get(id: string): Promise<FeatureDocument> {
      const { rows } = await query(db, sql.getFeature(id));
      const row = rows[0] as { version: number; featureJson: string } | undefined;
      if (!row) throw notFound(id);
      return { version: row.version, json: row.featureJson };
    },

    async create(principal: Principal, input: FeatureInput): Promise<FeatureDocument & { id: string }> {
      // One statement, so one implicit transaction: the actor, the topology check and the insert.
      const { rows } = await query(db, sql.insertFeature(input.id, await valuesOf(input), principal.id));
      const row = rows[0] as { id: string; version: number; featureJson: string };
      changed();
      return { id: row.id, version: row.version, json: row.featureJson };
    },

    /**
     * Replace the editable data. Data equal to the current version as served (a fetched feature sent
     * back) changes nothing: no new version, no history row, the QC status kept; the answer is the
     * current feature.
     */
    async replace(principal: Principal, id: string, input: FeatureInput, expected: ExpectedVersion, note?: string): Promise<FeatureDocument> {
      if (input.id !== undefined && input.id !== id) {
        throw new AppError('VALIDATION_FAILED', `invalid feature: id: must equal the id in the URL (${id})`, {
          fields: [{ field: 'id', message: `must equal the id in the URL (${id})` }],
        });
      }
      const values = await valuesOf(input);
      const replaced = await withTransaction(db, async (client) => {
        const { rows: locked } = await query(client, sql.lockFeature(id, values));
        const current = locked[0] as { version: number; createdBy: string | null; status: string; featureJson: string; unchanged: boolean } | undefined;
        if (!current) throw notFound(id);
        assertMayUpdate(principal, current.createdBy);
        assertPrecondition(expected, current.version);
        assertNotInQc(current.status);
        if (current.unchanged) return { version: current.version, json: current.featureJson };
        await assertValidGeometry(client, values.geometryJson);
        // The history trigger (migration 014) stores the note with the version this update makes.
        if (note) await query(client, sql.setEditNote(note));
        const { rows } = await query(client, sql.replaceFeature(id, values));
        const row = rows[0] as { version: number; featureJson: string };
        return { version: row.version, json: row.featureJson };
      }, { actor: principal.id });
      changed();
      return replaced;
    },

    async remove(principal: Principal, id: string, expected: ExpectedVersion): Promise<void> {
      await withTransaction(db, async (client) => {
        const current = await lockOrThrow(client, id);
        assertPrecondition(expected, current.version);
        assertNotInQc(current.status);
        await query(client, sql.deleteFeature(id));
      }, { actor: principal.id });
      changed();
    },

    /** The versions and the exports' conflation decisions, each as JSON text, newest first. */
    async history(id: string): Promise<{ versionsJson: string; decisionsJson: string }> {
      const { rows } = await query(db, sql.featureHistory(id));
      const row = rows[0] as { versionsJson: string; decisionsJson: string; count: number };
      if (row.count === 0) {
        // No history at all: the feature never existed (a deleted one keeps its rows).
        throw notFound(id);
      }
      return { versionsJson: row.versionsJson, decisionsJson: row.decisionsJson };
    },
  };
}

export type FeatureService = ReturnType<typeof createFeatureService>;

function notFound(id: string): AppError {
  return new AppError('FEATURE_NOT_FOUND', `no feature with id ${id}`);
}

/** Decimal places coordinates are stored and served with (1e-9 degrees is about 0.1 mm). */
export const COORDINATE_DECIMALS = 9;

/**
 * Geometries with more positions than this are rounded and written out in a turn of the event loop of
 * their own, after the one that validated them: for a 0.95 MB polygon (45 000 positions) validation
 * and rounding take about 10 and 30 ms, which together would hold the loop for others twice as long.
 */
const YIELD_OVER_POSITIONS = 5_000;

function positionCount(geometry: FeatureInput['geometry']): number {
  switch (geometry.type) {
    case 'Point':
      return 1;
    case 'LineString':
      return geometry.coordinates.length;
    case 'Polygon':
      return geometry.coordinates.reduce((n, ring) => n + ring.length, 0);
    case 'MultiPolygon':
      return geometry.coordinates.reduce((n, polygon) => n + polygon.reduce((m, ring) => m + ring.length, 0), 0);
  }
}

async function valuesOf(input: FeatureInput): Promise<sql.FeatureValues> {
  if (positionCount(input.geometry) > YIELD_OVER_POSITIONS) await nextTurn();
  return {
    name: input.properties.name,
    kategorie: input.properties.kategorie,
    adresse: input.properties.adresse ?? null,
    telefon: input.properties.telefon ?? null,
    geometryJson: JSON.stringify({ type: input.geometry.type, coordinates: roundCoordinates(input.geometry.coordinates) }),
  };
}

/**
 * Coordinates as stored: rounded to COORDINATE_DECIMALS, the precision they are served with, so a
 * fetched feature sent back is the same feature. toFixed rounds the decimal correctly and Number
 * reads back the double nearest to it, which PostGIS prints as that same decimal. The bbox member is
 * left out (checked by the schema, not stored).
 */
export function roundCoordinates<T>(coordinates: T): T {
  if (typeof coordinates === 'number') return (Number(coordinates.toFixed(COORDINATE_DECIMALS)) + 0) as T; // + 0: no -0
  if (Array.isArray(coordinates)) return coordinates.map(roundCoordinates) as T;
  return coordinates;
}



async function lockOrThrow(client: DbClient, id: string): Promise<{ version: number; createdBy: string | null; status: string }> {
  const { rows } = await query(client, sql.lockFeature(id));
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

async function assertValidGeometry(client: DbClient, geometryJson: string): Promise<void> {
  const { rows } = await query(client, sql.checkGeometry(geometryJson));
  const row = rows[0] as { valid: boolean; reason: string };
  if (!row.valid) throw invalidGeometry(row.reason);
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
