import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startOsmApiDouble, type OsmApiDouble } from '../../shared/testing/osm-api.js';
import { readOsmChange, type UploadedBlock } from '../../../test/doubles/osm-change-reader.js';
import { SEED_CATEGORY_MAPPING } from '../src/exports/category-mapping.js';
import { RetryableExportError } from '../src/exports/errors.js';
import { createMemoryJournal } from '../src/exports/journal.js';
import type { ExportOutcome, FeatureGeometry, FeatureSnapshot } from '../src/exports/types.js';
import { testExportsSettings } from './exports-settings.js';
import { OsmExporter, type OsmExportRecord } from '../src/exports/osm/exporter.js';

const TOKEN = 'test-token';
const UA = 'feature-mapping-platform-tests/1.0';

// A fresh server per test: a first export joins existing way nodes at the same positions, so the
// same test square drawn twice on one server would share nodes (which is right on OSM).
let osm: OsmApiDouble;
beforeEach(async () => {
  osm = await startOsmApiDouble({ users: { [TOKEN]: { uid: 42, displayName: 'exporter' }, 'other-token': { uid: 43, displayName: 'other' } } });
});
afterEach(() => osm.close());

const uploadsBefore = 0;

/** The seed mapping and a category that is a line on OSM (a hedge), for the open-way cases. */
const MAPPING = { ...SEED_CATEGORY_MAPPING, hecke: { osmTags: { barrier: 'hedge' }, lineTags: { barrier: 'hedge' }, wikidataClass: null } };

function exporter(overrides: { token?: string; fetch?: typeof fetch; apiUrl?: string } = {}): OsmExporter {
  return new OsmExporter({
    // These tests are about creating and re-exporting; conflation has its own (conflation.test.ts).
    settings: testExportsSettings({ OSM_API_URL: overrides.apiUrl ?? osm.url, OSM_ACCESS_TOKEN: 'token' in overrides ? overrides.token : TOKEN, EXPORT_USER_AGENT: UA, EXPORT_HTTP_TIMEOUT_MS: '5000', OSM_CONFLATION: 'false' }),
    mapping: MAPPING,
    ...(overrides.fetch ? { fetch: overrides.fetch } : {}),
  });
}

let featureCounter = 0;
function snapshot(geometry: FeatureGeometry, extra: Partial<FeatureSnapshot> = {}): FeatureSnapshot {
  featureCounter++;
  return { id: `00000000-0000-4000-8000-${String(featureCounter).padStart(12, '0')}`, version: 1, name: `Feature ${featureCounter}`, kategorie: 'friedhof', geometry, ...extra };
}

/** The last accepted upload, after checking this test made exactly `uploadsInTest` uploads. */
function lastUpload(uploadsInTest = 1): UploadedBlock[] {
  expect(osm.acceptedUploads.length).toBe(uploadsBefore + uploadsInTest);
  return readOsmChange(osm.acceptedUploads[osm.acceptedUploads.length - 1]!);
}

function exported(outcome: ExportOutcome<OsmExportRecord>): OsmExportRecord {
  if (outcome.status !== 'exported') throw new Error(`expected exported, got ${JSON.stringify(outcome)}`);
  return outcome.result;
}

const square: FeatureGeometry = {
  type: 'Polygon',
  coordinates: [[[13.4, 52.5], [13.41, 52.5], [13.41, 52.51], [13.4, 52.51], [13.4, 52.5]]],
};
const squareWithHole: FeatureGeometry = {
  type: 'Polygon',
  coordinates: [
    [[13.4, 52.5], [13.41, 52.5], [13.41, 52.51], [13.4, 52.51], [13.4, 52.5]],
    [[13.402, 52.502], [13.404, 52.502], [13.404, 52.504], [13.402, 52.502]],
  ],
};

