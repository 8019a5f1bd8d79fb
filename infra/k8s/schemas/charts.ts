import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { PINNED_SCHEMAS } from './pins.js';

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Default values of a chart (the key tree a release's values must stay within), from the pinned copy in `dir`. */
export const chartDefaults = (dir: string, name: 'kratosValues' | 'hydraValues') => parseYaml(readFileSync(join(dir, PINNED_SCHEMAS[name].file), 'utf8')) as Json;

/**
 * A Helm release's values against its chart's defaults: every key we set must be one the chart knows
 * (a typo like `deployment.resource` is silently ignored by Helm). Below a key whose default is an empty
 * map or list, or below a `freeForm` path (the Ory configuration itself), anything goes.
 */
export function unknownChartKeys(values: unknown, defaults: unknown, freeForm: string[], path = ''): string[] {
  if (!isObject(values)) return [];
  if (!isObject(defaults)) return [];
  return Object.entries(values).flatMap(([key, value]) => {
    const at = path ? `${path}.${key}` : key;
    if (freeForm.includes(at)) return [];
    if (!(key in defaults)) return [at];
    const fallback = defaults[key];
    if (isObject(fallback) && Object.keys(fallback).length > 0) return unknownChartKeys(value, fallback, freeForm, at);
    return [];
  });
}
