/**
 * Crash safety with a real process: an export runs in a child process, the remote double applies its
 * write and holds the answer, the child is killed with SIGKILL, and a fresh run with the same
 * (file-backed, fsynced) journal must recover the result instead of writing a second time.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMediaWikiDouble, type MediaWikiDouble } from '../../shared/testing/mediawiki-api.js';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { startOverpassDouble, type OverpassDouble } from '../../../test/doubles/overpass.js';
import { eventually } from '../../../test/helpers/wait.js';
import { SEED_CATEGORY_MAPPING } from '../src/exports/category-mapping.js';
import { exportsSettingsFrom, ExportsEnvSchema } from '../src/exports/config.js';
import { parseEnv } from '../../shared/config.js';
import { createFileJournal } from '../src/exports/journal.js';
import { OsmExporter } from '../src/exports/osm/exporter.js';
import type { FeatureSnapshot } from '../src/exports/types.js';
import { WikibaseExporter } from '../src/exports/wikibase/exporter.js';

const SCRIPT = fileURLToPath(new URL('./export-once.ts', import.meta.url));
const UA = 'feature-mapping-platform-tests/1.0';

let osm: OsmApiDouble;
let wiki: MediaWikiDouble;
let overpass: OverpassDouble;
let dir: string;
beforeAll(async () => {
  osm = await startOsmApiDouble();
  wiki = await startMediaWikiDouble();
  overpass = await startOverpassDouble(osm);
  dir = mkdtempSync(join(tmpdir(), 'fmp-kill-'));
});
afterAll(async () => {
  await Promise.all([osm.close(), wiki.close(), overpass.close()]);
  rmSync(dir, { recursive: true, force: true });
});

/** Start the export in a child process, SIGKILL it once `applied()` is true, and wait for it to die. */
async function runAndKill(input: unknown, applied: () => boolean): Promise<NodeJS.Signals | null> {
  const child = spawn(process.execPath, ['--import', 'tsx', SCRIPT, JSON.stringify(input)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
  try {
    // Generous: a child process on a loaded 2-core machine can take half a minute to start.
    await eventually('the child to get that far', applied, 60_000, 25);
  } catch (error) {
    child.kill('SIGKILL');
    throw new Error(`the child never got that far: ${output}`, { cause: error });
  }
  child.kill('SIGKILL');
  return exited;
}

const snapshot = (id: string, geometry: FeatureSnapshot['geometry']): FeatureSnapshot => ({ id, version: 1, name: `Killed ${id.slice(-4)}`, kategorie: 'friedhof', geometry });

describe('export process killed with SIGKILL after the remote side accepted', { timeout: 120_000 }, () => {
  it('OSM: the re-run recovers the elements from the journaled changeset and uploads nothing', async () => {
    const env = { OSM_API_URL: osm.url, OSM_ACCESS_TOKEN: 'test-token', EXPORT_USER_AGENT: UA, EXPORT_DATA_LICENCE: 'CC0-1.0' };
    const feature = snapshot('20000000-0000-4000-8000-000000000001', { type: 'Polygon', coordinates: [[[13.4, 52.5], [13.41, 52.5], [13.41, 52.51], [13.4, 52.5]]] });
    const journalPath = join(dir, 'osm.json');
    osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'hold-after-processing' });

    const signal = await runAndKill({ target: 'osm', env, snapshot: feature, journalPath }, () => osm.acceptedUploads.length === 1);
    expect(signal).toBe('SIGKILL');
    const journaled = (JSON.parse(readFileSync(journalPath, 'utf8')) as { changesetId: number }).changesetId;
    expect(osm.changeset(journaled)!.changes.length).toBeGreaterThan(0);

    const settings = exportsSettingsFrom(parseEnv(ExportsEnvSchema, env));
    const outcome = await new OsmExporter({ settings, mapping: SEED_CATEGORY_MAPPING }).export({ snapshot: feature, previous: null, journal: createFileJournal(journalPath) });
    expect(outcome).toMatchObject({ status: 'exported', detail: `recovered from changeset ${journaled}`, result: { type: 'way', version: 1, changesetId: journaled } });
    expect(osm.acceptedUploads).toHaveLength(1);
    expect(osm.visible('way').filter((w) => w.tags.name === feature.name)).toHaveLength(1);
    expect(osm.visible('node')).toHaveLength(3);
  });

  it('Wikibase: the re-run finds the item by its journaled intent and creates no second one', async () => {
    const env = { WIKIBASE_URL: wiki.url, WIKIBASE_USERNAME: 'Exporter@qc', WIKIBASE_PASSWORD: 'bot-password-123', EXPORT_USER_AGENT: UA, EXPORT_DATA_LICENCE: 'CC0-1.0' };
    const feature = snapshot('20000000-0000-4000-8000-000000000002', { type: 'Point', coordinates: [12.37, 51.34] });
    const journalPath = join(dir, 'wikibase.json');
    wiki.injectFault({ action: 'wbeditentity', mode: 'hold-after-processing' });

    const signal = await runAndKill({ target: 'wikibase', env, snapshot: feature, journalPath }, () => wiki.createdItems().length === 1);
    expect(signal).toBe('SIGKILL');

    const settings = exportsSettingsFrom(parseEnv(ExportsEnvSchema, env));
    const outcome = await new WikibaseExporter({ settings, mapping: SEED_CATEGORY_MAPPING }).export({ snapshot: feature, previous: null, journal: createFileJournal(journalPath) });
    const created = wiki.createdItems();
    expect(created).toHaveLength(1);
    expect(outcome).toMatchObject({ status: 'exported', result: { itemId: created[0]!.id } });
    expect(outcome.status === 'exported' && outcome.detail).toMatch(/^recovered item created by an earlier attempt/);
  });
});