describe('first export, asserted element by element', () => {
  it('a Point becomes one tagged node with name, parsed address and phone', async () => {
    const feature = snapshot({ type: 'Point', coordinates: [13.3777, 52.5163] }, { kategorie: 'denkmal', name: 'Denkmal "A & B" <1>', adresse: 'Pariser Platz 1a, 10117 Berlin', telefon: '+49 30 123456' });
    const journal = createMemoryJournal();
    const record = exported(await exporter().export({ snapshot: feature, previous: null, journal }));

    const blocks = lastUpload();
    expect(blocks.map((b) => b.action)).toEqual(['create']);
    const [node] = blocks[0]!.elements;
    expect(blocks[0]!.elements).toHaveLength(1);
    expect(node!.type).toBe('node');
    expect(node!.attrs).toEqual({ id: '-1', changeset: String(record.changesetId), lat: '52.5163000', lon: '13.3777000' });
    expect(node!.tags).toEqual({
      historic: 'memorial',
      name: 'Denkmal "A & B" <1>',
      'addr:street': 'Pariser Platz',
      'addr:housenumber': '1a',
      'addr:postcode': '10117',
      'addr:city': 'Berlin',
      phone: '+49 30 123456',
    });
    expect(record).toEqual({ type: 'node', id: expect.any(Number) as number, version: 1, changesetId: journal.entries.changesetId, tags: node!.tags, changesets: [journal.entries.changesetId] });
    expect(osm.element('node', record.id)).toMatchObject({ visible: true, version: 1, lat: 52.5163, tags: { name: 'Denkmal "A & B" <1>' } });
    const changeset = osm.changeset(record.changesetId!)!;
    expect(changeset.open).toBe(false);
    expect(changeset.tags.comment).toContain(feature.id);
    expect(changeset.tags.created_by).toBe(UA);
    const create = osm.requests.find((r) => r.path === '/api/0.6/changeset/create' && r.method === 'PUT')!;
    expect(create.headers.authorization).toBe(`Bearer ${TOKEN}`);
    expect(create.headers['user-agent']).toBe(UA);
  });

  it('a LineString of a line category becomes an open way over new untagged nodes', async () => {
    const feature = snapshot({ type: 'LineString', coordinates: [[13.1, 52.1], [13.2, 52.2], [13.3, 52.25]] }, { adresse: 'Am Friedhof', kategorie: 'hecke' });
    const record = exported(await exporter().export({ snapshot: feature, previous: null, journal: createMemoryJournal() }));
    const [create] = lastUpload();
    expect(create!.action).toBe('create');
    expect(create!.elements.map((e) => `${e.type} ${e.attrs.id}`)).toEqual(['node -1', 'node -2', 'node -3', 'way -4']);
    expect(create!.elements.slice(0, 3).map((e) => [e.attrs.lon, e.attrs.lat])).toEqual([['13.1000000', '52.1000000'], ['13.2000000', '52.2000000'], ['13.3000000', '52.2500000']]);
    expect(create!.elements.slice(0, 3).every((e) => Object.keys(e.tags).length === 0)).toBe(true);
    const way = create!.elements[3]!;
    expect(way.nodeRefs).toEqual(['-1', '-2', '-3']);
    expect(way.tags).toEqual({ barrier: 'hedge', name: feature.name, 'addr:full': 'Am Friedhof' });
    expect(record.type).toBe('way');
    expect(osm.element('way', record.id)!.nodes).toHaveLength(3);
  });

  it('a Polygon without holes becomes a closed way that reuses its first node as the closing node', async () => {
    const record = exported(await exporter().export({ snapshot: snapshot(square), previous: null, journal: createMemoryJournal() }));
    const [create] = lastUpload();
    expect(create!.elements.map((e) => `${e.type} ${e.attrs.id}`)).toEqual(['node -1', 'node -2', 'node -3', 'node -4', 'way -5']);
    expect(create!.elements[4]!.nodeRefs).toEqual(['-1', '-2', '-3', '-4', '-1']);
    expect(create!.elements[4]!.tags.landuse).toBe('cemetery');
    const way = osm.element('way', record.id)!;
    expect(way.nodes![0]).toBe(way.nodes![4]);
    expect(osm.visible('node').filter((n) => way.nodes!.includes(n.id))).toHaveLength(4);
  });

  it('a Polygon with a hole becomes a multipolygon relation with an outer and an inner way', async () => {
    const record = exported(await exporter().export({ snapshot: snapshot(squareWithHole), previous: null, journal: createMemoryJournal() }));
    const [create] = lastUpload();
    expect(create!.elements.map((e) => `${e.type} ${e.attrs.id}`)).toEqual([
      'node -1', 'node -2', 'node -3', 'node -4', 'node -6', 'node -7', 'node -8',
      'way -5', 'way -9',
      'relation -10',
    ]);
    const ways = create!.elements.filter((e) => e.type === 'way');
    expect(ways[0]!.nodeRefs).toEqual(['-1', '-2', '-3', '-4', '-1']);
    expect(ways[1]!.nodeRefs).toEqual(['-6', '-7', '-8', '-6']);
    expect(ways.every((w) => Object.keys(w.tags).length === 0)).toBe(true);
    const relation = create!.elements[9]!;
    expect(relation.members).toEqual([{ type: 'way', ref: '-5', role: 'outer' }, { type: 'way', ref: '-9', role: 'inner' }]);
    expect(relation.tags).toMatchObject({ type: 'multipolygon', landuse: 'cemetery' });
    expect(record.type).toBe('relation');
  });

  it('a MultiPolygon becomes one relation with an outer way per polygon', async () => {
    const second = [[[13.5, 52.5], [13.51, 52.5], [13.51, 52.51], [13.5, 52.5]]];
    const geometry: FeatureGeometry = { type: 'MultiPolygon', coordinates: [squareWithHole.coordinates as never, second as never] };
    const record = exported(await exporter().export({ snapshot: snapshot(geometry), previous: null, journal: createMemoryJournal() }));
    const [create] = lastUpload();
    const relation = create!.elements.find((e) => e.type === 'relation')!;
    expect(relation.members.map((m) => m.role)).toEqual(['outer', 'inner', 'outer']);
    expect(create!.elements.filter((e) => e.type === 'way')).toHaveLength(3);
    const stored = osm.element('relation', record.id)!;
    expect(stored.members!.every((m) => osm.element('way', m.ref)?.visible)).toBe(true);
  });
});

