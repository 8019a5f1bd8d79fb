import { setImmediate as nextTurn } from 'node:timers/promises';
import { AppError, type FieldError } from '../../../shared/errors.js';
import { EDIT_NOTE_MAX, FeatureSchema, type FeatureInput } from '../../../shared/features/schema.js';
import type { Principal } from '../../../shared/principal.js';
import { query, withTransaction, type Db } from '../db/pool.js';
import { roundCoordinates } from '../features/service.js';
import { fieldErrors } from '../http/validate.js';
import { convert, type ConvertedFile, type SourceRow } from './convert.js';
import * as sql from './queries.js';

/**
 * Bulk import of features from a file: read with GDAL (imports/convert.ts), each row's attributes
 * mapped onto name, kategorie, adresse and telefon, each row checked exactly as POST /api/features
 * checks a feature (the shared zod FeatureSchema, then PostGIS' validity), and the valid rows written
 * in one transaction under one change note, which the history stores with every version it makes.
 * `check` is the dry run (nothing written); `commit` writes. Work is done in chunks of CHUNK rows with
 * a turn of the event loop between them, so a large import never holds other requests up for long.
 */
export const TARGETS = ['name', 'kategorie', 'adresse', 'telefon'] as const;
export type Target = (typeof TARGETS)[number];
/** Which source attribute feeds each property; a property left out is empty (name and kategorie are required). */
export type Mapping = Partial<Record<Target, string>>;

const CHUNK = 500;
/** At most this many rows' problems are listed in an answer; the counts cover all. */
export const MAX_LISTED_INVALID = 1_000;

/** Source attribute names taken for a property when the caller maps nothing (compared ignoring case). */
const GUESSES: Record<Target, string[]> = {
  name: ['name', 'bezeichnung', 'titel', 'title', 'label'],
  kategorie: ['kategorie', 'category', 'kategorie_', 'typ', 'type', 'art'],
  adresse: ['adresse', 'address', 'anschrift', 'addr'],
  telefon: ['telefon', 'phone', 'tel', 'telephone', 'telefonnummer'],
};

export interface RowResult {
  row: number;
  /** The feature as it would be created (geometry and the mapped properties). */
  feature: { type: 'Feature'; geometry: unknown; properties: Record<string, unknown> };
  /** Empty when the row is valid. */
  errors: FieldError[];
}

export interface CheckResult {
  format: ConvertedFile['format'];
  layer: string;
  fields: string[];
  mapping: Mapping;
  total: number;
  valid: number;
  invalid: number;
  rows: RowResult[];
}

export interface CommitResult {
  imported: number;
  invalid: number;
  /** The invalid rows (at most MAX_LISTED_INVALID) with their problems. */
  rejected: Array<{ row: number; errors: FieldError[] }>;
  note: string;
}

export function guessMapping(fields: string[]): Mapping {
  const mapping: Mapping = {};
  for (const target of TARGETS) {
    // A Shapefile's DBF cuts attribute names to 10 characters (Bezeichnung → Bezeichnun).
    const found = GUESSES[target].map((guess) => fields.find((f) => f.toLowerCase() === guess || (f.length === 10 && guess.startsWith(f.toLowerCase())))).find((f) => f !== undefined);
    if (found !== undefined) mapping[target] = found;
  }
  return mapping;
}

