import type { Geometry } from '../../../../shared/features/schema.js';
import { EDITABLE_FIELDS, type EditableField } from '../types.js';

/**
 * The three-way merge of an offline edit that met a newer version on the server (412). Per field and
 * for the geometry: base (what the edit started from), mine (the offline edit), theirs (the server now).
 * A field changed on one side only takes that side by itself; only a field both sides changed to
 * different values is a conflict the user decides.
 */
export type MergeField = EditableField | 'geometry';
export const MERGE_FIELDS: readonly MergeField[] = [...EDITABLE_FIELDS, 'geometry'];

export interface MergeInput {
  properties: Record<EditableField, string | null>;
  geometry: Geometry;
}

export interface MergeOutcome {
  /** The merged values, conflicting fields filled with mine until the user decides. */
  merged: MergeInput;
  /** Fields both sides changed differently: the user chooses. */
  conflicts: MergeField[];
  /** Fields taken from theirs by themselves (changed on the server only). */
  fromTheirs: MergeField[];
}

const valueOf = (side: MergeInput, field: MergeField): unknown => (field === 'geometry' ? side.geometry : (side.properties[field] ?? null));
const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

export function threeWayMerge(base: MergeInput, mine: MergeInput, theirs: MergeInput): MergeOutcome {
  const merged: MergeInput = { properties: { ...mine.properties }, geometry: mine.geometry };
  const conflicts: MergeField[] = [];
  const fromTheirs: MergeField[] = [];
  for (const field of MERGE_FIELDS) {
    const [b, m, t] = [valueOf(base, field), valueOf(mine, field), valueOf(theirs, field)];
    const mineChanged = !same(b, m);
    const theirsChanged = !same(b, t);
    if (theirsChanged && !mineChanged) {
      fromTheirs.push(field);
      setField(merged, field, t);
    } else if (mineChanged && theirsChanged && !same(m, t)) conflicts.push(field);
  }
  return { merged, conflicts, fromTheirs };
}

/**
 * The history note of a saved merge (X-Edit-Note): which fields came from the offline edit (mine) and
 * which from the server (theirs), so a resolved conflict is never silent. Field names, not values:
 * the versions themselves are in the history.
 */
export function mergeNote(base: MergeInput, mine: MergeInput, theirs: MergeInput, merged: MergeInput): string {
  const fromMine: MergeField[] = [];
  const fromTheirs: MergeField[] = [];
  for (const field of MERGE_FIELDS) {
    const [b, m, t, r] = [valueOf(base, field), valueOf(mine, field), valueOf(theirs, field), valueOf(merged, field)];
    if (same(r, m) && !same(m, b)) fromMine.push(field);
    else if (same(r, t) && !same(t, b)) fromTheirs.push(field);
  }
  const list = (fields: MergeField[]) => (fields.length ? fields.join(', ') : 'no field');
  return `merged offline edit: ${list(fromMine)} from mine; ${list(fromTheirs)} from theirs`;
}

export function setField(target: MergeInput, field: MergeField, value: unknown): void {
  if (field === 'geometry') target.geometry = value as Geometry;
  else target.properties[field] = (value as string | null) ?? null;
}

export function fieldValue(side: MergeInput, field: MergeField): unknown {
  return valueOf(side, field);
}