describe('re-export after an edit', () => {
  it('modifies the same node with its current version and keeps tags added by others', async () => {
    const first = snapshot({ type: 'Point', coordinates: [13.0, 52.0] }, { telefon: '030 1' });
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    osm.editAsSomeoneElse('node', previous.id, (n) => {
      n.tags.wheelchair = 'yes';
    });
    const second = { ...first, version: 2, name: 'Renamed', telefon: null, geometry: { type: 'Point', coordinates: [13.0001, 52.0002] } as FeatureGeometry };
    const record = exported(await exporter().export({ snapshot: second, previous, journal: createMemoryJournal() }));

    const blocks = lastUpload(2);
    expect(blocks.map((b) => b.action)).toEqual(['modify']);
    expect(blocks[0]!.elements).toHaveLength(1);
    const node = blocks[0]!.elements[0]!;
    expect(node.attrs).toEqual({ id: String(previous.id), changeset: String(record.changesetId), version: '2', lat: '52.0002000', lon: '13.0001000' });
    expect(node.tags).toEqual({ amenity: 'grave_yard', name: 'Renamed', wheelchair: 'yes' });
    expect(record).toMatchObject({ type: 'node', id: previous.id, version: 3 });
    expect(osm.visible('node').filter((n) => n.tags.name === 'Renamed')).toHaveLength(1);
  });

  it('moves existing way nodes, creates the extra vertex and modifies the way', async () => {
    const first = snapshot({ type: 'LineString', coordinates: [[13.1, 52.1], [13.2, 52.2]] }, { kategorie: 'hecke' });
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    const oldNodes = osm.element('way', previous.id)!.nodes!;
    const second = { ...first, version: 2, geometry: { type: 'LineString', coordinates: [[13.1, 52.1], [13.25, 52.2], [13.3, 52.3]] } as FeatureGeometry };
    const record = exported(await exporter().export({ snapshot: second, previous, journal: createMemoryJournal() }));

    const blocks = lastUpload(2);
    expect(blocks.map((b) => b.action)).toEqual(['create', 'modify']);
    expect(blocks[0]!.elements.map((e) => `${e.type} ${e.attrs.id} ${e.attrs.lon},${e.attrs.lat}`)).toEqual(['node -1 13.3000000,52.3000000']);
    expect(blocks[1]!.elements.map((e) => `${e.type} ${e.attrs.id} v${e.attrs.version}`)).toEqual([`node ${oldNodes[1]} v1`, `way ${previous.id} v1`]);
    expect(blocks[1]!.elements[1]!.nodeRefs).toEqual([String(oldNodes[0]), String(oldNodes[1]), '-1']);
    expect(record).toMatchObject({ type: 'way', id: previous.id, version: 2 });
  });

  // Formerly the i-th vertex moved the i-th node: dropping the third vertex moved two nodes and deleted
  // the last one (issue 27: connected nodes dragged). Now every kept vertex keeps its node in place.
  it('drops a vertex of a closed way: no other node moves, the dropped node is deleted only if unused', async () => {
    const pentagon: FeatureGeometry = { type: 'Polygon', coordinates: [[[13.4, 52.5], [13.41, 52.5], [13.42, 52.505], [13.41, 52.51], [13.4, 52.51], [13.4, 52.5]]] };
    const first = snapshot(pentagon);
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    const oldNodes = osm.element('way', previous.id)!.nodes!;
    const record = exported(await exporter().export({ snapshot: { ...first, version: 2, geometry: square }, previous, journal: createMemoryJournal() }));

    const blocks = lastUpload(2);
    expect(blocks.map((b) => `${b.action}${b.ifUnused ? ' if-unused' : ''}`)).toEqual(['modify', 'delete if-unused']);
    expect(blocks[0]!.elements.map((e) => e.type)).toEqual(['way']);
    expect(blocks[0]!.elements[0]!.nodeRefs).toEqual([oldNodes[0], oldNodes[1], oldNodes[3], oldNodes[4], oldNodes[0]].map(String));
    expect(blocks[1]!.elements.map((e) => `${e.type} ${e.attrs.id} v${e.attrs.version}`)).toEqual([`node ${oldNodes[2]} v1`]);
    expect(osm.element('node', oldNodes[2]!)!.visible).toBe(false);
    for (const id of [oldNodes[0], oldNodes[1], oldNodes[3], oldNodes[4]]) expect(osm.element('node', id!)!.version).toBe(1);
    expect(record.version).toBe(2);
  });

  // Formerly the relation was deleted and a new way created, dropping the relation's history and
  // every tag others had added to it (issue 27): now the relation stays, with one outer member.
  it('a hole removed keeps the relation (its id, history and everyone\'s tags): the inner member goes, if unused', async () => {
    const first = snapshot(squareWithHole);
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    const relation = osm.element('relation', previous.id)!;
    osm.editAsSomeoneElse('relation', previous.id, (r) => Object.assign(r.tags, { wikidata: 'Q99', operator: 'Stadt', heritage: '4' }));
    const record = exported(await exporter().export({ snapshot: { ...first, version: 2, geometry: square }, previous, journal: createMemoryJournal() }));

    const blocks = lastUpload(2);
    expect(blocks.map((b) => `${b.action}${b.ifUnused ? ' if-unused' : ''}`)).toEqual(['modify', 'delete if-unused']);
    expect(blocks[0]!.elements.map((e) => `${e.type} ${e.attrs.id}`)).toEqual([`relation ${previous.id}`]);
    const inner = relation.members!.find((m) => m.role === 'inner')!.ref;
    expect(blocks[1]!.elements.filter((e) => e.type === 'way').map((e) => Number(e.attrs.id))).toEqual([inner]);
    expect(blocks[1]!.elements.filter((e) => e.type === 'node')).toHaveLength(3);
    expect(record).toMatchObject({ type: 'relation', id: previous.id, version: 3 });
    const kept = osm.element('relation', previous.id)!;
    expect(kept.visible).toBe(true);
    expect(kept.members).toEqual([relation.members!.find((m) => m.role === 'outer')]);
    expect(kept.tags).toEqual({ type: 'multipolygon', landuse: 'cemetery', name: first.name, wikidata: 'Q99', operator: 'Stadt', heritage: '4' });
    expect(osm.visible('way').filter((w) => Object.keys(w.tags).length > 0)).toHaveLength(0);
  });

  it('moving only the outer ring of a multipolygon modifies nodes, not the relation', async () => {
    const first = snapshot(squareWithHole);
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    const moved = structuredClone(squareWithHole) as { type: 'Polygon'; coordinates: number[][][] };
    moved.coordinates[0]![2] = [13.415, 52.515];
    const record = exported(await exporter().export({ snapshot: { ...first, version: 2, geometry: moved as FeatureGeometry }, previous, journal: createMemoryJournal() }));
    const blocks = lastUpload(2);
    expect(blocks.map((b) => b.action)).toEqual(['modify']);
    expect(blocks[0]!.elements.map((e) => e.type)).toEqual(['node']);
    expect(blocks[0]!.elements[0]!.attrs).toMatchObject({ lat: '52.5150000', lon: '13.4150000', version: '1' });
    expect(record).toMatchObject({ type: 'relation', id: previous.id, version: 1, changesetId: expect.any(Number) as number });
  });

  it('a MultiPolygon that gains a polygon gets a new outer way and a modified relation', async () => {
    const first = snapshot({ type: 'MultiPolygon', coordinates: [squareWithHole.coordinates as never] });
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    const before = osm.element('relation', previous.id)!;
    const added = [[[13.5, 52.5], [13.51, 52.5], [13.51, 52.51], [13.5, 52.5]]];
    const second = { ...first, version: 2, name: 'Zwei Teile', geometry: { type: 'MultiPolygon', coordinates: [squareWithHole.coordinates, added] } as FeatureGeometry };
    const record = exported(await exporter().export({ snapshot: second, previous, journal: createMemoryJournal() }));

    const blocks = lastUpload(2);
    expect(blocks.map((b) => b.action)).toEqual(['create', 'modify']);
    expect(blocks[0]!.elements.map((e) => `${e.type} ${e.attrs.id}`)).toEqual(['node -1', 'node -2', 'node -3', 'way -4']);
    expect(blocks[0]!.elements[3]!.nodeRefs).toEqual(['-1', '-2', '-3', '-1']);
    const relation = blocks[1]!.elements.find((e) => e.type === 'relation')!;
    expect(relation.attrs).toMatchObject({ id: String(previous.id), version: '1' });
    expect(relation.members).toEqual([...before.members!.map((m) => ({ type: 'way', ref: String(m.ref), role: m.role })), { type: 'way', ref: '-4', role: 'outer' }]);
    expect(relation.tags).toEqual({ type: 'multipolygon', landuse: 'cemetery', name: 'Zwei Teile' });
    expect(blocks[1]!.elements).toHaveLength(1);
    expect(record).toMatchObject({ type: 'relation', id: previous.id, version: 2 });
  });

  it('an unchanged snapshot sends nothing and opens no changeset', async () => {
    const first = snapshot(square);
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    const creates = osm.requests.filter((r) => r.path.endsWith('/changeset/create')).length;
    const outcome = await exporter().export({ snapshot: { ...first, version: 2 }, previous, journal: createMemoryJournal() });
    expect(outcome).toEqual({ status: 'unchanged', result: { type: 'way', id: previous.id, version: 1, changesetId: null, tags: previous.tags, changesets: previous.changesets } });
    expect(osm.requests.filter((r) => r.path.endsWith('/changeset/create')).length).toBe(creates);
  });
});

