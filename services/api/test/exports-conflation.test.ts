/**
 * Conflation against the doubles over HTTP: the OSM API 0.6 double (seeded with what "the community"
 * mapped), the Overpass double over the same data, and the MediaWiki/Wikibase double.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMediaWikiDouble, type MediaWikiDouble } from '../../shared/testing/mediawiki-api.js';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { startOverpassDouble, type OverpassDouble } from '../../../test/doubles/overpass.js';
import { SEED_CATEGORY_MAPPING } from '../src/exports/category-mapping.js';
import { RetryableExportError } from '../src/exports/errors.js';
import { createMemoryJournal } from '../src/exports/journal.js';
import { loadOsmTagMapping, withOsmTagMapping } from '../src/exports/osm-tag-mapping.js';
import { OsmExporter, type OsmExportRecord } from '../src/exports/osm/exporter.js';
import { testExportsSettings } from './exports-settings.js';
import type { ExportOutcome, FeatureGeometry, FeatureSnapshot, Position } from '../src/exports/types.js';
import { WikibaseExporter, type WikibaseExportRecord } from '../src/exports/wikibase/exporter.js';
import type { ScoredCandidate } from '../src/exports/conflation/osm.js';

const MAPPING = withOsmTagMapping(SEED_CATEGORY_MAPPING, loadOsmTagMapping());
let osm: OsmApiDouble;
let overpass: OverpassDouble;
let wiki: MediaWikiDouble;
beforeAll(async () => {
  osm = await startOsmApiDouble();
  overpass = await startOverpassDouble(osm);
  wiki = await startMediaWikiDouble({ seedItems: ['Q39614', 'Q4989906', 'Q100'] });
});
afterAll(async () => {
  await Promise.all([osm.close(), overpass.close(), wiki.close()]);
});

let nextSeedId = 50_000_000;
const xmlEscape = (s: string) => s.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;');
const tagXml = (tags: Record<string, string>) => Object.entries(tags).map(([k, v]) => `<tag k="${xmlEscape(k)}" v="${xmlEscape(v)}"/>`).join('');

/** Seed a closed way (the community's cemetery outline); returns its id and node ids. */
function seedArea(ring: Position[], tags: Record<string, string>): { wayId: number; nodeIds: number[] } {
  const nodeIds = ring.slice(0, -1).map(() => nextSeedId++);
  const wayId = nextSeedId++;
  const nodes = ring.slice(0, -1).map((p, i) => `<node id="${nodeIds[i]}" version="3" lat="${p[1]}" lon="${p[0]}"/>`).join('');
  osm.seed(`<osm version="0.6">${nodes}<way id="${wayId}" version="5">${[...nodeIds, nodeIds[0]].map((n) => `<nd ref="${n}"/>`).join('')}${tagXml(tags)}</way></osm>`);
  return { wayId, nodeIds };
}

function seedNode(p: Position, tags: Record<string, string>): number {
  const id = nextSeedId++;
  osm.seed(`<osm version="0.6"><node id="${id}" version="2" lat="${p[1]}" lon="${p[0]}">${tagXml(tags)}</node></osm>`);
  return id;
}

const rectangle = (lon: number, lat: number, dLon: number, dLat: number): Position[] => [[lon, lat], [lon + dLon, lat], [lon + dLon, lat + dLat], [lon, lat + dLat], [lon, lat]];

let counter = 0;
function feature(geometry: FeatureGeometry, extra: Partial<FeatureSnapshot> = {}): FeatureSnapshot {
  counter++;
  return { id: `30000000-0000-4000-8000-${String(counter).padStart(12, '0')}`, version: 1, name: `Feature ${counter}`, kategorie: 'friedhof', geometry, ...extra };
}

function osmExporter(source: 'overpass' | 'map', env: Record<string, string> = {}): OsmExporter {
  const settings = testExportsSettings({ OSM_API_URL: osm.url, OSM_ACCESS_TOKEN: 'test-token', OVERPASS_URL: overpass.url, OSM_CONFLATION_SOURCE: source, ...env });
  return new OsmExporter({ settings, mapping: MAPPING });
}

function exported<R>(outcome: ExportOutcome<R>): R {
  if (outcome.status !== 'exported') throw new Error(`expected exported, got ${JSON.stringify(outcome)}`);
  return outcome.result;
}

/** Lookups the exporter made: Overpass queries plus map calls on the OSM API. */
const lookups = () => overpass.queries.length + osm.requests.filter((r) => r.path === '/api/0.6/map').length;

