import type { Feature } from './types.js';

/** The attributes a person edits or the workflow changes, in display order. */
const DIFFED = ['name', 'kategorie', 'adresse', 'telefon', 'status'] as const;
export type DiffedField = (typeof DIFFED)[number];

/** The attributes that differ between two versions of a feature (empty and missing count as equal). */
export function attributeDiff(before: Feature, after: Feature): Array<{ field: DiffedField; before: unknown; after: unknown }> {
  const norm = (value: unknown) => (value === undefined || value === '' ? null : value);
  return DIFFED.filter((field) => norm(before.properties[field]) !== norm(after.properties[field])).map((field) => ({
    field,
    before: before.properties[field] ?? null,
    after: after.properties[field] ?? null,
  }));
}