export function createImportService(db: Db, options: { onWrite?: () => void } = {}) {
  /** Every row mapped and validated; the valid ones with the values to insert. */
  async function validate(file: ConvertedFile, requested: Mapping | undefined): Promise<{ mapping: Mapping; results: RowResult[]; valid: Array<{ row: number; values: sql.ImportRow }> }> {
    for (const [target, field] of Object.entries(requested ?? {})) {
      if (field !== undefined && field !== '' && !file.fields.includes(field)) {
        throw new AppError('VALIDATION_FAILED', `invalid mapping: ${target}: the file has no attribute ${field.slice(0, 100)}`, { fields: [{ field: target, message: `the file has no attribute ${field.slice(0, 100)}` }] });
      }
    }
    const mapping = requested ?? guessMapping(file.fields);
    const results: RowResult[] = [];
    const valid: Array<{ row: number; values: sql.ImportRow }> = [];
    for (let start = 0; start < file.rows.length; start += CHUNK) {
      const chunk = file.rows.slice(start, start + CHUNK);
      const parsed: Array<{ result: RowResult; input?: FeatureInput }> = chunk.map((source) => {
        const feature = mapRow(source, mapping);
        const outcome = FeatureSchema.safeParse(feature);
        const result: RowResult = { row: source.row, feature, errors: outcome.success ? [] : rowErrors(source, outcome.error) };
        return outcome.success ? { result, input: outcome.data } : { result };
      });
      const geometries = parsed.flatMap(({ input }, i) => (input ? [{ i, g: JSON.stringify({ type: input.geometry.type, coordinates: roundCoordinates(input.geometry.coordinates) }) }] : []));
      if (geometries.length > 0) {
        const { rows } = await query(db, sql.invalidGeometries(geometries));
        for (const { i, reason } of rows as Array<{ i: number; reason: string }>) {
          parsed[i]!.result.errors.push({ field: 'geometry', message: `is not a valid geometry: ${reason}` });
          delete parsed[i]!.input;
        }
        const byIndex = new Map(geometries.map((g) => [g.i, g.g]));
        parsed.forEach(({ input, result }, i) => {
          if (!input) return;
          const p = input.properties;
          valid.push({ row: result.row, values: { name: p.name, kategorie: p.kategorie, adresse: p.adresse ?? null, telefon: p.telefon ?? null, geometry: byIndex.get(i)! } });
        });
      }
      results.push(...parsed.map((p) => p.result));
      await nextTurn();
    }
    return { mapping, results, valid };
  }

  return {
    /** The dry run: what an import of this file with this mapping would write, row by row. */
    async check(filename: string, bytes: Buffer, mapping: Mapping | undefined): Promise<CheckResult> {
      const file = await convert(filename, bytes);
      const { mapping: used, results, valid } = await validate(file, mapping);
      return { format: file.format, layer: file.layer, fields: file.fields, mapping: used, total: results.length, valid: valid.length, invalid: results.length - valid.length, rows: results };
    },

    /**
     * Writes the valid rows in one transaction as the caller, with one change note for all of them
     * (stored on every version the import makes); the invalid rows are reported and not written. A file
     * without a valid row is a 400 listing the problems, and writes nothing.
     */
    async commit(principal: Principal, filename: string, bytes: Buffer, mapping: Mapping | undefined, note?: string): Promise<CommitResult> {
      const file = await convert(filename, bytes);
      return this.commitRows(principal, file, mapping, note ?? `import of ${filename.slice(0, 200)}`);
    },

    /** commit() for rows already read (the seed builds them itself). */
    async commitRows(principal: Principal, file: ConvertedFile, mapping: Mapping | undefined, noteText: string): Promise<CommitResult> {
      const { results, valid } = await validate(file, mapping);
      const rejected = results.filter((r) => r.errors.length > 0);
      const listed = rejected.slice(0, MAX_LISTED_INVALID).map((r) => ({ row: r.row, errors: r.errors }));
      if (valid.length === 0) {
        throw new AppError('VALIDATION_FAILED', `nothing to import: none of the ${results.length} rows is a valid feature${listed[0] ? ` (row ${listed[0].row}: ${listed[0].errors.map((e) => `${e.field}: ${e.message}`).join('; ')})` : ''}`, {
          fields: listed.slice(0, 20).flatMap((r) => r.errors.slice(0, 1).map((e) => ({ field: `row ${r.row}: ${e.field}`, message: e.message }))),
        });
      }
      const note = noteFor(noteText, valid.length);
      await withTransaction(
        db,
        async (client) => {
          await query(client, { text: `SELECT set_config('app.edit_note', $1::text, true)`, values: [note] });
          for (let start = 0; start < valid.length; start += CHUNK) {
            await query(client, sql.insertRows(valid.slice(start, start + CHUNK).map((v) => v.values), principal.id));
            await nextTurn();
          }
        },
        { actor: principal.id },
      );
      options.onWrite?.();
      return { imported: valid.length, invalid: rejected.length, rejected: listed, note };
    },
  };
}

export type ImportService = ReturnType<typeof createImportService>;

/** The history note of an import: one printable line of at most EDIT_NOTE_MAX characters. */
function noteFor(text: string, count: number): string {
  // eslint-disable-next-line no-control-regex -- control characters are what is removed
  const line = `${text.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim()} (${count} features)`;
  return [...line].slice(0, EDIT_NOTE_MAX).join('');
}

/** A source row as the feature it would become: the geometry (single parts unwrapped) and the mapped attributes. */
function mapRow(source: SourceRow, mapping: Mapping): RowResult['feature'] {
  const properties: Record<string, unknown> = {};
  for (const target of TARGETS) {
    const field = mapping[target];
    const raw = field === undefined ? undefined : source.attributes[field];
    if (raw === undefined || raw === null) continue;
    let value = typeof raw === 'string' ? raw : typeof raw === 'number' || typeof raw === 'boolean' ? String(raw) : JSON.stringify(raw);
    if (target === 'kategorie') value = value.trim().toLowerCase();
    else if (target !== 'name') value = value.trim();
    if (value === '' && target !== 'name') continue;
    properties[target] = value;
  }
  return { type: 'Feature', geometry: singlePart(source.geometry), properties };
}

/** A multi-geometry of one part as that part (Shapefiles and GeoPackages often store single lines as multi). */
function singlePart(geometry: SourceRow['geometry']): unknown {
  if (!geometry) return null;
  const c = geometry.coordinates as unknown[] | undefined;
  if (geometry.type === 'MultiPoint' && c?.length === 1) return { type: 'Point', coordinates: c[0] };
  if (geometry.type === 'MultiLineString' && c?.length === 1) return { type: 'LineString', coordinates: c[0] };
  return geometry;
}

function rowErrors(source: SourceRow, error: Parameters<typeof fieldErrors>[0]): FieldError[] {
  if (!source.geometry) return [{ field: 'geometry', message: 'is missing (no coordinates or WKT that could be read)' }, ...fieldErrors(error).fields.filter((f) => !f.field.startsWith('geometry'))];
  return fieldErrors(error).fields;
}