describe.each(['overpass', 'map'] as const)('OSM conflation through %s', (source) => {
  it('an existing cemetery way with a different name spelling is found and modified, not duplicated, and its foreign tags are kept', async () => {
    const lon = source === 'overpass' ? 12.39 : 12.45;
    const ring = rectangle(lon, 51.32, 0.004, 0.003);
    const community = { landuse: 'cemetery', name: 'Südfriedhof', operator: 'Stadt Leipzig', wikidata: 'Q2333', 'heritage': '4' };
    const { wayId, nodeIds } = seedArea(ring, community);
    const nodesBefore = nodeIds.map((id) => structuredClone(osm.element('node', id)!));
    const waysBefore = osm.visible('way').length;
    // The city drew it a little differently and spells it without the umlaut.
    const snapshot = feature({ type: 'Polygon', coordinates: [rectangle(lon + 0.0002, 51.3202, 0.0037, 0.0027)] }, { name: 'Suedfriedhof', telefon: '+49 341 123 45', adresse: 'Friedhofsweg 3, 04299 Leipzig' });
    const journal = createMemoryJournal();
    const lookupsBefore = lookups();

    const outcome = await osmExporter(source).export({ snapshot, previous: null, journal });
    const record = exported(outcome);
    expect(outcome.status === 'exported' && outcome.detail).toMatch(new RegExp(`^merged into existing way ${wayId}: one strong candidate`));
    expect(lookups() - lookupsBefore).toBe(1);
    expect(record).toMatchObject({ type: 'way', id: wayId, version: 6, linked: true, geometryOwned: false });
    expect(record.ownedKeys).toEqual(['addr:city', 'addr:housenumber', 'addr:postcode', 'addr:street', 'phone']);
    const way = osm.element('way', wayId)!;
    expect(way.tags).toEqual({ ...community, phone: '+49 341 123 45', 'addr:street': 'Friedhofsweg', 'addr:housenumber': '3', 'addr:postcode': '04299', 'addr:city': 'Leipzig' });
    expect(osm.visible('way')).toHaveLength(waysBefore);
    // The geometry is the community's: no node moved, none added.
    expect(nodeIds.map((id) => osm.element('node', id))).toEqual(nodesBefore);
    expect(way.nodes).toEqual([...nodeIds, nodeIds[0]]);
    // The import conventions on the changeset.
    const changeset = osm.changeset(record.changesetId!)!;
    expect(changeset.tags).toMatchObject({ source: 'municipal feature register (city feature platform)', hashtags: '#fmp-import', import: 'yes', created_by: 'feature-mapping-platform-tests/1.0', 'source:license': 'CC0-1.0' });
    expect(changeset.tags.comment).toContain(snapshot.id);
    expect(changeset.tags.comment).toContain('#fmp-import');
    expect(journal.entries.decision).toMatchObject({ outcome: 'link', target: { type: 'way', id: wayId }, decidedBy: null });

    // A re-approval after the link modifies the same element: our phone changes, the community's name stays.
    const again = await osmExporter(source).export({ snapshot: { ...snapshot, version: 2, telefon: '+49 341 999', adresse: null }, previous: record, journal: createMemoryJournal() });
    const second = exported(again);
    expect(second).toMatchObject({ type: 'way', id: wayId, version: 7, linked: true, ownedKeys: ['phone'] });
    expect(osm.element('way', wayId)!.tags).toEqual({ ...community, phone: '+49 341 999' });
    expect(osm.visible('way')).toHaveLength(waysBefore);
    expect(lookups() - lookupsBefore).toBe(1);
  });

  it('no candidate: the feature is created as before', async () => {
    const lon = source === 'overpass' ? 12.2 : 12.25;
    seedNode([lon, 51.2], { historic: 'memorial', name: 'Ganz anderes Denkmal' });
    const snapshot = feature({ type: 'Point', coordinates: [lon + 0.0001, 51.2] }, { kategorie: 'denkmal', name: 'Gedenkstein Bauernkrieg' });
    const journal = createMemoryJournal();
    const record = exported(await osmExporter(source).export({ snapshot, previous: null, journal }));
    expect(record.linked).toBeUndefined();
    expect(osm.element('node', record.id)!.tags).toEqual({ historic: 'memorial', name: 'Gedenkstein Bauernkrieg' });
    expect(journal.entries.decision).toMatchObject({ outcome: 'create', candidates: [] });
  });
});