describe('errors', () => {
  it('a version conflict (someone edited between our read and our upload) is a conflict outcome, uploaded once', async () => {
    const first = snapshot({ type: 'Point', coordinates: [13.0, 52.0] });
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    const racingFetch: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      if (String(input).endsWith(`/node/${previous.id}`)) osm.editAsSomeoneElse('node', previous.id, (n) => (n.tags.note = 'concurrent'));
      return response;
    };
    const uploadsTried = osm.requests.filter((r) => r.path.endsWith('/upload')).length;
    const journal = createMemoryJournal();
    const outcome = await exporter({ fetch: racingFetch }).export({ snapshot: { ...first, version: 2, name: 'New name' }, previous, journal });

    expect(outcome.status).toBe('conflict');
    expect(outcome.status === 'conflict' && outcome.reason).toMatch(/Version mismatch: Provided 1, server had: 2 of Node/);
    expect(osm.requests.filter((r) => r.path.endsWith('/upload')).length).toBe(uploadsTried + 1);
    expect(osm.changeset(journal.entries.changesetId!)!.open).toBe(false);
    expect(osm.element('node', previous.id)!.tags.name).toBe(first.name);
  });

  it('an element deleted on OSM meanwhile is a conflict, not a crash', async () => {
    const outcome = await exporter().export({ snapshot: snapshot({ type: 'Point', coordinates: [1, 1] }), previous: { type: 'node', id: 999_999, version: 1, changesetId: 1 }, journal: createMemoryJournal() });
    expect(outcome).toEqual({ status: 'conflict', reason: 'node 999999 was deleted on OSM' });
  });

  it('without OSM_ACCESS_TOKEN the export is skipped with the reason', async () => {
    const outcome = await exporter({ token: undefined }).export({ snapshot: snapshot(square), previous: null, journal: createMemoryJournal() });
    expect(outcome).toEqual({ status: 'skipped', reason: 'OSM_ACCESS_TOKEN is not set' });
  });

  it('a rejected token is a permanent failure', async () => {
    const outcome = await exporter({ token: 'wrong' }).export({ snapshot: snapshot(square), previous: null, journal: createMemoryJournal() });
    expect(outcome.status).toBe('failed');
    expect(outcome.status === 'failed' && outcome.reason).toContain('401');
  });

  it('an unclosed ring is a permanent failure before anything is sent', async () => {
    const requests = osm.requests.length;
    const outcome = await exporter().export({ snapshot: snapshot({ type: 'Polygon', coordinates: [[[1, 1], [2, 1], [2, 2], [1, 2]]] }), previous: null, journal: createMemoryJournal() });
    expect(outcome).toEqual({ status: 'failed', reason: 'Polygon ring 0: the ring is not closed' });
    expect(osm.requests.length).toBe(requests);
  });

  // Formerly the failed attempt's changeset was left open for the retry to reuse (issue 27: empty
  // changesets left open). Now it is closed at once; the retry opens a new one and uploads once.
  it('a server error is retryable; the failed attempt\'s changeset is closed at once, the retry uploads once into a new one', async () => {
    const feature = snapshot(square);
    const journal = createMemoryJournal();
    osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'status', status: 503 });
    await expect(exporter().export({ snapshot: feature, previous: null, journal })).rejects.toBeInstanceOf(RetryableExportError);
    const changesetId = journal.entries.changesetId!;
    expect(osm.changeset(changesetId)!.open).toBe(false);
    const record = exported(await exporter().export({ snapshot: feature, previous: null, journal }));
    expect(record.changesetId).not.toBe(changesetId);
    expect(osm.changeset(changesetId)!.changes).toHaveLength(0);
    expect(osm.acceptedUploads.length).toBe(uploadsBefore + 1);
    expect(osm.changeset(record.changesetId!)!.open).toBe(false);
  });

  it('an unreachable server is retryable', async () => {
    await expect(exporter({ apiUrl: 'http://127.0.0.1:1' }).export({ snapshot: snapshot(square), previous: null, journal: createMemoryJournal() })).rejects.toBeInstanceOf(RetryableExportError);
  });

  it('a category without OSM tags is not applicable', async () => {
    const outcome = await new OsmExporter({
      settings: testExportsSettings({ OSM_API_URL: osm.url, OSM_ACCESS_TOKEN: TOKEN, EXPORT_USER_AGENT: UA, OSM_CONFLATION: 'false' }),
      mapping: { ...SEED_CATEGORY_MAPPING, sonstiges: { osmTags: {}, wikidataClass: null } },
    }).export({ snapshot: snapshot(square, { kategorie: 'sonstiges' }), previous: null, journal: createMemoryJournal() });
    expect(outcome.status).toBe('not_applicable');
  });
});

