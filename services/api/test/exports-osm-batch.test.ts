import { describe, expect, it } from 'vitest';
import { combineParts, createdNodesOf, findPartInDownload, groupParts, positionKey, reuseCreatedNodes, touchedExisting, type BatchPart } from '../src/exports/osm/batch.js';
import { planFirstExport } from '../src/exports/osm/plan.js';
import { changeCount, type DiffResultEntry, type OsmChange, type OsmElement, type OsmNode } from '../src/exports/osm/model.js';

const ring = (x: number) => [[x, 51], [x + 0.001, 51], [x + 0.001, 51.001], [x, 51]] as [number, number][];
const part = (key: number, x: number, name: string): BatchPart => {
  const plan = planFirstExport({ type: 'Polygon', coordinates: [ring(x)] }, { landuse: 'cemetery', name });
  return { key, root: plan.root, change: plan.change };
};

/** What the server does with a combined upload: real ids for placeholders, version 1, shuffled order. */
function applied(change: ReturnType<typeof combineParts>['change']): { create: OsmElement[]; modify: OsmElement[]; delete: OsmElement[] } {
  let next = 5000;
  const ids = new Map<string, number>();
  const real = (type: string, id: number) => (id < 0 ? ids.get(`${type}/${id}`)! : id);
  for (const e of change.create) ids.set(`${e.type}/${e.id}`, next++);
  const create = change.create.map((e): OsmElement => {
    const id = real(e.type, e.id);
    if (e.type === 'node') return { ...e, id, version: 1 };
    if (e.type === 'way') return { ...e, id, version: 1, nodeRefs: e.nodeRefs.map((r) => real('node', r)) };
    return { ...e, id, version: 1, members: e.members.map((m) => ({ ...m, ref: real(m.type, m.ref) })) };
  });
  return { create: create.reverse(), modify: [], delete: [] };
}

describe('a batch of exports in one osmChange', () => {
  it('makes every placeholder unique across the parts and keeps each part\'s references inside it', () => {
    const { parts, change } = combineParts([part(1, 12.1, 'A'), part(2, 12.2, 'B'), part(3, 12.3, 'C')]);
    const ids = change.create.map((e) => `${e.type}/${e.id}`);
    expect(new Set(ids).size).toBe(ids.length);
    expect(change.create).toHaveLength(3 * 4);
    for (const p of parts) {
      const own = new Set(p.change.create.map((e) => e.id));
      const way = p.change.create.find((e) => e.type === 'way')!;
      expect(way.type === 'way' && way.nodeRefs.every((r) => own.has(r))).toBe(true);
      expect(own.has(p.root.id)).toBe(true);
    }
  });

  it('finds each part\'s root in the changeset download by content, also for two parts with identical content', () => {
    const { parts, change } = combineParts([part(1, 12.1, 'A'), part(2, 12.2, 'Twin'), part(3, 12.2, 'Twin')]);
    const download = applied(change);
    const taken = new Set<string>();
    const found = parts.map((p) => findPartInDownload(p, download, taken));
    expect(found.every((f) => f !== null && f.version === 1)).toBe(true);
    expect(new Set(found.map((f) => f!.id)).size).toBe(3);
    const byId = new Map(download.create.map((e) => [e.id, e]));
    expect(byId.get(found[0]!.id)!.tags.name).toBe('A');
    expect(byId.get(found[1]!.id)!.tags.name).toBe('Twin');
  });

  it('does not find a part whose upload never happened, nor one whose content differs', () => {
    const [a, b] = combineParts([part(1, 12.1, 'A'), part(2, 12.2, 'B')]).parts;
    const onlyA = applied(combineParts([part(1, 12.1, 'A')]).change);
    expect(findPartInDownload(a!, onlyA, new Set())).not.toBeNull();
    expect(findPartInDownload(b!, onlyA, new Set())).toBeNull();
    const moved = applied(combineParts([part(2, 12.25, 'B')]).change);
    expect(findPartInDownload(b!, moved, new Set())).toBeNull();
  });

  it('finds an existing root by id with its new version, and says which existing elements a part touches', () => {
    const modified: OsmElement = { type: 'way', id: 77, version: 3, nodeRefs: [1, 2, 3, 1], tags: { landuse: 'cemetery', name: 'Alt' } };
    const p: BatchPart = { key: 9, root: { type: 'way', id: 77 }, change: { create: [], modify: [modified], delete: [], deleteIfUnused: [] } };
    expect([...touchedExisting(p.change)]).toEqual(['way/77']);
    expect(findPartInDownload(p, { create: [], modify: [{ ...modified, version: 4 }], delete: [] }, new Set())).toEqual({ id: 77, version: 4 });
    expect(findPartInDownload(p, { create: [], modify: [{ ...modified, id: 78, version: 4 }], delete: [] }, new Set())).toBeNull();
  });
});

