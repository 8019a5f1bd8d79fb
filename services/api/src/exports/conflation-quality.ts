import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { loadYamlFile } from '../../../shared/config.js';

/**
 * What the labelled set measured per category (config/conflation-quality.yaml), and the threshold a
 * category must meet before its OSM exports may go up without a reviewer confirming the plan
 * (OSM_AUTO_UPLOAD_CATEGORIES, docs/qc.md "Nothing reaches OSM unseen"). The labelled set's test
 * (services/api/test/exports-conflation-kleinbergen.test.ts) fails when the file does not say what it measured.
 */
export const DEFAULT_CONFLATION_QUALITY_FILE = fileURLToPath(new URL('../../../../config/conflation-quality.yaml', import.meta.url));

const count = z.number().int().min(0);
export const ConflationQualitySchema = z
  .object({
    threshold: z.object({ precision: z.number().min(0).max(1), minCases: count }).strict(),
    categories: z.record(z.string().min(1), z.object({ cases: count, automaticMerges: count, falseMerges: count }).strict()),
  })
  .strict();
export type ConflationQuality = z.output<typeof ConflationQualitySchema>;

export function loadConflationQuality(path: string = DEFAULT_CONFLATION_QUALITY_FILE): ConflationQuality {
  return loadYamlFile(path, ConflationQualitySchema);
}

/** null when the category meets the threshold; otherwise why its exports may not go up unreviewed. */
export function autoUploadRefusal(quality: ConflationQuality, kategorie: string): string | null {
  const measured = quality.categories[kategorie];
  const { precision, minCases } = quality.threshold;
  if (!measured) return `${kategorie} has no figures in the labelled set`;
  if (measured.cases < minCases) return `${kategorie} has ${measured.cases} cases in the labelled set, fewer than ${minCases}`;
  const p = measured.automaticMerges === 0 ? 1 : (measured.automaticMerges - measured.falseMerges) / measured.automaticMerges;
  if (p < precision) return `${kategorie}'s automatic merges have precision ${p.toFixed(3)} in the labelled set, below ${precision}`;
  return null;
}