describe('crash safety: no duplicates when a run dies after OSM accepted the upload', () => {
  const geometries: [string, FeatureGeometry][] = [
    ['Point', { type: 'Point', coordinates: [13.7, 51.05] }],
    ['Polygon', square],
    ['Polygon with a hole', squareWithHole],
  ];
  it.each(geometries)('%s: the re-run recovers the elements from the changeset instead of uploading again', async (_name, geometry) => {
    const feature = snapshot(geometry);
    const journal = createMemoryJournal();
    const elementsBefore = osm.visible('node').length + osm.visible('way').length + osm.visible('relation').length;
    osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'drop-after-processing' });
    await expect(exporter().export({ snapshot: feature, previous: null, journal })).rejects.toBeInstanceOf(RetryableExportError);
    expect(osm.acceptedUploads.length).toBe(uploadsBefore + 1); // OSM did apply it

    const outcome = await exporter().export({ snapshot: feature, previous: null, journal });
    const record = exported(outcome);
    expect(outcome.status === 'exported' && outcome.detail).toBe(`recovered from changeset ${journal.entries.changesetId}`);
    expect(osm.acceptedUploads.length).toBe(uploadsBefore + 1); // and nothing was uploaded twice
    const created = osm.visible('node').length + osm.visible('way').length + osm.visible('relation').length - elementsBefore;
    const expected = readOsmChange(osm.acceptedUploads.at(-1)!)[0]!.elements.length;
    expect(created).toBe(expected);
    expect(osm.element(record.type, record.id)).toMatchObject({ visible: true, tags: { name: feature.name } });
    expect(osm.changeset(record.changesetId!)!.open).toBe(false);
  });

  it('a re-export that died after the upload recovers the modified root with its new version', async () => {
    const first = snapshot(square);
    const previous = exported(await exporter().export({ snapshot: first, previous: null, journal: createMemoryJournal() }));
    const journal = createMemoryJournal();
    osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'drop-after-processing' });
    const second = { ...first, version: 2, name: 'Second name' };
    await expect(exporter().export({ snapshot: second, previous, journal })).rejects.toBeInstanceOf(RetryableExportError);
    const record = exported(await exporter().export({ snapshot: second, previous, journal }));
    expect(record).toMatchObject({ type: 'way', id: previous.id, version: 2 });
    expect(osm.acceptedUploads.length).toBe(uploadsBefore + 2);
  });

  it('a run that died after recording the changeset but before uploading uploads into that changeset', async () => {
    const feature = snapshot({ type: 'Point', coordinates: [9.99, 53.55] });
    const journal = createMemoryJournal();
    const dyingJournal = {
      ...journal,
      recordChangeset: async (id: number) => {
        await journal.recordChangeset(id);
        throw new Error('killed');
      },
    };
    await expect(exporter().export({ snapshot: feature, previous: null, journal: dyingJournal })).rejects.toThrow('killed');
    const record = exported(await exporter().export({ snapshot: feature, previous: null, journal }));
    expect(record.changesetId).toBe(journal.entries.changesetId);
    expect(osm.visible('node').filter((n) => n.tags.name === feature.name)).toHaveLength(1);
  });

  it('if the recorded changeset was auto-closed meanwhile, the retry opens a new one', async () => {
    const feature = snapshot({ type: 'Point', coordinates: [11.57, 48.13] });
    const journal = createMemoryJournal();
    osm.injectFault({ method: 'POST', path: /\/upload$/, mode: 'status', status: 502 });
    await expect(exporter().export({ snapshot: feature, previous: null, journal })).rejects.toBeInstanceOf(RetryableExportError);
    const stale = journal.entries.changesetId!;
    osm.autoClose(stale);
    const record = exported(await exporter().export({ snapshot: feature, previous: null, journal }));
    expect(record.changesetId).not.toBe(stale);
    expect(journal.entries.changesetId).toBe(record.changesetId);
    expect(osm.visible('node').filter((n) => n.tags.name === feature.name)).toHaveLength(1);
  });
});
