import { describe, expect, it } from 'vitest';
import { combineParts, findPartInDownload, touchedExisting, type BatchPart } from './batch.js';
import { planFirstExport } from './plan.js';
import type { OsmElement } from './model.js';

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
