import type { OsmExportPart } from './exporter.js';
import { changeCount, elementKey, type DiffResultEntry, type OsmChange, type OsmElement, type OsmNode, type OsmType } from './model.js';

/**
 * Several prepared exports in ONE osmChange upload (one changeset per batch of nearby approvals), and
 * finding each export's elements again in the changeset's download after a crash.
 *
 * Each part is planned on its own with placeholders -1, -2, …; `combineParts` shifts them so they are
 * unique across the batch. An upload is atomic on OSM, so a part's elements are either all in the
 * changeset or none are. After a crash between the upload and recording its answer, the diffResult
 * (placeholder → id) is lost: `findPartInDownload` finds a part's root again by content instead —
 * created elements by a signature of their tags and geometry (nodes by position, ways and relations
 * by the signatures of what they reference), existing ones by id. Two parts of a batch never touch
 * the same existing element (`touchedExisting`), so an id belongs to one part.
 */

export interface BatchPart extends OsmExportPart {
  /** Whose part it is (the QC job id). */
  key: number;
}

/** The parts with placeholders made unique (part i keeps its own order) and the one combined change. */
export function combineParts(parts: readonly BatchPart[]): { parts: BatchPart[]; change: OsmChange } {
  let offset = 0;
  const shifted = parts.map((part) => {
    const lowest = Math.min(0, ...allElements(part.change).map((e) => e.id));
    const shift = (id: number) => (id < 0 ? id - offset : id);
    const move = (e: OsmElement): OsmElement => {
      if (e.type === 'node') return { ...e, id: shift(e.id) };
      if (e.type === 'way') return { ...e, id: shift(e.id), nodeRefs: e.nodeRefs.map(shift) };
      return { ...e, id: shift(e.id), members: e.members.map((m) => ({ ...m, ref: shift(m.ref) })) };
    };
    const change: OsmChange = { create: part.change.create.map(move), modify: part.change.modify.map(move), delete: part.change.delete.map(move), deleteIfUnused: part.change.deleteIfUnused.map(move) };
    const result: BatchPart = { ...part, change, root: { type: part.root.type, id: shift(part.root.id) } };
    offset += -lowest;
    return result;
  });
  // One node per position across the batch: a created untagged node at the position of one created
  // by an earlier part becomes that node (each part keeps it in its own change, so its signature
  // for crash recovery is unchanged; the combined upload creates it once).
  const canonical = new Map<string, number>();
  const shared = shifted.map((part) => {
    const rename = new Map<number, number>();
    for (const e of shareableNodes(part)) {
      const k = positionKey(e);
      const first = canonical.get(k);
      if (first === undefined) canonical.set(k, e.id);
      else rename.set(e.id, first);
    }
    if (rename.size === 0) return part;
    const r = (id: number) => rename.get(id) ?? id;
    const move = (e: OsmElement): OsmElement => (e.type === 'node' ? { ...e, id: r(e.id) } : e.type === 'way' ? { ...e, nodeRefs: e.nodeRefs.map(r) } : e);
    return { ...part, change: { ...part.change, create: part.change.create.map(move), modify: part.change.modify.map(move) } };
  });
  const seen = new Set<string>();
  const once = (e: OsmElement) => {
    const k = elementKey(e.type, e.id);
    if (e.id > 0 || !seen.has(k)) {
      seen.add(k);
      return true;
    }
    return false;
  };
  return {
    parts: shared,
    change: {
      create: shared.flatMap((p) => p.change.create).filter(once),
      modify: shared.flatMap((p) => p.change.modify),
      delete: shared.flatMap((p) => p.change.delete),
      deleteIfUnused: shared.flatMap((p) => p.change.deleteIfUnused),
    },
  };
}

/** Where a node is, to seven decimals (OSM's precision): two created nodes there are one. */
export const positionKey = (n: Pick<OsmNode, 'lat' | 'lon'>) => `${n.lat.toFixed(7)},${n.lon.toFixed(7)}`;

/** The nodes a part creates that another part may share: untagged, and not the part's root (a tagged point). */
function shareableNodes(part: Pick<OsmExportPart, 'root' | 'change'>): OsmNode[] {
  return part.change.create.filter((e): e is OsmNode => e.type === 'node' && Object.keys(e.tags).length === 0 && !(part.root.type === 'node' && part.root.id === e.id));
}

/**
 * A part whose shareable nodes at positions where the batch already created a node (`created`:
 * position → real id, from earlier uploads' diffResults) use that node instead of creating another:
 * ways that share a vertex stay connected when they go up in different changesets, or one by one.
 */
export function reuseCreatedNodes<P extends OsmExportPart>(part: P, created: ReadonlyMap<string, number>): P {
  const rename = new Map<number, number>();
  for (const n of shareableNodes(part)) {
    const id = created.get(positionKey(n));
    if (id !== undefined) rename.set(n.id, id);
  }
  if (rename.size === 0) return part;
  const r = (id: number) => rename.get(id) ?? id;
  const move = (e: OsmElement): OsmElement =>
    e.type === 'way' ? { ...e, nodeRefs: e.nodeRefs.map(r) } : e.type === 'relation' ? { ...e, members: e.members.map((m) => (m.type === 'node' ? { ...m, ref: r(m.ref) } : m)) } : e;
  const create = part.change.create.filter((e) => !(e.type === 'node' && rename.has(e.id))).map(move);
  return { ...part, change: { ...part.change, create, modify: part.change.modify.map(move) } };
}

