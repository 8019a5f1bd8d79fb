/**
 * Edits that keep others' work (issue 27, docs/qc.md "Edits that keep others' work"), against the
 * OSM API 0.6 double: element versions, 409 on a stale version, history calls. Each test is one of the
 * damages an importer found: connected nodes dragged, community tags lost with a change of kind,
 * community fixes reverted, area tags on nodes and open ways, duplicated nodes, values verbatim.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { readOsmChange } from '../../../test/doubles/osm-change-reader.js';
import { SEED_CATEGORY_MAPPING } from '../src/exports/category-mapping.js';
import { createMemoryJournal } from '../src/exports/journal.js';
import { testExportsSettings } from './exports-settings.js';
import type { ExportOutcome, FeatureGeometry, FeatureSnapshot, Position } from '../src/exports/types.js';
import { OsmExporter, type OsmExportRecord } from '../src/exports/osm/exporter.js';

const TOKEN = 'test-token';
let osm: OsmApiDouble;
beforeEach(async () => {
  osm = await startOsmApiDouble();
});
afterEach(() => osm.close());

function exporter(): OsmExporter {
  return new OsmExporter({
    settings: testExportsSettings({ OSM_API_URL: osm.url, OSM_ACCESS_TOKEN: TOKEN, EXPORT_HTTP_TIMEOUT_MS: '5000', OSM_CONFLATION: 'false' }),
    mapping: SEED_CATEGORY_MAPPING,
  });
}

let n = 0;
function snapshot(geometry: FeatureGeometry, extra: Partial<FeatureSnapshot> = {}): FeatureSnapshot {
  n++;
  return { id: `27000000-0000-4000-8000-${String(n).padStart(12, '0')}`, version: 1, name: `Friedhof ${n}`, kategorie: 'friedhof', geometry, ...extra };
}
function exported(outcome: ExportOutcome<OsmExportRecord>): OsmExportRecord {
  if (outcome.status !== 'exported') throw new Error(`expected exported, got ${JSON.stringify(outcome)}`);
  return outcome.result;
}
const run = (s: FeatureSnapshot, previous: OsmExportRecord | null) => exporter().export({ snapshot: s, previous, journal: createMemoryJournal() });
const ring = (...p: Position[]): Position[] => [...p, p[0]!];
const polygon = (...p: Position[]): FeatureGeometry => ({ type: 'Polygon', coordinates: [ring(...p)] });

let seedId = 70_000_000;
/** Someone else's footway from a node of ours out to a node of theirs. */
function foreignFootwayFrom(nodeId: number, to: Position): number {
  const end = seedId++;
  const way = seedId++;
  osm.seed(`<osm version="0.6"><node id="${end}" version="1" changeset="5" lat="${to[1]}" lon="${to[0]}"/><way id="${way}" version="1" changeset="5"><nd ref="${nodeId}"/><nd ref="${end}"/><tag k="highway" v="footway"/></way></osm>`);
  return way;
}

const A: Position = [11.97, 51.48];
const B: Position = [11.972, 51.48];
const C: Position = [11.973, 51.481];
const D: Position = [11.972, 51.482];
const E: Position = [11.97, 51.482];

