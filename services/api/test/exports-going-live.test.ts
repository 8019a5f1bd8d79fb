/**
 * Going live is gated (issue 27, docs/qc.md "Going live"): the production OSM API and Wikidata are
 * refused at configuration load unless the import's paperwork is configured; changesets carry the
 * import page, the dataset's source and licence; the User-Agent carries a contact; an import runs
 * only under its dedicated account. Against the OSM API 0.6 double for the account check.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, parseEnv } from '../../shared/config.js';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { SEED_CATEGORY_MAPPING } from '../src/exports/category-mapping.js';
import { DEFAULT_USER_AGENT, ExportsEnvSchema, exportsSettingsFrom } from '../src/exports/config.js';
import { createMemoryJournal } from '../src/exports/journal.js';
import { OsmExporter } from '../src/exports/osm/exporter.js';
import { testExportsSettings } from './exports-settings.js';

const refusal = (env: Record<string, string>): string => {
  try {
    parseEnv(ExportsEnvSchema, env);
  } catch (error) {
    if (error instanceof ConfigError) return error.message;
    throw error;
  }
  return '';
};

const OSM_LIVE = {
  OSM_API_URL: 'https://api.openstreetmap.org',
  OSM_IMPORT_PAGE_URL: 'https://wiki.openstreetmap.org/wiki/Import/Kleinbergen_Friedh%C3%B6fe',
  OSM_IMPORT_ACCOUNT: 'Kleinbergen_import',
  FEATURE_PUBLIC_URL: 'https://karte.kleinbergen.example/features/{featureId}',
  EXPORT_CONTACT: 'geodaten@kleinbergen.example',
  EXPORT_DATA_LICENCE: 'dl-de-zero-2.0',
};
const WIKIDATA_LIVE = {
  WIKIBASE_URL: 'https://www.wikidata.org',
  WIKIBASE_USERNAME: 'KleinbergenBot@export',
  WIKIBASE_PASSWORD: 'bot-password-123',
  WIKIBASE_BOT: 'true',
  WIKIBASE_BOT_ACCOUNT: 'KleinbergenBot',
  WIKIBASE_BOT_APPROVAL_URL: 'https://www.wikidata.org/wiki/Wikidata:Requests_for_permissions/Bot/KleinbergenBot',
  WIKIBASE_REFERENCE_ITEM: 'Q123456',
  FEATURE_PUBLIC_URL: 'https://karte.kleinbergen.example/features/{featureId}',
  EXPORT_CONTACT: 'geodaten@kleinbergen.example',
};

describe('going live is gated at configuration load', () => {
  it('the production OSM API with its paperwork loads, and its changesets name the import page, source and licence', () => {
    const settings = exportsSettingsFrom(parseEnv(ExportsEnvSchema, OSM_LIVE));
    expect(settings.userAgent).toBe('feature-mapping-platform/0.1 (QC exports; contact: geodaten@kleinbergen.example)');
    const tags = new OsmExporter({ settings, mapping: SEED_CATEGORY_MAPPING }).changesetTags({ id: 'f1', version: 1, name: 'Friedhof', kategorie: 'friedhof', geometry: { type: 'Point', coordinates: [11.9, 51.6] } });
    expect(tags).toMatchObject({ url: OSM_LIVE.OSM_IMPORT_PAGE_URL, import: 'yes', 'source:license': 'dl-de-zero-2.0', source: 'municipal feature register (city feature platform)' });
    expect(tags.source).not.toMatch(/survey/);
  });

  it.each(Object.keys(OSM_LIVE).filter((k) => k !== 'OSM_API_URL'))('the production OSM API without %s is refused, naming it', (missing) => {
    const env = Object.fromEntries(Object.entries(OSM_LIVE).filter(([k]) => k !== missing));
    expect(refusal(env)).toContain(missing);
  });

  it('source=survey is refused for the production OSM API; the development API takes any configuration', () => {
    expect(refusal({ ...OSM_LIVE, OSM_CHANGESET_SOURCE: 'survey' })).toContain('OSM_CHANGESET_SOURCE');
    expect(refusal({ OSM_API_URL: 'https://master.apis.dev.openstreetmap.org' })).toBe('');
    expect(refusal({ OSM_API_URL: 'https://www.openstreetmap.org' })).toContain('OSM_IMPORT_PAGE_URL');
  });

  it('Wikidata with its paperwork loads; without any piece of it it is refused, naming it', () => {
    expect(refusal(WIKIDATA_LIVE)).toBe('');
    for (const missing of ['WIKIBASE_BOT_ACCOUNT', 'WIKIBASE_BOT_APPROVAL_URL', 'WIKIBASE_REFERENCE_ITEM', 'FEATURE_PUBLIC_URL', 'EXPORT_CONTACT']) {
      const env = Object.fromEntries(Object.entries(WIKIDATA_LIVE).filter(([k]) => k !== missing));
      expect(refusal(env), missing).toContain(missing);
    }
    expect(refusal({ ...WIKIDATA_LIVE, WIKIBASE_BOT: 'false' })).toContain('WIKIBASE_BOT');
  });

  it('no localhost feature URL is ever published; without one, references carry none', () => {
    expect(refusal({ FEATURE_PUBLIC_URL: 'http://localhost:8080/api/features/{featureId}' })).toContain('FEATURE_PUBLIC_URL');
    expect(exportsSettingsFrom(parseEnv(ExportsEnvSchema, {})).wikibase.references.publicUrl).toBeUndefined();
  });

  it('the default User-Agent names where to look, and a contact when one is configured', () => {
    expect(exportsSettingsFrom(parseEnv(ExportsEnvSchema, {})).userAgent).toBe(DEFAULT_USER_AGENT);
    expect(DEFAULT_USER_AGENT).toMatch(/\+https:\/\//);
    expect(exportsSettingsFrom(parseEnv(ExportsEnvSchema, { EXPORT_CONTACT: 'a@b.example' })).userAgent).toContain('contact: a@b.example');
  });
});

describe('automatic upload per category needs the labelled set\'s figures', () => {
  it('a category measured at precision >= 0.98 on >= 20 cases may go up unreviewed; one below, or unknown, is refused at load', () => {
    const settings = exportsSettingsFrom(parseEnv(ExportsEnvSchema, { OSM_AUTO_UPLOAD_CATEGORIES: 'friedhof, denkmal' }));
    expect([...settings.osm.autoUpload]).toEqual(['friedhof', 'denkmal']);
    expect(refusal({ OSM_AUTO_UPLOAD_CATEGORIES: 'parkbank' })).toMatch(/OSM_AUTO_UPLOAD_CATEGORIES: parkbank has no figures in the labelled set/);
    const dir = mkdtempSync(join(tmpdir(), 'quality-'));
    const file = join(dir, 'quality.yaml');
    writeFileSync(file, 'threshold: { precision: 0.98, minCases: 20 }\ncategories:\n  friedhof: { cases: 50, automaticMerges: 40, falseMerges: 2 }\n  denkmal: { cases: 12, automaticMerges: 10, falseMerges: 0 }\n');
    expect(refusal({ OSM_AUTO_UPLOAD_CATEGORIES: 'friedhof', OSM_CONFLATION_QUALITY_FILE: file })).toMatch(/friedhof's automatic merges have precision 0.950 in the labelled set, below 0.98/);
    expect(refusal({ OSM_AUTO_UPLOAD_CATEGORIES: 'denkmal', OSM_CONFLATION_QUALITY_FILE: file })).toMatch(/denkmal has 12 cases in the labelled set, fewer than 20/);
    expect(refusal({ OSM_AUTO_UPLOAD_CATEGORIES: 'denkmal', OSM_CONFLATION_QUALITY_FILE: join(dir, 'missing.yaml') })).toContain('OSM_CONFLATION_QUALITY_FILE');
    expect(exportsSettingsFrom(parseEnv(ExportsEnvSchema, {})).osm.autoUpload.size).toBe(0);
  });
});

describe('the dedicated import account', () => {
  let osm: OsmApiDouble;
  beforeAll(async () => {
    osm = await startOsmApiDouble({ users: { 'import-token': { uid: 1, displayName: 'Kleinbergen_import' }, 'personal-token': { uid: 2, displayName: 'Rita' } } });
  });
  afterAll(() => osm.close());

  it('an export under another account is refused before anything is written; under the import account it goes up', async () => {
    const exporter = (token: string) => new OsmExporter({ settings: testExportsSettings({ OSM_API_URL: osm.url, OSM_ACCESS_TOKEN: token, OSM_IMPORT_ACCOUNT: 'Kleinbergen_import', OSM_CONFLATION: 'false' }), mapping: SEED_CATEGORY_MAPPING });
    const snapshot = { id: 'f2', version: 1, name: 'Gedenkstein', kategorie: 'denkmal', geometry: { type: 'Point' as const, coordinates: [11.9, 51.6] as [number, number] } };
    const refused = await exporter('personal-token').export({ snapshot, previous: null, journal: createMemoryJournal() });
    expect(refused).toEqual({ status: 'failed', reason: 'the OSM token belongs to "Rita", not to the import account OSM_IMPORT_ACCOUNT="Kleinbergen_import"' });
    expect(osm.requests.filter((r) => r.path.endsWith('/changeset/create'))).toHaveLength(0);
    expect((await exporter('import-token').export({ snapshot, previous: null, journal: createMemoryJournal() })).status).toBe('exported');
  });
});