describe('OSM conflation decisions', () => {
  it('two candidates stop the export with needs_decision; the reviewer\'s choice resumes it and modifies the chosen element', async () => {
    const a = seedNode([12.301, 51.301], { historic: 'memorial', name: 'Kriegerdenkmal' });
    const b = seedNode([12.3011, 51.3011], { historic: 'monument', name: 'Kriegerdenkmal 1870/71', 'memorial:type': 'obelisk' });
    const snapshot = feature({ type: 'Point', coordinates: [12.30105, 51.30105] }, { kategorie: 'denkmal', name: 'Kriegerdenkmal', telefon: '+49 341 1' });
    const journal = createMemoryJournal();
    const uploads = osm.acceptedUploads.length;

    const first = await osmExporter('overpass').export({ snapshot, previous: null, journal });
    expect(first.status).toBe('needs_decision');
    const candidates = (first as { candidates: ScoredCandidate[] }).candidates;
    expect(candidates.map((c) => `${c.type}/${c.id}`).sort()).toEqual([`node/${a}`, `node/${b}`].sort());
    expect(candidates.every((c) => c.geometry.type === 'Point')).toBe(true);
    expect(osm.acceptedUploads.length).toBe(uploads);

    // The reviewer picks the obelisk (what POST /api/qc/jobs/{id}/decision records), and the job runs again.
    await journal.recordDecision({ outcome: 'link', target: { type: 'node', id: b }, moveGeometry: false, reason: 'reviewer chose node', candidates, decidedBy: { id: 'rita', name: 'Rita' } });
    const lookupsBefore = lookups();
    const record = exported(await osmExporter('overpass').export({ snapshot, previous: null, journal }));
    expect(lookups()).toBe(lookupsBefore);
    expect(record).toMatchObject({ type: 'node', id: b, linked: true });
    expect(osm.element('node', b)!.tags).toEqual({ historic: 'monument', name: 'Kriegerdenkmal 1870/71', 'memorial:type': 'obelisk', phone: '+49 341 1' });
    expect(osm.element('node', b)!).toMatchObject({ lat: 51.3011, lon: 12.3011 });
    expect(osm.element('node', a)!.version).toBe(2);
    expect(osm.acceptedUploads.length).toBe(uploads + 1);
  });

  it('a weak candidate (an unnamed flower bed on the spot) waits for a reviewer; "create new" then creates', async () => {
    const ring = rectangle(12.31, 51.31, 0.0002, 0.0001);
    seedArea(ring, { landuse: 'flowerbed' });
    const snapshot = feature({ type: 'Polygon', coordinates: [ring] }, { kategorie: 'blumenbeet', name: 'Rosenbeet am Brunnen' });
    const journal = createMemoryJournal();
    const first = await osmExporter('map').export({ snapshot, previous: null, journal });
    expect(first).toMatchObject({ status: 'needs_decision', reason: 'one weak candidate (no name)' });
    await journal.recordDecision({ outcome: 'create', reason: 'reviewer chose to create', candidates: [], decidedBy: { id: 'rita', name: null } });
    const record = exported(await osmExporter('map').export({ snapshot, previous: null, journal }));
    expect(record.linked).toBeUndefined();
    expect(osm.element('way', record.id)!.tags).toEqual({ landuse: 'flowerbed', name: 'Rosenbeet am Brunnen' });
  });

  it('a reviewer may let the export move a linked element onto the feature geometry', async () => {
    const { wayId, nodeIds } = seedArea(rectangle(12.32, 51.32, 0.001, 0.001), { landuse: 'cemetery', name: 'Friedhof Probstheida' });
    const snapshot = feature({ type: 'Polygon', coordinates: [rectangle(12.3201, 51.3201, 0.001, 0.001)] }, { name: 'Friedhof Probstheida' });
    const journal = createMemoryJournal();
    await journal.recordDecision({ outcome: 'link', target: { type: 'way', id: wayId }, moveGeometry: true, reason: 'reviewer chose way and to move its geometry', candidates: [], decidedBy: { id: 'rita', name: null } });
    const record = exported(await osmExporter('map').export({ snapshot, previous: null, journal }));
    expect(record).toMatchObject({ id: wayId, geometryOwned: true });
    expect(osm.element('node', nodeIds[0]!)!).toMatchObject({ lon: 12.3201, lat: 51.3201 });
  });

  it('Overpass refusing with 429 is retryable; a malformed answer is not retried forever', async () => {
    overpass.tooManyRequests(1);
    const snapshot = feature({ type: 'Point', coordinates: [12.33, 51.33] });
    await expect(osmExporter('overpass').export({ snapshot, previous: null, journal: createMemoryJournal() })).rejects.toBeInstanceOf(RetryableExportError);
    overpass.runtimeError();
    await expect(osmExporter('overpass').export({ snapshot, previous: null, journal: createMemoryJournal() })).rejects.toThrow(/Query timed out/);
  });

  it('refuses to export without a licence that permits ODbL', async () => {
    const snapshot = feature({ type: 'Point', coordinates: [12.34, 51.34] });
    expect(await osmExporter('map', { EXPORT_DATA_LICENCE: 'CC-BY-4.0' }).export({ snapshot, previous: null, journal: createMemoryJournal() })).toEqual({
      status: 'skipped',
      reason: 'EXPORT_DATA_LICENCE CC-BY-4.0 does not permit publishing in OpenStreetMap (ODbL); allowed: CC0-1.0, PDDL-1.0, ODbL-1.0, dl-de-zero-2.0',
    });
  });
});