describe('export process killed with SIGKILL during conflation', { timeout: 120_000 }, () => {
  /** An existing cemetery way as the community mapped it, with a tag the platform does not own. */
  function seedCemetery(id: number, lon: number): void {
    const ring = [[lon, 51.4], [lon + 0.002, 51.4], [lon + 0.002, 51.402], [lon, 51.402]];
    const nodes = ring.map((p, i) => `<node id="${id + i + 1}" version="1" lat="${p[1]}" lon="${p[0]}"/>`).join('');
    const refs = [1, 2, 3, 4, 1].map((i) => `<nd ref="${id + i}"/>`).join('');
    osm.seed(`<osm version="0.6">${nodes}<way id="${id}" version="2">${refs}<tag k="landuse" v="cemetery"/><tag k="name" v="Nordfriedhof"/><tag k="operator" v="Stadt"/></way></osm>`);
  }
  const polygon = (lon: number): FeatureSnapshot['geometry'] => ({ type: 'Polygon', coordinates: [[[lon + 0.0001, 51.4001], [lon + 0.0019, 51.4001], [lon + 0.0019, 51.4019], [lon + 0.0001, 51.4019], [lon + 0.0001, 51.4001]]] });

  it('killed while the Overpass lookup is in flight: the re-run looks again and merges exactly once', async () => {
    seedCemetery(80_000_000, 12.5);
    const env = { OSM_API_URL: osm.url, OSM_ACCESS_TOKEN: 'test-token', OVERPASS_URL: overpass.url, EXPORT_USER_AGENT: UA, EXPORT_DATA_LICENCE: 'CC0-1.0' };
    const feature = { ...snapshot('20000000-0000-4000-8000-000000000003', polygon(12.5)), name: 'Nord-Friedhof', telefon: '+49 341 77' };
    const journalPath = join(dir, 'conflation-lookup.json');
    overpass.holdNext();
    const queriesBefore = overpass.queries.length;
    const uploadsBefore = osm.acceptedUploads.length;

    const signal = await runAndKill({ target: 'osm', env, snapshot: feature, journalPath }, () => overpass.queries.length === queriesBefore + 1);
    expect(signal).toBe('SIGKILL');
    expect(osm.acceptedUploads.length).toBe(uploadsBefore);

    const settings = exportsSettingsFrom(parseEnv(ExportsEnvSchema, env));
    const outcome = await new OsmExporter({ settings, mapping: SEED_CATEGORY_MAPPING }).export({ snapshot: feature, previous: null, journal: createFileJournal(journalPath) });
    expect(outcome).toMatchObject({ status: 'exported', result: { type: 'way', id: 80_000_000, version: 3, linked: true } });
    expect(osm.acceptedUploads.length).toBe(uploadsBefore + 1);
    expect(osm.element('way', 80_000_000)!.tags).toEqual({ landuse: 'cemetery', name: 'Nordfriedhof', operator: 'Stadt', phone: '+49 341 77' });
    expect(osm.visible('way').filter((w) => w.tags.landuse === 'cemetery' && /nord/i.test(w.tags.name ?? ''))).toHaveLength(1);
  });

  it('killed after OSM accepted the merge: the re-run uses the journaled decision and changeset and uploads nothing', async () => {
    seedCemetery(81_000_000, 12.6);
    const env = { OSM_API_URL: osm.url, OSM_ACCESS_TOKEN: 'test-token', OVERPASS_URL: overpass.url, EXPORT_USER_AGENT: UA, EXPORT_DATA_LICENCE: 'CC0-1.0' };
    const feature = { ...snapshot('20000000-0000-4000-8000-000000000004', polygon(12.6)), name: 'Nordfriedhof', telefon: '+49 341 88' };
    const journalPath = join(dir, 'conflation-upload.json');
    const uploadsBefore = osm.acceptedUploads.length;
    osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'hold-after-processing' });

    const signal = await runAndKill({ target: 'osm', env, snapshot: feature, journalPath }, () => osm.acceptedUploads.length === uploadsBefore + 1);
    expect(signal).toBe('SIGKILL');
    const journaled = JSON.parse(readFileSync(journalPath, 'utf8')) as { changesetId: number; decision: { outcome: string } };
    expect(journaled.decision.outcome).toBe('link');

    const queriesBefore = overpass.queries.length;
    const settings = exportsSettingsFrom(parseEnv(ExportsEnvSchema, env));
    const outcome = await new OsmExporter({ settings, mapping: SEED_CATEGORY_MAPPING }).export({ snapshot: feature, previous: null, journal: createFileJournal(journalPath) });
    expect(outcome).toMatchObject({ status: 'exported', detail: `recovered from changeset ${journaled.changesetId}`, result: { type: 'way', id: 81_000_000, version: 3, linked: true, ownedKeys: ['phone'] } });
    expect(overpass.queries.length).toBe(queriesBefore);
    expect(osm.acceptedUploads.length).toBe(uploadsBefore + 1);
    expect(osm.element('way', 81_000_000)!.version).toBe(3);
  });
});
