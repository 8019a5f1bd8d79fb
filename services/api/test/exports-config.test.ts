import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError, parseEnv } from '../../shared/config.js';
import { CategoryMappingSchema, SEED_CATEGORY_MAPPING } from '../src/exports/category-mapping.js';
import { DEFAULT_OSM_API_URL, ExportsEnvSchema, checkExportsEnv, exportsEnvShape, exportsSettingsFrom } from '../src/exports/config.js';

describe('export configuration', () => {
  it('defaults to the OSM development API and leaves every target unconfigured', () => {
    const settings = exportsSettingsFrom(parseEnv(ExportsEnvSchema, {}));
    expect(settings.osm).toMatchObject({ apiUrl: DEFAULT_OSM_API_URL, accessToken: undefined });
    // Conflation on, through the map call unless OVERPASS_URL is set; the import conventions' defaults.
    expect(settings.osm.conflation).toEqual({ enabled: true, source: 'map', overpassUrl: undefined, pointRadiusM: 30, nameStrong: 0.8, nameWeak: 0.5, ambiguityMargin: 0.05 });
    expect(settings.osm.changeset).toMatchObject({ hashtags: '#fmp-import', importTag: true, maxEditsPerHour: 500 });
    expect(settings.osm.tagMapping.categories.friedhof).toEqual({ tags: { landuse: 'cemetery' }, point: { amenity: 'grave_yard' }, line: null, match: [{ landuse: ['cemetery'] }, { amenity: ['grave_yard'] }] });
    // No licence configured: both exports refuse to run.
    expect(settings.licence.licence).toBeUndefined();
    expect(DEFAULT_OSM_API_URL).toBe('https://master.apis.dev.openstreetmap.org');
    expect(settings.wikibase).toMatchObject({ instanceUrl: undefined, credentials: undefined, language: 'de', instanceOfProperty: 'P31', coordinatesProperty: 'P625', bot: false });
    expect(settings.mail.smtpUrl).toBeUndefined();
    expect(settings.reviewers.emails).toEqual([]);
    expect(settings.agency).toEqual({ webhookUrl: undefined, webhookSecret: undefined, email: undefined });
  });

  it('parses lists, flags and credentials', () => {
    const settings = exportsSettingsFrom(
      parseEnv(ExportsEnvSchema, {
        OSM_API_URL: 'https://api.openstreetmap.org/',
        OSM_ACCESS_TOKEN: 't',
        WIKIBASE_URL: 'https://www.wikidata.org/',
        WIKIBASE_USERNAME: 'Bot@qc',
        WIKIBASE_PASSWORD: 'p',
        WIKIBASE_BOT: 'true',
        WIKIBASE_BOT_APPROVAL_URL: 'https://www.wikidata.org/wiki/Wikidata:Requests_for_permissions/Bot/CityBot',
        REVIEWER_EMAILS: ' a@example.org, b@example.org ,',
        SMTP_URL: 'smtp://mail:25',
        AGENCY_EMAIL: 'gis@agency.example',
        // The production servers need the import's paperwork since issue 27 (going-live.test.ts).
        OSM_IMPORT_PAGE_URL: 'https://wiki.openstreetmap.org/wiki/Import/City',
        OSM_IMPORT_ACCOUNT: 'City_import',
        FEATURE_PUBLIC_URL: 'https://map.city.example/features/{featureId}',
        EXPORT_CONTACT: 'gis@city.example',
        EXPORT_DATA_LICENCE: 'CC0-1.0',
        WIKIBASE_BOT_ACCOUNT: 'CityBot',
        WIKIBASE_REFERENCE_ITEM: 'Q42',
      }),
    );
    expect(settings.osm.apiUrl).toBe('https://api.openstreetmap.org');
    expect(settings.wikibase).toMatchObject({ instanceUrl: 'https://www.wikidata.org', credentials: { username: 'Bot@qc', password: 'p' }, bot: true });
    expect(settings.reviewers.emails).toEqual(['a@example.org', 'b@example.org']);
    expect(settings.agency.email).toEqual(['gis@agency.example']);
  });

  it('refuses a webhook without its secret, naming the variable', () => {
    expect(() => parseEnv(ExportsEnvSchema, { AGENCY_WEBHOOK_URL: 'https://agency.example/hook' })).toThrow(ConfigError);
    expect(() => parseEnv(ExportsEnvSchema, { AGENCY_WEBHOOK_URL: 'https://agency.example/hook' })).toThrow(/AGENCY_WEBHOOK_SECRET/);
    expect(() => parseEnv(ExportsEnvSchema, { AGENCY_WEBHOOK_URL: 'https://a.example/h', AGENCY_WEBHOOK_SECRET: 'short' })).toThrow(/AGENCY_WEBHOOK_SECRET: at least 32/);
  });

  it('refuses malformed values, naming the variable', () => {
    expect(() => parseEnv(ExportsEnvSchema, { REVIEWER_EMAILS: 'not-an-address' })).toThrow(/REVIEWER_EMAILS/);
    expect(() => parseEnv(ExportsEnvSchema, { QC_REVIEW_LINK: 'https://x.example/qc' })).toThrow(/QC_REVIEW_LINK/);
    expect(() => parseEnv(ExportsEnvSchema, { SMTP_URL: 'http://mail' })).toThrow(/SMTP_URL/);
    expect(() => parseEnv(ExportsEnvSchema, { WIKIBASE_USERNAME: 'Bot@qc' })).toThrow(/WIKIBASE_PASSWORD/);
    expect(() => parseEnv(ExportsEnvSchema, { OSM_CONFLATION_AMBIGUITY_MARGIN: '0.6' })).toThrow(/OSM_CONFLATION_AMBIGUITY_MARGIN/);
    expect(() => parseEnv(ExportsEnvSchema, { OSM_CONFLATION_AMBIGUITY_MARGIN: '-0.01' })).toThrow(/OSM_CONFLATION_AMBIGUITY_MARGIN/);
  });

  it('the shape fragment composes into another schema', () => {
    const ApiSchema = z.object({ PORT: z.coerce.number().default(3000), ...exportsEnvShape }).superRefine(checkExportsEnv);
    const env = parseEnv(ApiSchema, { PORT: '8080', OSM_ACCESS_TOKEN: 'x' });
    expect(env.PORT).toBe(8080);
    expect(exportsSettingsFrom(env).osm.accessToken).toBe('x');
  });

  it('the seed category mapping is valid data', () => {
    expect(CategoryMappingSchema.parse(SEED_CATEGORY_MAPPING)).toEqual(SEED_CATEGORY_MAPPING);
    expect(() => CategoryMappingSchema.parse({ x: { osmTags: { 'bad key': 'v' }, wikidataClass: null } })).toThrow();
  });
});
