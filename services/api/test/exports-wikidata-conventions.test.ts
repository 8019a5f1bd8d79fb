/**
 * Wikidata as a bot operator would run it (issue 27), against the MediaWiki/Wikibase double: the bot
 * flag asserted on every edit and a User-Agent with a contact; new items with a description, P17 and
 * P131 where configured, the OSM relation (P402); candidates whose class is a subclass (P279) of the
 * category's class; an item found by label and place is asked about, never edited unconfirmed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMediaWikiDouble, type MediaWikiDouble } from '../../shared/testing/mediawiki-api.js';
import { SEED_CATEGORY_MAPPING } from '../src/exports/category-mapping.js';
import { createMemoryJournal } from '../src/exports/journal.js';
import { testExportsSettings } from './exports-settings.js';
import type { FeatureSnapshot } from '../src/exports/types.js';
import { WikibaseExporter } from '../src/exports/wikibase/exporter.js';

let wiki: MediaWikiDouble;
beforeAll(async () => {
  wiki = await startMediaWikiDouble({
    users: [{ name: 'KleinbergenBot', loginName: 'KleinbergenBot@export', password: 'bot-password-123', bot: true, oauth2Token: 'wiki-oauth2-token' }],
    properties: { P11693: 'external-id', P31: 'wikibase-item', P279: 'wikibase-item', P625: 'globe-coordinate', P17: 'wikibase-item', P131: 'wikibase-item', P248: 'wikibase-item', P854: 'url', P813: 'time', P402: 'external-id' },
    seedItems: ['Q39614', 'Q4989906', 'Q183', 'Q77777', 'Q100', 'Q575759'],
  });
});
afterAll(() => wiki.close());

const entity = (id: string) => ({ 'entity-type': 'item', 'numeric-id': Number(id.slice(1)), id });
function exporter(env: Record<string, string> = {}): WikibaseExporter {
  const settings = testExportsSettings({
    WIKIBASE_URL: wiki.url,
    WIKIBASE_USERNAME: 'KleinbergenBot@export',
    WIKIBASE_PASSWORD: 'bot-password-123',
    WIKIBASE_BOT: 'true',
    WIKIBASE_BOT_ACCOUNT: 'KleinbergenBot',
    WIKIBASE_BOT_APPROVAL_URL: 'https://www.wikidata.org/wiki/Wikidata:Requests_for_permissions/Bot/KleinbergenBot',
    WIKIBASE_REFERENCE_ITEM: 'Q100',
    FEATURE_PUBLIC_URL: 'https://karte.kleinbergen.example/features/{featureId}',
    WIKIBASE_COUNTRY_ITEM: 'Q183',
    WIKIBASE_LOCATED_IN_ITEM: 'Q77777',
    WIKIBASE_PLACE_NAME: 'Kleinbergen',
    EXPORT_CONTACT: 'geodaten@kleinbergen.example',
    EXPORT_USER_AGENT: '',
    ...env,
  });
  return new WikibaseExporter({ settings, mapping: SEED_CATEGORY_MAPPING, maxlagBackoffMs: 10 });
}
let n = 0;
const feature = (extra: Partial<FeatureSnapshot> = {}): FeatureSnapshot => {
  n++;
  return { id: `27270000-0000-4000-8000-${String(n).padStart(12, '0')}`, version: 1, name: `Friedhof ${n}`, kategorie: 'friedhof', geometry: { type: 'Point', coordinates: [11.9 + n / 100, 51.6] }, ...extra };
};

describe('new items', () => {
  it('carry a description, P17, P131 and the OSM relation, each statement referenced; edits assert the bot flag and the User-Agent names a contact', async () => {
    const snapshot = feature({ name: 'Friedhof Rodau' });
    const outcome = await exporter().export({ snapshot, previous: null, journal: createMemoryJournal(), osmLink: { type: 'relation', id: 4711, wikidata: null } });
    if (outcome.status !== 'exported') throw new Error(JSON.stringify(outcome));
    const item = wiki.items.get(outcome.result.itemId)!;
    expect(item.descriptions).toEqual({ de: { language: 'de', value: 'Friedhof in Kleinbergen' } });
    expect(item.claims.P17![0]!.mainsnak.datavalue!.value).toMatchObject({ id: 'Q183' });
    expect(item.claims.P131![0]!.mainsnak.datavalue!.value).toMatchObject({ id: 'Q77777' });
    expect(item.claims.P402![0]!.mainsnak.datavalue!.value).toBe('4711');
    for (const property of ['P31', 'P625', 'P17', 'P131', 'P402']) expect(item.claims[property]![0]!.references, property).toHaveLength(1);
    const edits = wiki.requests.filter((r) => r.params.action === 'wbeditentity');
    expect(edits.length).toBeGreaterThan(0);
    for (const edit of edits) {
      expect(edit.params.assert).toBe('bot');
      expect(String(edit.headers['user-agent'])).toContain('contact: geodaten@kleinbergen.example');
    }
  });
});

describe('the OSM link on the item', () => {
  it('a node gets the configured node property (Wikidata: P11693), with our reference; without it, none', async () => {
    const withLink = await exporter({ WIKIBASE_PROPERTY_OSM_NODE: 'P11693' }).export({ snapshot: feature({ name: 'Gedenkstein Nordtor', kategorie: 'denkmal' }), previous: null, journal: createMemoryJournal(), osmLink: { type: 'node', id: 123456, wikidata: null } });
    if (withLink.status !== 'exported') throw new Error(JSON.stringify(withLink));
    const item = wiki.items.get(withLink.result.itemId)!;
    expect(item.claims.P11693![0]!.mainsnak.datavalue!.value).toBe('123456');
    expect(item.claims.P11693![0]!.references).toHaveLength(1);
    const without = await exporter().export({ snapshot: feature({ name: 'Gedenkstein Südtor', kategorie: 'denkmal' }), previous: null, journal: createMemoryJournal(), osmLink: { type: 'node', id: 123457, wikidata: null } });
    if (without.status !== 'exported') throw new Error(JSON.stringify(without));
    expect(wiki.items.get(without.result.itemId)!.claims.P11693).toBeUndefined();
  });
});

describe('candidates', () => {
  it('an item whose class is a subclass (P279) of the category\'s class is a candidate; found by label and place, it is asked about and left untouched', async () => {
    // "Urnenfriedhof" (a made-up class here) → P279 cemetery (Q39614).
    const urnCemetery = wiki.addItem({ labels: { de: 'Urnenfriedhof' }, claims: { P279: [{ type: 'wikibase-entityid', value: entity('Q39614') }] } });
    const itemId = wiki.addItem({
      labels: { de: 'Urnenhain Rodau' },
      claims: {
        P31: [{ type: 'wikibase-entityid', value: entity(urnCemetery) }],
        P625: [{ type: 'globecoordinate', value: { latitude: 51.6, longitude: 12.5, precision: 0.0001, globe: 'http://www.wikidata.org/entity/Q2' } }],
      },
    });
    const before = structuredClone(wiki.items.get(itemId)!);
    const snapshot = feature({ name: 'Urnenhain Rodau', geometry: { type: 'Point', coordinates: [12.5001, 51.6] } });
    const outcome = await exporter().export({ snapshot, previous: null, journal: createMemoryJournal() });
    expect(outcome).toMatchObject({ status: 'needs_decision', candidates: [{ itemId, viaOsmLink: false, strength: 'strong' }] });
    expect(wiki.items.get(itemId)).toEqual(before);
  });

  it('an item of an unrelated class nearby with the same label is not a candidate', async () => {
    const itemId = wiki.addItem({
      labels: { de: 'Friedhof Hasenwinkel' },
      claims: {
        P31: [{ type: 'wikibase-entityid', value: entity('Q575759') }],
        P625: [{ type: 'globecoordinate', value: { latitude: 51.6, longitude: 12.6, precision: 0.0001, globe: 'http://www.wikidata.org/entity/Q2' } }],
      },
    });
    const snapshot = feature({ name: 'Friedhof Hasenwinkel', geometry: { type: 'Point', coordinates: [12.6001, 51.6] } });
    const outcome = await exporter().export({ snapshot, previous: null, journal: createMemoryJournal() });
    if (outcome.status !== 'exported') throw new Error(JSON.stringify(outcome));
    expect(outcome.result.itemId).not.toBe(itemId);
  });
});