describe('geometry updates keep node identity and connections', () => {
  it('removing one vertex moves no node, not even the end of someone else\'s footway', async () => {
    const first = snapshot(polygon(A, B, C, D, E));
    const previous = exported(await run(first, null));
    const nodes = osm.element('way', previous.id)!.nodes!;
    const footway = foreignFootwayFrom(nodes[3]!, [11.9725, 51.483]);
    const positionsBefore = new Map(osm.visible('node').map((node) => [node.id, [node.lon, node.lat, node.version]]));

    const record = exported(await run({ ...first, version: 2, geometry: polygon(A, B, D, E) }, previous));
    expect(record).toMatchObject({ type: 'way', id: previous.id });
    for (const node of osm.visible('node')) expect([node.lon, node.lat, node.version], `node ${node.id}`).toEqual(positionsBefore.get(node.id));
    expect(osm.element('way', footway)!.nodes![0]).toBe(nodes[3]);
    expect(osm.element('way', previous.id)!.nodes).toEqual([nodes[0], nodes[1], nodes[3], nodes[4], nodes[0]]);
    expect(osm.element('node', nodes[2]!)!.visible).toBe(false);
  });

  it('a vertex moved off a node someone else connected to gets a new node; the shared node stays where it is', async () => {
    const first = snapshot(polygon(A, B, C, D, E));
    const previous = exported(await run(first, null));
    const nodes = osm.element('way', previous.id)!.nodes!;
    const footway = foreignFootwayFrom(nodes[2]!, [11.975, 51.481]);
    const movedC: Position = [11.9735, 51.4812];
    exported(await run({ ...first, version: 2, geometry: polygon(A, B, movedC, D, E) }, previous));
    expect(osm.element('node', nodes[2]!)).toMatchObject({ lon: C[0], lat: C[1], version: 1, visible: true });
    expect(osm.element('way', footway)!.nodes).toContain(nodes[2]);
    const way = osm.element('way', previous.id)!;
    expect(way.nodes).not.toContain(nodes[2]);
    const newNode = osm.element('node', way.nodes![2]!)!;
    expect([newNode.lon, newNode.lat]).toEqual(movedC);
  });

  it('a vertex moved on the platform\'s own untouched node moves that node; a node someone edited is left alone', async () => {
    const first = snapshot(polygon(A, B, C, D, E));
    const previous = exported(await run(first, null));
    const nodes = osm.element('way', previous.id)!.nodes!;
    osm.editAsSomeoneElse('node', nodes[3]!, (node) => {
      node.lat = node.lat! + 0.00001; // a mapper aligned it with the imagery
    });
    const movedC: Position = [11.9731, 51.4811];
    const movedD: Position = [11.9721, 51.4821];
    exported(await run({ ...first, version: 2, geometry: polygon(A, B, movedC, movedD, E) }, previous));
    expect(osm.element('node', nodes[2]!)).toMatchObject({ lon: movedC[0], lat: movedC[1], version: 2 });
    expect(osm.element('node', nodes[3]!)).toMatchObject({ version: 2, changeset: osm.element('node', nodes[3]!)!.changeset });
    expect(osm.changeset(osm.element('node', nodes[3]!)!.changeset)!.user).toBe('someone-else');
  });

  it('a first export joins an existing way node at the same position, and rings sharing a vertex share one node', async () => {
    const existing = seedId++;
    const other = seedId++;
    const fence = seedId++;
    osm.seed(`<osm version="0.6"><node id="${existing}" version="1" changeset="5" lat="${A[1]}" lon="${A[0]}"/><node id="${other}" version="1" changeset="5" lat="51.47" lon="11.97"/><way id="${fence}" version="1" changeset="5"><nd ref="${existing}"/><nd ref="${other}"/><tag k="barrier" v="fence"/></way></osm>`);
    const nodesBefore = osm.visible('node').length;
    const twoParts: FeatureGeometry = { type: 'MultiPolygon', coordinates: [[ring(A, B, D, E)], [ring(B, C, D)]] };
    const record = exported(await run(snapshot(twoParts), null));
    const [create] = readOsmChange(osm.acceptedUploads.at(-1)!);
    // A, B, D, E, C: five positions, A is the fence's node: four new nodes.
    expect(create!.elements.filter((e) => e.type === 'node')).toHaveLength(4);
    expect(osm.visible('node').length - nodesBefore).toBe(4);
    const members = osm.element('relation', record.id)!.members!.map((m) => osm.element('way', m.ref)!.nodes!);
    expect(members[0]![0]).toBe(existing);
    expect(members[1]).toContain(members[0]![1]); // B
    expect(members[1]).toContain(members[0]![2]); // D
  });
});

describe('never delete and recreate to change kind', () => {
  it('a closed way that gains a hole becomes the outer member of a new relation, which takes every tag', async () => {
    const first = snapshot(polygon(A, B, C, D, E));
    const previous = exported(await run(first, null));
    osm.editAsSomeoneElse('way', previous.id, (w) => Object.assign(w.tags, { wikidata: 'Q4711', operator: 'Kirchgemeinde' }));
    const hole = ring([11.971, 51.4805], [11.9715, 51.4805], [11.9715, 51.481]);
    const record = exported(await run({ ...first, version: 2, geometry: { type: 'Polygon', coordinates: [ring(A, B, C, D, E), hole] } }, previous));
    expect(record.type).toBe('relation');
    const relation = osm.element('relation', record.id)!;
    expect(relation.members![0]).toEqual({ type: 'way', ref: previous.id, role: 'outer' });
    expect(relation.tags).toEqual({ type: 'multipolygon', landuse: 'cemetery', name: first.name, wikidata: 'Q4711', operator: 'Kirchgemeinde' });
    const way = osm.element('way', previous.id)!;
    expect(way.visible).toBe(true);
    expect(way.tags).toEqual({});
    expect(readOsmChange(osm.acceptedUploads.at(-1)!).some((b) => b.action === 'delete')).toBe(false);
  });

  it('a point that became an area is a conflict for an admin: nothing is deleted', async () => {
    const first = snapshot({ type: 'Point', coordinates: A });
    const previous = exported(await run(first, null));
    const uploads = osm.acceptedUploads.length;
    const outcome = await run({ ...first, version: 2, geometry: polygon(A, B, D, E) }, previous);
    expect(outcome.status).toBe('conflict');
    expect(osm.acceptedUploads.length).toBe(uploads);
    expect(osm.element('node', previous.id)!.visible).toBe(true);
  });
});

