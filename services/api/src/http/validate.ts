import type { z } from 'zod';
import { AppError, type FieldError } from '../../../shared/errors.js';

/**
 * A zod path as a readable field name: properties.name, geometry.coordinates[0][3]. A member name
 * longer than 64 characters is cut there (with …): an answer never echoes a megabyte of key.
 */
export function fieldName(path: readonly PropertyKey[]): string {
  let name = '';
  for (const key of path) {
    if (typeof key === 'number') {
      name += `[${key}]`;
      continue;
    }
    const text = String(key);
    const shown = text.length > 64 ? `${text.slice(0, 64)}…` : text;
    name += name ? `.${shown}` : shown;
  }
  return name;
}

/** At most this many offending fields are listed in a 400 (docs/api.md, "Limits"); the detail counts the rest. */
export const MAX_FIELD_ERRORS = 20;

/**
 * The first MAX_FIELD_ERRORS distinct field errors of a zod error, and how many there were in all. A
 * union reports the same problem once per member, and those are said once; the work is linear in the
 * number of issues, whatever their count.
 */
export function fieldErrors(error: z.ZodError): { fields: FieldError[]; total: number } {
  const fields: FieldError[] = [];
  const seen = new Set<string>();
  let total = 0;
  const add = (field: string, message: string) => {
    const key = `${field}\u0000${message}`;
    if (seen.has(key)) return;
    seen.add(key);
    total++;
    if (fields.length < MAX_FIELD_ERRORS) fields.push({ field, message });
  };
  for (const issue of error.issues) {
    if (issue.code === 'unrecognized_keys') {
      // Member names are distinct: those past the cap are counted without being named.
      for (const key of issue.keys.slice(0, MAX_FIELD_ERRORS)) add(fieldName([...issue.path, key]), 'is not a known property');
      total += Math.max(0, issue.keys.length - MAX_FIELD_ERRORS);
      continue;
    }
    add(fieldName(issue.path) || '(body)', issue.message);
  }
  return { fields, total };
}

/** Parse or throw a 400 whose message and field list name the offending fields (the first MAX_FIELD_ERRORS). */
export function parseOrThrow<S extends z.ZodType>(schema: S, input: unknown, code: 'VALIDATION_FAILED' | 'INVALID_QUERY', what: string): z.output<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const { fields, total } = fieldErrors(result.error);
  const summary = fields.slice(0, 5).map((f) => `${f.field}: ${f.message}`).join('; ');
  throw new AppError(code, `invalid ${what}: ${summary}${total > 5 ? ` (and ${total - 5} more${total > fields.length ? `; the first ${fields.length} are listed` : ''})` : ''}`, { fields });
}
