import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { loadYamlFile } from '../../../shared/config.js';
import type { CategoryMapping, TagFilter } from './types.js';

/**
 * The OSM tag mapping as a configuration file (config/osm-tags.yaml): which tags a kategorie gets in
 * OSM and which existing objects count as candidates for conflation. Loaded once at start; the
 * Wikidata class stays in metadata.category_mapping (migration 003), the OSM side comes from here.
 */
export const DEFAULT_OSM_TAG_MAPPING_FILE = fileURLToPath(new URL('../../../../config/osm-tags.yaml', import.meta.url));

const osmKey = z.string().min(1).max(255).regex(/^[^\s=]+$/, 'an OSM key without spaces or "="');
const osmValue = z.string().min(1).max(255);

const MatchEntrySchema = z
  .record(osmKey, z.union([osmValue, z.array(osmValue).min(1)]))
  .refine((entry) => Object.keys(entry).length > 0, 'a match entry needs at least one key');

export const OsmTagMappingFileSchema = z
  .object({
    categories: z.record(
      z.string().min(1),
      z
        .object({
          tags: z.record(osmKey, osmValue).refine((tags) => Object.keys(tags).length > 0, 'at least one tag'),
          /** Tags as a node / an open way; `none` when the category has no valid tagging there (asked). */
          point: z.union([z.literal('none'), z.record(osmKey, osmValue)]).optional(),
          line: z.union([z.literal('none'), z.record(osmKey, osmValue)]).optional(),
          match: z.array(MatchEntrySchema).min(1),
        })
        .strict(),
    ),
    managedKeys: z.array(osmKey).default([]),
  })
  .strict();

export interface OsmTagMapping {
  categories: Record<string, { tags: Record<string, string>; point?: Record<string, string> | null; line?: Record<string, string> | null; match: TagFilter[] }>;
  managedKeys: string[];
}

export function parseOsmTagMapping(raw: z.input<typeof OsmTagMappingFileSchema>): OsmTagMapping {
  const parsed = OsmTagMappingFileSchema.parse(raw);
  const categories: OsmTagMapping['categories'] = {};
  for (const [kategorie, rule] of Object.entries(parsed.categories)) {
    categories[kategorie] = {
      tags: rule.tags,
      ...(rule.point !== undefined ? { point: rule.point === 'none' ? null : rule.point } : {}),
      ...(rule.line !== undefined ? { line: rule.line === 'none' ? null : rule.line } : {}),
      match: rule.match.map((entry) => Object.fromEntries(Object.entries(entry).map(([k, v]) => [k, Array.isArray(v) ? v : [v]]))),
    };
  }
  return { categories, managedKeys: parsed.managedKeys };
}

export function loadOsmTagMapping(path: string = DEFAULT_OSM_TAG_MAPPING_FILE): OsmTagMapping {
  const raw = loadYamlFile(path, OsmTagMappingFileSchema);
  return parseOsmTagMapping(raw);
}

/**
 * The category mapping the exporters use: OSM tags and candidate filters from the file, the Wikidata
 * class from the database. A kategorie missing from the file gets no OSM tags (not_applicable).
 */
export function withOsmTagMapping(fromDatabase: CategoryMapping, file: OsmTagMapping): CategoryMapping {
  const out: CategoryMapping = {};
  const kategorien = new Set([...Object.keys(fromDatabase), ...Object.keys(file.categories)]);
  for (const kategorie of kategorien) {
    const osm = file.categories[kategorie];
    out[kategorie] = {
      osmTags: osm?.tags ?? {},
      ...(osm?.point !== undefined ? { pointTags: osm.point } : {}),
      ...(osm?.line !== undefined ? { lineTags: osm.line } : {}),
      osmMatch: osm?.match ?? [],
      wikidataClass: fromDatabase[kategorie]?.wikidataClass ?? null,
    };
  }
  return out;
}

/** Whether an element's tags fall in one of the families. */
export function matchesFamily(tags: Record<string, string>, families: readonly TagFilter[]): boolean {
  return families.some((entry) => Object.entries(entry).every(([k, values]) => tags[k] !== undefined && values.includes(tags[k]!)));
}
