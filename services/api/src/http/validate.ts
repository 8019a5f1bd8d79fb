import type { z } from 'zod';
import { AppError, type FieldError } from '../../../shared/errors.js';

/** A zod path as a readable field name: properties.name, geometry.coordinates[0][3]. */
export function fieldName(path: readonly PropertyKey[]): string {
  let name = '';
  for (const key of path) {
    if (typeof key === 'number') name += `[${key}]`;
    else name += name ? `.${String(key)}` : String(key);
  }
  return name;
}

export function fieldErrors(error: z.ZodError): FieldError[] {
  const fields: FieldError[] = [];
  for (const issue of error.issues) {
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) fields.push({ field: fieldName([...issue.path, key]), message: 'is not a known property' });
      continue;
    }
    fields.push({ field: fieldName(issue.path) || '(body)', message: issue.message });
  }
  // A union reports the same problem once per member; say it once.
  return fields.filter((f, i) => fields.findIndex((g) => g.field === f.field && g.message === f.message) === i);
}

/** Parse or throw a 400 whose message and field list name every offending field. */
export function parseOrThrow<S extends z.ZodType>(schema: S, input: unknown, code: 'VALIDATION_FAILED' | 'INVALID_QUERY', what: string): z.output<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const fields = fieldErrors(result.error);
  const summary = fields.slice(0, 5).map((f) => `${f.field}: ${f.message}`).join('; ');
  throw new AppError(code, `invalid ${what}: ${summary}${fields.length > 5 ? ` (and ${fields.length - 5} more)` : ''}`, { fields });
}
