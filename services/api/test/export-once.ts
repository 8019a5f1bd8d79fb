/**
 * Runs one export in its own process, for the process-kill tests (and by hand against a dev server):
 *
 *   tsx services/api/test/export-once.ts '<json>'
 *
 * where json = { target: 'osm' | 'wikibase', env: { OSM_API_URL, …as in docs/qc.md }, snapshot,
 * journalPath }. Prints the outcome as one JSON line. Exit codes: 0 outcome printed, 1 error, 2 usage.
 */
import { runMain, parseEnv, ConfigError } from '../../shared/config.js';
import { SEED_CATEGORY_MAPPING } from '../src/exports/category-mapping.js';
import { ExportsEnvSchema, exportsSettingsFrom } from '../src/exports/config.js';
import { createFileJournal } from '../src/exports/journal.js';
import { OsmExporter } from '../src/exports/osm/exporter.js';
import type { FeatureSnapshot } from '../src/exports/types.js';
import { WikibaseExporter } from '../src/exports/wikibase/exporter.js';

runMain(async () => {
  let input: { target: 'osm' | 'wikibase'; env: Record<string, string>; snapshot: FeatureSnapshot; journalPath: string };
  try {
    input = JSON.parse(process.argv[2] ?? '') as typeof input;
  } catch {
    throw new ConfigError('usage: export-once \'{"target":"osm","env":{…},"snapshot":{…},"journalPath":"…"}\'');
  }
  const settings = exportsSettingsFrom(parseEnv(ExportsEnvSchema, input.env));
  const journal = createFileJournal(input.journalPath);
  const outcome =
    input.target === 'osm'
      ? await new OsmExporter({ settings, mapping: SEED_CATEGORY_MAPPING }).export({ snapshot: input.snapshot, previous: null, journal })
      : await new WikibaseExporter({ settings, mapping: SEED_CATEGORY_MAPPING }).export({ snapshot: input.snapshot, previous: null, journal });
  console.log(JSON.stringify(outcome));
});
