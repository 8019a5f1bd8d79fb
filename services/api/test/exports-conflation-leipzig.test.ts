/**
 * The real-data check: the platform's Leipzig test features exported against a hand-made extract of
 * a few hundred objects around Leipzig (test/fixtures/osm, see its README), through the OSM API and
 * Overpass doubles. Every automatic merge is compared with the expected element:
 *
 *   precision = correct merges / all automatic merges   (a wrong merge is a false merge)
 *   recall    = correct merges / features that exist in the extract
 *
 * Features sent to a reviewer (needs_decision) count against recall, not precision.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { startOverpassDouble, type OverpassDouble } from '../../../test/doubles/overpass.js';
import { SEED_CATEGORY_MAPPING } from '../src/exports/category-mapping.js';
import { createMemoryJournal } from '../src/exports/journal.js';
import { loadOsmTagMapping, withOsmTagMapping } from '../src/exports/osm-tag-mapping.js';
import { OsmExporter } from '../src/exports/osm/exporter.js';
import { testExportsSettings } from './exports-settings.js';
import type { FeatureGeometry } from '../src/exports/types.js';

const fixture = (name: string) => readFileSync(fileURLToPath(new URL(`../../../test/fixtures/osm/${name}`, import.meta.url)), 'utf8');
interface TestFeature {
  id: string;
  geometry: FeatureGeometry;
  properties: { name: string; kategorie: string; expectedOsm: string | null; note: string };
}

let osm: OsmApiDouble;
let overpass: OverpassDouble;
beforeAll(async () => {
  osm = await startOsmApiDouble();
  overpass = await startOverpassDouble(osm);
});
afterAll(async () => {
  await Promise.all([osm.close(), overpass.close()]);
});

describe('conflation against a Leipzig extract', () => {
  it('merges automatically with precision ≥ 0.95 (no false merge) and recall ≥ 0.9', async () => {
    const seeded = osm.seed(fixture('leipzig-extract.osm'));
    expect(seeded).toBeGreaterThan(900);
    const features = (JSON.parse(fixture('leipzig-features.geojson')) as { features: TestFeature[] }).features;
    const exporter = new OsmExporter({
      settings: testExportsSettings({ OSM_API_URL: osm.url, OSM_ACCESS_TOKEN: 'test-token', OVERPASS_URL: overpass.url }),
      mapping: withOsmTagMapping(SEED_CATEGORY_MAPPING, loadOsmTagMapping()),
    });

    const rows: { name: string; expected: string | null; got: string; note: string }[] = [];
    for (const f of features) {
      const snapshot = { id: f.id, version: 1, name: f.properties.name, kategorie: f.properties.kategorie, geometry: f.geometry };
      const outcome = await exporter.export({ snapshot, previous: null, journal: createMemoryJournal() });
      let got: string;
      if (outcome.status === 'exported') got = outcome.result.linked ? `${outcome.result.type}/${outcome.result.id}` : 'created';
      else if (outcome.status === 'unchanged') got = `${outcome.result.type}/${outcome.result.id}`;
      else got = outcome.status;
      rows.push({ name: f.properties.name, expected: f.properties.expectedOsm, got, note: f.properties.note });
    }

    const merges = rows.filter((r) => /^(node|way|relation)\//.test(r.got));
    const correct = merges.filter((r) => r.got === r.expected);
    const falseMerges = merges.filter((r) => r.got !== r.expected);
    const present = rows.filter((r) => r.expected !== null);
    const precision = correct.length / merges.length;
    const recall = correct.length / present.length;
    const undecided = rows.filter((r) => r.got === 'needs_decision');
    const missed = present.filter((r) => r.got !== r.expected);
    console.log(
      `Leipzig conflation: ${features.length} features (${present.length} in the extract), ${merges.length} automatic merges, ` +
        `${correct.length} correct, ${falseMerges.length} false; ${undecided.length} sent to a reviewer; ` +
        `precision ${precision.toFixed(3)}, recall ${recall.toFixed(3)}` +
        (missed.length ? `\n  missed: ${missed.map((r) => `${r.name} → ${r.got} (${r.note})`).join('; ')}` : ''),
    );
    expect(falseMerges, JSON.stringify(falseMerges)).toEqual([]);
    expect(precision).toBeGreaterThanOrEqual(0.95);
    expect(recall).toBeGreaterThanOrEqual(0.9);
    // Every feature not in the extract was created, none merged into something else.
    expect(rows.filter((r) => r.expected === null).every((r) => r.got === 'created')).toBe(true);
  });
});