describe('three-way tag merge: a value someone else changed since our last export is never overwritten', () => {
  it('the community\'s fixed name and added addr:suburb stay; our changed phone is written; the kept value is reported', async () => {
    const first = snapshot(polygon(A, B, D, E), { name: 'Neuhof Friedhof', telefon: '+49 345 1', adresse: 'Lindenstraße 3, 06110 Halle' });
    const previous = exported(await run(first, null));
    osm.editAsSomeoneElse('way', previous.id, (w) => Object.assign(w.tags, { name: 'Friedhof Neuhof', 'addr:suburb': 'Neuhof' }));
    const outcome = await run({ ...first, version: 2, telefon: '+49 345 2' }, previous);
    const record = exported(outcome);
    expect(osm.element('way', previous.id)!.tags).toEqual({
      landuse: 'cemetery', name: 'Friedhof Neuhof', phone: '+49 345 2', 'addr:street': 'Lindenstraße', 'addr:housenumber': '3', 'addr:postcode': '06110', 'addr:city': 'Halle', 'addr:suburb': 'Neuhof',
    });
    expect(outcome.status === 'exported' && outcome.detail).toContain('name=Friedhof Neuhof (ours: Neuhof Friedhof)');
    // The next base holds only our values: the name is the community's from now on.
    expect(record.tags).not.toHaveProperty('name');
    expect(record.tags).toMatchObject({ phone: '+49 345 2' });
  });

  it('a key we wrote and nobody touched is updated or removed; a key someone removed is not written back', async () => {
    const first = snapshot({ type: 'Point', coordinates: A }, { telefon: '+49 345 1', adresse: 'Am Ring 1, 06110 Halle' });
    const previous = exported(await run(first, null));
    osm.editAsSomeoneElse('node', previous.id, (node) => {
      delete node.tags.phone; // the number is dead, a mapper removed it
    });
    exported(await run({ ...first, version: 2, name: 'Friedhof Am Ring', adresse: null, telefon: '+49 345 9' }, previous));
    expect(osm.element('node', previous.id)!.tags).toEqual({ amenity: 'grave_yard', name: 'Friedhof Am Ring' });
  });

  it('an export record of an earlier release (no stored tags) merges against the version it recorded, from OSM\'s history', async () => {
    const first = snapshot({ type: 'Point', coordinates: A }, { name: 'Gottesacker' });
    const full = exported(await run(first, null));
    const legacy: OsmExportRecord = { type: full.type, id: full.id, version: full.version, changesetId: full.changesetId };
    osm.editAsSomeoneElse('node', full.id, (node) => Object.assign(node.tags, { name: 'Alter Gottesacker', denomination: 'lutheran' }));
    exported(await run({ ...first, version: 2, telefon: '+49 345 7' }, legacy));
    expect(osm.element('node', full.id)!.tags).toEqual({ amenity: 'grave_yard', name: 'Alter Gottesacker', denomination: 'lutheran', phone: '+49 345 7' });
  });

  it('a stale version (someone edits between our read and our upload) is a 409 conflict, not an overwrite', async () => {
    const first = snapshot({ type: 'Point', coordinates: A });
    const previous = exported(await run(first, null));
    const realFetch = globalThis.fetch;
    const racing: typeof fetch = async (input, init) => {
      if (init?.method === 'POST' && String(input).endsWith('/upload')) osm.editAsSomeoneElse('node', previous.id, (node) => Object.assign(node.tags, { name: 'Their name' }));
      return realFetch(input, init);
    };
    const outcome = await new OsmExporter({ settings: testExportsSettings({ OSM_API_URL: osm.url, OSM_ACCESS_TOKEN: TOKEN, OSM_CONFLATION: 'false' }), mapping: SEED_CATEGORY_MAPPING, fetch: racing })
      .export({ snapshot: { ...first, version: 2, name: 'Our name' }, previous, journal: createMemoryJournal() });
    expect(outcome.status).toBe('conflict');
    expect(osm.element('node', previous.id)!.tags.name).toBe('Their name');
  });
});