/** The shareable nodes `parts` created in an upload, by position, with their real ids from its diffResult. */
export function createdNodesOf(parts: readonly Pick<OsmExportPart, 'root' | 'change'>[], diff: readonly DiffResultEntry[]): Map<string, number> {
  const ids = new Map(diff.filter((d) => d.type === 'node' && d.newId !== undefined).map((d) => [d.oldId, d.newId!] as const));
  const created = new Map<string, number>();
  for (const part of parts) {
    for (const n of shareableNodes(part)) {
      const id = ids.get(n.id);
      if (id !== undefined && id > 0) created.set(positionKey(n), id);
    }
  }
  return created;
}

/**
 * The parts in groups of at most `maxChanges` changes, as counted by their combined upload (a
 * shared node once), for one changeset each. Parts that share created nodes (adjacent areas, lines
 * meeting) stay in one group when the group fits, so their common nodes are created once in one
 * upload; a set of them too large for one changeset is cut in order, and the later groups use the
 * nodes the earlier ones created (reuseCreatedNodes), never creating a second node at a position.
 * Groups keep the parts' order as far as the sharing allows.
 */
export function groupParts<T extends { part: BatchPart }>(items: readonly T[], maxChanges: number): T[][] {
  const parent = items.map((_, i) => i);
  const find = (i: number): number => (parent[i] === i ? i : (parent[i] = find(parent[i]!)));
  const firstAt = new Map<string, number>();
  items.forEach(({ part }, i) => {
    for (const n of shareableNodes(part)) {
      const k = positionKey(n);
      const j = firstAt.get(k);
      if (j === undefined) firstAt.set(k, i);
      else parent[find(i)] = find(j);
    }
  });
  const components = new Map<number, T[]>();
  items.forEach((item, i) => {
    const root = find(i);
    components.set(root, [...(components.get(root) ?? []), item]);
  });
  const size = (xs: readonly T[]) => changeCount(combineParts(xs.map((x) => x.part)).change);
  const groups: T[][] = [];
  let current: T[] = [];
  const flush = () => {
    if (current.length > 0) groups.push(current);
    current = [];
  };
  // A Map keeps insertion order: each component comes at its first part's place.
  for (const component of components.values()) {
    if (size([...current, ...component]) <= maxChanges) {
      current.push(...component);
      continue;
    }
    flush();
    for (const item of component) {
      if (current.length > 0 && size([...current, item]) > maxChanges) flush();
      current.push(item);
    }
  }
  flush();
  return groups;
}

/** The existing elements (positive ids) a change modifies or deletes. */
export function touchedExisting(change: OsmChange): Set<string> {
  return new Set([...change.modify, ...change.delete, ...change.deleteIfUnused].filter((e) => e.id > 0).map((e) => elementKey(e.type, e.id)));
}

function allElements(change: OsmChange): OsmElement[] {
  return [...change.create, ...change.modify, ...change.delete, ...change.deleteIfUnused];
}

export interface Download {
  create: OsmElement[];
  modify: OsmElement[];
  delete: OsmElement[];
}

const tagSignature = (tags: Record<string, string>) => JSON.stringify(Object.entries(tags).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));

/** Signatures of content: a created element by what it is, anything else by its id. */
function signer(created: ReadonlyMap<string, OsmElement>): (type: OsmType, id: number) => string {
  const memo = new Map<string, string>();
  const sign = (type: OsmType, id: number, depth = 0): string => {
    const k = elementKey(type, id);
    const e = created.get(k);
    if (!e || depth > 8) return k;
    const known = memo.get(k);
    if (known) return known;
    let body: string;
    if (e.type === 'node') body = `n(${e.lat.toFixed(7)},${e.lon.toFixed(7)})`;
    else if (e.type === 'way') body = `w[${e.nodeRefs.map((r) => sign('node', r, depth + 1)).join(';')}]`;
    else body = `r[${e.members.map((m) => `${m.role}:${sign(m.type, m.ref, depth + 1)}`).join(';')}]`;
    const signature = `${body}${tagSignature(e.tags)}`;
    memo.set(k, signature);
    return signature;
  };
  return sign;
}

/**
 * Where a part's root is in a changeset's download: its id and version, or null when the part is not
 * in it (its upload never happened). `taken` holds created roots already given to other parts, so two
 * parts with identical content get one element each.
 */
export function findPartInDownload(part: BatchPart, download: Download, taken: Set<string>): { id: number; version: number } | null {
  if (part.root.id < 0) {
    const planned = new Map(part.change.create.map((e) => [elementKey(e.type, e.id), e] as const));
    const wanted = signer(planned)(part.root.type, part.root.id);
    const downloaded = new Map(download.create.map((e) => [elementKey(e.type, e.id), e] as const));
    const signDownloaded = signer(downloaded);
    const root = download.create.find((e) => e.type === part.root.type && !taken.has(elementKey(e.type, e.id)) && signDownloaded(e.type, e.id) === wanted);
    if (!root || root.version === undefined) return null;
    taken.add(elementKey(root.type, root.id));
    return { id: root.id, version: root.version };
  }
  // An existing root: the part is in the changeset when an element it modifies or deletes is.
  const touched = [...download.modify, ...download.delete];
  const mine = touchedExisting(part.change);
  if (!touched.some((e) => mine.has(elementKey(e.type, e.id)))) return null;
  const root = download.modify.find((e) => e.type === part.root.type && e.id === part.root.id);
  const version = root?.version ?? part.unchangedRootVersion;
  if (version === undefined) return null;
  return { id: part.root.id, version };
}