describe('Wikibase conflation and references', () => {
  const BOT = { WIKIBASE_USERNAME: 'Exporter@qc', WIKIBASE_PASSWORD: 'bot-password-123' };
  function wikiExporter(env: Record<string, string> = {}): WikibaseExporter {
    const settings = testExportsSettings({ WIKIBASE_URL: wiki.url, ...BOT, WIKIBASE_REFERENCE_ITEM: 'Q100', FEATURE_PUBLIC_URL: 'https://karte.example.org/features/{featureId}', ...env });
    return new WikibaseExporter({ settings, mapping: MAPPING, maxlagBackoffMs: 10 });
  }
  const entity = (id: string) => ({ 'entity-type': 'item', 'numeric-id': Number(id.slice(1)), id });
  const today = () => `+${new Date().toISOString().slice(0, 10)}T00:00:00Z`;

  function expectOurReference(statement: { references?: { snaks: Record<string, { datavalue?: { value: unknown } }[]> }[] }, featureId: string): void {
    expect(statement.references).toHaveLength(1);
    const snaks = statement.references![0]!.snaks;
    expect(Object.keys(snaks).sort()).toEqual(['P248', 'P813', 'P854']);
    expect(snaks.P248![0]!.datavalue!.value).toMatchObject({ id: 'Q100' });
    expect(snaks.P854![0]!.datavalue!.value).toBe(`https://karte.example.org/features/${featureId}`);
    expect(snaks.P813![0]!.datavalue!.value).toMatchObject({ time: today(), precision: 11 });
  }

  // Formerly linked and edited automatically (issue 27: references added to a falsely linked item);
  // an item found by label and place alone is now asked about, and edited once a reviewer confirms.
  it('an existing item near the feature with the class and a similar label is asked about first; confirmed, it gets only the missing statements, each with references', async () => {
    const itemId = wiki.addItem({
      labels: { de: 'Südfriedhof', en: 'South Cemetery' },
      claims: {
        P31: [{ type: 'wikibase-entityid', value: entity('Q39614') }],
        P625: [{ type: 'globecoordinate', value: { latitude: 51.3215, longitude: 12.392, precision: 0.0001, globe: 'http://www.wikidata.org/entity/Q2' } }],
      },
    });
    const before = structuredClone(wiki.items.get(itemId)!);
    const snapshot = feature({ type: 'Polygon', coordinates: [rectangle(12.39, 51.32, 0.004, 0.003)] }, { name: 'Suedfriedhof' });
    const journal = createMemoryJournal();
    const asked = await wikiExporter().export({ snapshot, previous: null, journal, osmLink: { type: 'relation', id: 777, wikidata: null } });
    expect(asked).toMatchObject({ status: 'needs_decision', reason: expect.stringContaining(`one strong candidate found by label and place: ${itemId}`) as string });
    expect(wiki.items.get(itemId)).toEqual(before);
    await journal.recordMatch({ outcome: 'link', itemId, reason: 'reviewer confirmed', candidates: [], decidedBy: { id: 'rita', name: 'Rita' } });
    const outcome = await wikiExporter().export({ snapshot, previous: null, journal, osmLink: { type: 'relation', id: 777, wikidata: null } });
    const record = exported(outcome);
    expect(record).toMatchObject({ itemId, linked: true });
    expect(wiki.createdItems().some((i) => i.id !== itemId && i.labels.de?.value === 'Suedfriedhof')).toBe(false);
    const after = wiki.items.get(itemId)!;
    // Nothing that was there changed: labels, values and statement ids stay; no statement was replaced.
    expect(after.labels).toEqual(before.labels);
    const withoutReferences = (statements: typeof before.claims.P31) => statements!.map(({ references: _references, ...rest }) => rest);
    expect(withoutReferences(after.claims.P31)).toEqual(withoutReferences(before.claims.P31));
    expect(withoutReferences(after.claims.P625)).toEqual(withoutReferences(before.claims.P625));
    // The class and the coordinate (our centroid, to the metre) say what our data says: they got our reference.
    expectOurReference(after.claims.P31![0]!, snapshot.id);
    expectOurReference(after.claims.P625![0]!, snapshot.id);
    // The one thing missing, the OSM relation (P402), was added, with our reference; never P143.
    expect(after.claims.P402).toHaveLength(1);
    expect(after.claims.P402![0]!.mainsnak.datavalue!.value).toBe('777');
    expectOurReference(after.claims.P402![0]!, snapshot.id);
    expect(JSON.stringify(after)).not.toContain('P143');
    expect(journal.entries.match).toMatchObject({ outcome: 'link', itemId });
  });

  it('the item named by the OSM element\'s wikidata tag is completed with a coordinate; a new item carries references on every statement', async () => {
    const itemId = wiki.addItem({ labels: { de: 'Völkerschlachtdenkmal' }, claims: { P31: [{ type: 'wikibase-entityid', value: entity('Q4989906') }] } });
    const snapshot = feature({ type: 'Point', coordinates: [12.4131, 51.3123] }, { kategorie: 'denkmal', name: 'Voelkerschlachtdenkmal' });
    const record = exported(await wikiExporter().export({ snapshot, previous: null, journal: createMemoryJournal(), osmLink: { type: 'way', id: 1234, wikidata: itemId } }));
    expect(record).toMatchObject({ itemId, linked: true });
    const item = wiki.items.get(itemId)!;
    expect(item.labels).toEqual({ de: { language: 'de', value: 'Völkerschlachtdenkmal' } });
    expect(item.claims.P31).toHaveLength(1);
    expectOurReference(item.claims.P31![0]!, snapshot.id);
    expect(item.claims.P625).toHaveLength(1);
    expectOurReference(item.claims.P625![0]!, snapshot.id);

    const fresh = feature({ type: 'Point', coordinates: [12.0, 51.0] }, { kategorie: 'denkmal', name: 'Neues Mahnmal am Markt' });
    const created = exported(await wikiExporter().export({ snapshot: fresh, previous: null, journal: createMemoryJournal() }));
    const newItem = wiki.items.get(created.itemId)!;
    for (const statement of [...newItem.claims.P31!, ...newItem.claims.P625!]) expectOurReference(statement, fresh.id);
  });

  it('honours maxlag: waits with backoff while the wiki lags, and hands back to the queue if it keeps lagging', async () => {
    wiki.setLag(8, 3, 0);
    const snapshot = feature({ type: 'Point', coordinates: [11.9, 50.9] }, { kategorie: 'denkmal', name: 'Lagstein' });
    const created = exported(await wikiExporter().export({ snapshot, previous: null, journal: createMemoryJournal() }));
    expect(wiki.items.get(created.itemId)).toBeDefined();
    expect(wiki.requests.filter((r) => r.params.maxlag !== undefined).every((r) => r.params.maxlag === '5')).toBe(true);

    wiki.setLag(8, 1000, 0);
    const stuck = feature({ type: 'Point', coordinates: [11.8, 50.8] }, { kategorie: 'denkmal', name: 'Lagstein zwei' });
    await expect(wikiExporter({ WIKIBASE_MAXLAG_RETRIES: '2' }).export({ snapshot: stuck, previous: null, journal: createMemoryJournal() })).rejects.toThrow(/replication lag stayed above maxlag=5 after 3 attempts/);
    wiki.setLag(0, 0);
  });

  it('refuses to export without a CC0-compatible licence, and with credentials of another account than the configured bot', async () => {
    const snapshot = feature({ type: 'Point', coordinates: [11.7, 50.7] }, { kategorie: 'denkmal', name: 'Lizenzstein' });
    expect(await wikiExporter({ EXPORT_DATA_LICENCE: 'ODbL-1.0' }).export({ snapshot, previous: null, journal: createMemoryJournal() })).toMatchObject({ status: 'skipped', reason: expect.stringMatching(/does not permit publishing in Wikidata \(CC0\)/) });
    expect(await wikiExporter({ WIKIBASE_BOT_ACCOUNT: 'CityImportBot' }).export({ snapshot, previous: null, journal: createMemoryJournal() })).toMatchObject({ status: 'failed', reason: expect.stringMatching(/WIKIBASE_BOT_ACCOUNT/) });
  });
});

// Keep the type import used when only some describes run.
export type { OsmExportRecord, WikibaseExportRecord };