describe('the link back from OSM to Wikidata', () => {
  it('a first export whose feature already has its item carries wikidata=<item> in the same change: one upload, no second plan', async () => {
    const uploads = osm.acceptedUploads.length;
    const record = exported(await exporter().export({ snapshot: snapshot({ type: 'Point', coordinates: B }), previous: null, journal: createMemoryJournal(), wikidataItem: 'Q4712' }));
    expect(osm.element('node', record.id)!.tags.wikidata).toBe('Q4712');
    // The record's merge base holds it, so the link-back after the Wikibase export has nothing to queue.
    expect(record.tags).toMatchObject({ wikidata: 'Q4712' });
    expect(osm.acceptedUploads.length - uploads).toBe(1);
  });

  it('a re-export writes wikidata=<the feature\'s item>; a different item someone set on the element stays', async () => {
    const first = snapshot({ type: 'Point', coordinates: A });
    const previous = exported(await run(first, null));
    const record = exported(await exporter().export({ snapshot: { ...first, version: 2 }, previous, journal: createMemoryJournal(), wikidataItem: 'Q4711' }));
    expect(osm.element('node', previous.id)!.tags.wikidata).toBe('Q4711');

    osm.editAsSomeoneElse('node', previous.id, (node) => Object.assign(node.tags, { wikidata: 'Q99' }));
    const outcome = await exporter().export({ snapshot: { ...first, version: 3, telefon: '+49 345 3' }, previous: record, journal: createMemoryJournal(), wikidataItem: 'Q4711' });
    expect(outcome.status === 'exported' && outcome.detail).toContain('wikidata=Q99 (ours: Q4711)');
    expect(osm.element('node', previous.id)!.tags).toMatchObject({ wikidata: 'Q99', phone: '+49 345 3' });
  });
});

describe('tags valid for the geometry', () => {
  it('a point friedhof is a grave_yard node, never landuse on a node', async () => {
    const record = exported(await run(snapshot({ type: 'Point', coordinates: A }), null));
    expect(osm.element('node', record.id)!.tags).toMatchObject({ amenity: 'grave_yard' });
    expect(osm.element('node', record.id)!.tags).not.toHaveProperty('landuse');
  });

  it.each([
    ['a point blumenbeet', 'blumenbeet', { type: 'Point', coordinates: A } as FeatureGeometry],
    ['an open-way friedhof', 'friedhof', { type: 'LineString', coordinates: [A, B, C] } as FeatureGeometry],
    ['an open-way blumenbeet', 'blumenbeet', { type: 'LineString', coordinates: [A, B] } as FeatureGeometry],
  ])('%s is asked about, and nothing is uploaded', async (_what, kategorie, geometry) => {
    const uploads = osm.acceptedUploads.length;
    const changesets = osm.requests.filter((r) => r.path.endsWith('/changeset/create')).length;
    const outcome = await run(snapshot(geometry, { kategorie }), null);
    expect(outcome).toMatchObject({ status: 'needs_decision', candidates: [] });
    expect(outcome.status === 'needs_decision' && outcome.reason).toMatch(/no valid OSM tagging for a (point|line)/);
    expect(osm.acceptedUploads.length).toBe(uploads);
    expect(osm.requests.filter((r) => r.path.endsWith('/changeset/create')).length).toBe(changesets);
  });
});

describe('values as OSM writes them', () => {
  it('Hauptstr. is written out, the phone is international, a name in capitals gets title case', async () => {
    const record = exported(await run(snapshot({ type: 'Point', coordinates: A }, { name: 'NEUER FRIEDHOF AM WALL', adresse: 'Hauptstr. 5, 06108 Halle', telefon: '0345 6789-0' }), null));
    expect(osm.element('node', record.id)!.tags).toMatchObject({ name: 'Neuer Friedhof am Wall', 'addr:street': 'Hauptstraße', phone: '+49 345 67890' });
  });

  it('a name in capitals with an acronym stays as typed', async () => {
    const record = exported(await run(snapshot({ type: 'Point', coordinates: A }, { kategorie: 'denkmal', name: 'DENKMAL DER SED-OPFER' }), null));
    expect(osm.element('node', record.id)!.tags.name).toBe('DENKMAL DER SED-OPFER');
  });
});
