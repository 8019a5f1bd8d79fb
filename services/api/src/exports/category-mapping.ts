import { z } from 'zod';
import type { CategoryMapping } from './types.js';

/**
 * The seed mapping. Phase 2 stores it as rows in the `metadata` schema and loads it from there; this
 * constant is the seed data and the fixture for tests, not a second source of truth.
 * Wikidata classes: Q39614 = cemetery, Q4989906 = monument. A flower bed has no sensible class, so no
 * item is created for it (outcome `not_applicable`).
 */
export const SEED_CATEGORY_MAPPING: CategoryMapping = {
  // A cemetery drawn as a point: amenity=grave_yard is the tagging OSM allows on a node.
  friedhof: { osmTags: { landuse: 'cemetery' }, pointTags: { amenity: 'grave_yard' }, lineTags: null, wikidataClass: 'Q39614' },
  // A flower bed is an area only: a point or a line is asked about.
  blumenbeet: { osmTags: { landuse: 'flowerbed' }, pointTags: null, lineTags: null, wikidataClass: null },
  // A memorial drawn as a line is a memorial wall (memorial=wall is valid on an open way).
  denkmal: { osmTags: { historic: 'memorial' }, pointTags: { historic: 'memorial' }, lineTags: { historic: 'memorial', memorial: 'wall' }, wikidataClass: 'Q4989906' },
};

const osmKey = z.string().min(1).max(255).regex(/^[^\s=]+$/, 'an OSM key without spaces or "="');

/** Validates a mapping loaded from the database before an exporter uses it. */
export const CategoryMappingSchema = z.record(
  z.string().min(1),
  z
    .object({
      osmTags: z.record(osmKey, z.string().min(1).max(255)),
      pointTags: z.record(osmKey, z.string().min(1).max(255)).nullable().optional(),
      lineTags: z.record(osmKey, z.string().min(1).max(255)).nullable().optional(),
      wikidataClass: z.string().regex(/^Q[1-9]\d*$/, 'an item id such as Q39614').nullable(),
    })
    .strict(),
);

/**
 * Every OSM key the platform manages for any category. On a re-export these keys are overwritten or
 * removed; all other tags on the element (added by the community) are kept.
 */
export function managedOsmKeys(mapping: CategoryMapping): Set<string> {
  const keys = new Set(['name', 'phone']);
  for (const rule of Object.values(mapping)) for (const key of Object.keys(rule.osmTags)) keys.add(key);
  return keys;
}
