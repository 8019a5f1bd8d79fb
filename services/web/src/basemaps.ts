import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parse } from 'yaml';
import { z } from 'zod';

/**
 * The background maps offered by the map's switcher, read once from config/basemaps.yaml (that file
 * documents each field) when the server starts. A bad file stops the server with a message naming
 * the entry, like every other configuration error.
 */
export const BASEMAP_TYPES = ['xyz', 'wmts', 'wms', 'vector-style'] as const;
export type BasemapType = (typeof BASEMAP_TYPES)[number];

const BasemapSchema = z.strictObject({
  id: z.string().regex(/^[a-z0-9][a-z0-9-]{0,39}$/, 'must be lower-case letters, digits and dashes'),
  title: z.strictObject({ de: z.string().min(1), en: z.string().min(1) }),
  type: z.enum(BASEMAP_TYPES),
  url: z.string().min(1),
  layers: z.string().min(1).optional(),
  attribution: z.string().min(1),
  maxZoom: z.number().int().min(0).max(24).default(19),
  offline: z.strictObject({ allowed: z.boolean(), maxTiles: z.number().int().min(1).max(50_000).default(2_000) }).default({ allowed: false, maxTiles: 2_000 }),
  default: z.boolean().optional(),
});
const BasemapFileSchema = z.strictObject({ basemaps: z.array(BasemapSchema).min(1) });

/** One background map as the browser receives it. */
export interface Basemap {
  id: string;
  title: { de: string; en: string };
  type: BasemapType;
  url: string;
  layers?: string;
  attribution: string;
  maxZoom: number;
  offline: { allowed: boolean; maxTiles: number };
}

/**
 * `${NAME}` and `${NAME:-fallback}` from the environment; undefined when a variable without fallback
 * is unset or empty (the entry is then left out).
 */
function interpolate(value: string, env: Record<string, string | undefined>): string | undefined {
  let missing = false;
  const result = value.replace(/\$\{([A-Z0-9_]+)(?::-([^}]*))?\}/g, (_, name: string, fallback: string | undefined) => {
    const found = env[name];
    if (found) return found;
    if (fallback !== undefined) return fallback;
    missing = true;
    return '';
  });
  return missing ? undefined : result;
}

/** Where the file is: BASEMAPS_FILE, else config/basemaps.yaml of the repository (from the site's or the root's directory). */
function basemapsFile(env: Record<string, string | undefined>, cwd: string): string | undefined {
  if (env.BASEMAPS_FILE) return resolve(cwd, env.BASEMAPS_FILE);
  return [join(cwd, 'config/basemaps.yaml'), join(cwd, '../../config/basemaps.yaml')].find((path) => existsSync(path));
}

/**
 * The configured background maps, the default first. BASEMAP_URL (an XYZ URL) adds one entry in front
 * and makes it the default. Without a file and without BASEMAP_URL: OpenStreetMap alone.
 */
export function loadBasemaps(env: Record<string, string | undefined>, cwd = process.cwd()): Basemap[] {
  const path = basemapsFile(env, cwd);
  let entries: Basemap[] = [];
  if (path) {
    let raw: unknown;
    try {
      raw = parse(readFileSync(path, 'utf8'));
    } catch (error) {
      throw new Error(`invalid web configuration: BASEMAPS_FILE ${path}: ${(error as Error).message}`, { cause: error });
    }
    const result = BasemapFileSchema.safeParse(raw);
    if (!result.success) {
      const problems = result.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ');
      throw new Error(`invalid web configuration: BASEMAPS_FILE ${path}: ${problems}`);
    }
    const ids = new Set<string>();
    for (const entry of result.data.basemaps) {
      if (ids.has(entry.id)) throw new Error(`invalid web configuration: BASEMAPS_FILE ${path}: the id ${entry.id} appears twice`);
      ids.add(entry.id);
    }
    const sorted = [...result.data.basemaps].sort((a, b) => Number(b.default ?? false) - Number(a.default ?? false));
    for (const { default: _default, url, layers, ...entry } of sorted) {
      const resolvedUrl = interpolate(url, env);
      const resolvedLayers = layers === undefined ? undefined : interpolate(layers, env);
      if (resolvedUrl === undefined || (layers !== undefined && resolvedLayers === undefined)) continue;
      if (entry.type === 'wms' && !resolvedLayers) throw new Error(`invalid web configuration: BASEMAPS_FILE ${path}: ${entry.id}: a wms entry needs layers`);
      entries.push({ ...entry, url: resolvedUrl, ...(resolvedLayers ? { layers: resolvedLayers } : {}) });
    }
  }
  if (env.BASEMAP_URL) {
    entries = [
      {
        id: 'configured',
        title: { de: 'Hintergrundkarte (BASEMAP_URL)', en: 'Background map (BASEMAP_URL)' },
        type: 'xyz',
        url: env.BASEMAP_URL,
        attribution: env.BASEMAP_ATTRIBUTION || '© OpenStreetMap contributors',
        maxZoom: 19,
        offline: { allowed: false, maxTiles: 2_000 },
      },
      ...entries,
    ];
  }
  if (entries.length === 0) {
    entries.push({ id: 'osm', title: { de: 'OpenStreetMap', en: 'OpenStreetMap' }, type: 'xyz', url: 'https://tile.openstreetmap.org/{z}/{x}/{y}.png', attribution: '© OpenStreetMap contributors', maxZoom: 19, offline: { allowed: false, maxTiles: 2_000 } });
  }
  return entries;
}
