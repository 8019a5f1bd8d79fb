import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

/**
 * A configuration error: the process cannot start. The message names the variable or key so an
 * operator can fix it without reading code.
 */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

function describeIssues(error: z.ZodError, prefix = ''): string {
  return error.issues
    .map((issue) => `${prefix}${issue.path.map(String).join('.') || '(root)'}: ${issue.message}`)
    .join('; ');
}

/**
 * Parse process environment variables with a zod object schema whose keys are the variable names.
 * Empty strings count as unset, as most shells and compose files produce them for "not given".
 */
export function parseEnv<S extends z.ZodObject>(schema: S, env: NodeJS.ProcessEnv = process.env): z.infer<S> {
  const present: Record<string, string> = {};
  for (const key of Object.keys(schema.shape)) {
    const value = env[key];
    if (value !== undefined && value !== '') present[key] = value;
  }
  const result = schema.safeParse(present);
  if (!result.success) throw new ConfigError(`invalid environment: ${describeIssues(result.error)}`);
  return result.data;
}

/** Read a YAML file and validate it; errors name the file and the offending key path. */
export function loadYamlFile<S extends z.ZodType>(path: string, schema: S): z.infer<S> {
  let raw: unknown;
  try {
    raw = parseYaml(readFileSync(path, 'utf8'));
  } catch (cause) {
    throw new ConfigError(`cannot read ${path}: ${(cause as Error).message}`, { cause });
  }
  const result = schema.safeParse(raw);
  if (!result.success) throw new ConfigError(`invalid ${path}: ${describeIssues(result.error)}`);
  return result.data;
}

/** Run a process entry point: a ConfigError prints one line and exits 2 (usage), anything else exits 1. */
export function runMain(main: () => Promise<unknown>): void {
  main().catch((error: unknown) => {
    if (error instanceof ConfigError) {
      console.error(`configuration error: ${error.message}`);
      process.exit(2);
    }
    console.error(error);
    process.exit(1);
  });
}