/** Squares of 0.001° side in a row; neighbours share their common edge's two corners exactly. */
const square = (key: number, column: number, name: string): BatchPart => {
  const x = 12 + column * 0.001;
  const plan = planFirstExport({ type: 'Polygon', coordinates: [[[x, 51], [x + 0.001, 51], [x + 0.001, 51.001], [x, 51.001], [x, 51]]] }, { landuse: 'cemetery', name });
  return { key, root: plan.root, change: plan.change };
};

/** A stand-in for OSM's upload: real ids for placeholders, positive refs kept; every node ever created is kept. */
function server() {
  let next = 9000;
  const nodes: OsmNode[] = [];
  const ways: OsmElement[] = [];
  return {
    nodes,
    ways,
    upload(change: OsmChange): DiffResultEntry[] {
      const ids = new Map<string, number>();
      for (const e of change.create) ids.set(`${e.type}/${e.id}`, next++);
      const real = (type: string, id: number) => (id < 0 ? ids.get(`${type}/${id}`)! : id);
      for (const e of change.create) {
        if (e.type === 'node') nodes.push({ ...e, id: real('node', e.id) });
        if (e.type === 'way') ways.push({ ...e, id: real('way', e.id), nodeRefs: e.nodeRefs.map((r) => real('node', r)) });
      }
      return change.create.map((e) => ({ type: e.type, oldId: e.id, newId: real(e.type, e.id), newVersion: 1 }));
    },
  };
}

describe('a batch split over changesets', () => {
  const item = (part: BatchPart) => ({ part });

  it('neighbours sharing nodes stay in one changeset when they fit, even with another part between them', () => {
    const [a, c, b] = [square(1, 0, 'A'), square(3, 5, 'C'), square(2, 1, 'B')];
    expect(changeCount(combineParts([a, b]).change)).toBe(8);
    const groups = groupParts([a, c, b].map(item), 10);
    expect(groups.map((g) => g.map((x) => x.part.key))).toEqual([[1, 2], [3]]);
    // In order, A and C would fill the first changeset (10 changes of 12) and B would go alone; A and B stay together.
    expect(groupParts([a, c, b].map(item), 12).map((g) => g.map((x) => x.part.key))).toEqual([[1, 2], [3]]);
    expect(groupParts([a, c, b].map(item), 13).map((g) => g.map((x) => x.part.key))).toEqual([[1, 2, 3]]);
  });

  it('neighbours too large for one changeset: the later changeset references the nodes the earlier one created, never a second node at a position', () => {
    const parts = [square(1, 0, 'A'), square(2, 1, 'B'), square(3, 2, 'C')];
    const groups = groupParts(parts.map(item), 7);
    expect(groups.map((g) => g.map((x) => x.part.key))).toEqual([[1], [2], [3]]);

    const osm = server();
    const created = new Map<string, number>();
    for (const group of groups) {
      const { parts: combined, change } = combineParts(group.map((g) => reuseCreatedNodes(g.part, created)));
      for (const [position, id] of createdNodesOf(combined, osm.upload(change))) created.set(position, id);
    }
    // 3 squares in a row: 8 distinct corners, each created once; each way refers to its four.
    const positions = osm.nodes.map(positionKey);
    expect(positions).toHaveLength(8);
    expect(new Set(positions).size).toBe(8);
    const [wa, wb, wc] = osm.ways as Extract<OsmElement, { type: 'way' }>[];
    const shared = (x: number[], y: number[]) => x.filter((r) => y.includes(r));
    expect(new Set(shared(wa!.nodeRefs, wb!.nodeRefs)).size).toBe(2);
    expect(new Set(shared(wb!.nodeRefs, wc!.nodeRefs)).size).toBe(2);
    // B's own upload created only its two new corners and the way.
    expect(changeCount(reuseCreatedNodes(parts[1]!, new Map(osm.nodes.slice(0, 4).map((n) => [positionKey(n), n.id]))).change)).toBe(3);
  });

  it('a tagged node (a point feature) is never shared or replaced, nor is a node at a position nothing created', () => {
    const point = planFirstExport({ type: 'Point', coordinates: [12, 51] }, { historic: 'memorial', name: 'P' });
    const p: BatchPart = { key: 1, root: point.root, change: point.change };
    expect(reuseCreatedNodes(p, new Map([[positionKey({ lat: 51, lon: 12 }), 77]]))).toBe(p);
    const a = square(2, 0, 'A');
    expect(reuseCreatedNodes(a, new Map([[positionKey({ lat: 50, lon: 12 }), 77]]))).toBe(a);
  });
});
