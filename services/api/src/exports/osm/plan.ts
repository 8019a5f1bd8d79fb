import { roundCoordinate, samePosition } from '../geometry.js';
import type { FeatureGeometry, Position } from '../types.js';
import { elementKey, type OsmChange, type OsmElement, type OsmMember, type OsmNode, type OsmRelation, type OsmTags, type OsmType, type OsmWay } from './model.js';
import { mergeTags, sameTags } from './tags.js';

/**
 * Turning a geometry into an osmChange, for a first export (everything created) and for a re-export
 * (the same elements modified with their current versions).
 *
 * Point → node. LineString → open way. Polygon without holes → closed way (the closing node is the
 * first node again). Polygon with holes and MultiPolygon → type=multipolygon relation whose member
 * ways are the rings (role outer / inner). The tags sit on the root element only.
 *
 * Re-export reuses existing nodes and ways by position (the i-th vertex moves the i-th node), creates
 * what is additionally needed and deletes what is left over with `if-unused`, so a node someone else
 * connected to survives. If the kind of root changes (e.g. Point → Polygon) the old root is deleted
 * and a new one created.
 */

export type RootKind = OsmType;

export function rootKindOf(geometry: FeatureGeometry): RootKind {
  switch (geometry.type) {
    case 'Point':
      return 'node';
    case 'LineString':
      return 'way';
    case 'Polygon':
      return geometry.coordinates.length === 1 ? 'way' : 'relation';
    case 'MultiPolygon':
      return 'relation';
  }
}

/** A way to be: its vertices (a closed ring without its repeated last position) and whether it closes. */
interface WayShape {
  positions: Position[];
  closed: boolean;
}

const ringShape = (ring: Position[]): WayShape => ({ positions: ring.slice(0, -1), closed: true });

interface MemberShape {
  role: 'outer' | 'inner';
  shape: WayShape;
}

function memberShapes(geometry: FeatureGeometry): MemberShape[] {
  const polygons = geometry.type === 'MultiPolygon' ? geometry.coordinates : geometry.type === 'Polygon' ? [geometry.coordinates] : [];
  return polygons.flatMap((rings) => rings.map((ring, i): MemberShape => ({ role: i === 0 ? 'outer' : 'inner', shape: ringShape(ring) })));
}

/** The plan is missing something it needs from OSM (an element deleted meanwhile): an admin must look. */
export class PlanConflictError extends Error {
  override readonly name = 'PlanConflictError';
}

export interface OsmPlan {
  change: OsmChange;
  /** The root element: a placeholder (negative id) when it is created. */
  root: { type: RootKind; id: number };
  /** The root's current version when the plan does not touch the root itself. */
  unchangedRootVersion?: number;
}

export const MAX_WAY_NODES = 2000;

class ChangeBuilder {
  private nextPlaceholder = -1;
  readonly create: OsmElement[] = [];
  readonly modify: OsmElement[] = [];
  readonly deleteStrict: OsmElement[] = [];
  private readonly deleteCandidates = new Map<string, OsmElement>();
  /** Elements kept or created in the result; a delete candidate among them is not deleted. */
  private readonly kept = new Set<string>();

  constructor(private readonly current: ReadonlyMap<string, OsmElement> = new Map()) {}

  private placeholder(): number {
    return this.nextPlaceholder--;
  }

  private lookup<T extends OsmElement>(type: T['type'], id: number): T {
    const element = this.current.get(elementKey(type, id));
    if (!element) throw new PlanConflictError(`${type} ${id} is no longer on OSM`);
    return element as T;
  }

  newNode(p: Position): number {
    const id = this.placeholder();
    this.create.push({ type: 'node', id, lat: roundCoordinate(p[1]), lon: roundCoordinate(p[0]), tags: {} });
    this.kept.add(elementKey('node', id));
    return id;
  }

  newWay(shape: WayShape, tags: OsmTags): number {
    checkWaySize(shape);
    const refs = shape.positions.map((p) => this.newNode(p));
    if (shape.closed) refs.push(refs[0]!);
    const id = this.placeholder();
    this.create.push({ type: 'way', id, nodeRefs: refs, tags });
    this.kept.add(elementKey('way', id));
    return id;
  }

  newRelation(members: MemberShape[], tags: OsmTags): number {
    const refs = members.map((m): OsmMember => ({ type: 'way', ref: this.newWay(m.shape, {}), role: m.role }));
    const id = this.placeholder();
    this.create.push({ type: 'relation', id, members: refs, tags });
    return id;
  }

  /** Move the existing way's nodes to the new vertices, adding or dropping nodes at the end. */
  reuseWay(wayId: number, shape: WayShape, tags: OsmTags | null): void {
    checkWaySize(shape);
    const way = this.lookup<OsmWay>('way', wayId);
    this.kept.add(elementKey('way', wayId));
    const oldRefs = way.nodeRefs;
    const oldClosed = oldRefs.length > 2 && oldRefs[0] === oldRefs[oldRefs.length - 1];
    const oldVertices = oldClosed ? oldRefs.slice(0, -1) : oldRefs;
    const refs: number[] = [];
    const used = new Set<number>();
    shape.positions.forEach((p, i) => {
      const candidate = oldVertices[i];
      // A node appearing twice in the old way is reused once; moving it twice would conflict.
      if (candidate === undefined || used.has(candidate)) {
        refs.push(this.newNode(p));
        return;
      }
      used.add(candidate);
      const node = this.lookup<OsmNode>('node', candidate);
      this.kept.add(elementKey('node', candidate));
      if (!samePosition([node.lon, node.lat], p)) this.modify.push({ ...node, lat: roundCoordinate(p[1]), lon: roundCoordinate(p[0]) });
      refs.push(candidate);
    });
    for (const leftover of oldVertices) if (!used.has(leftover)) this.candidateDelete('node', leftover);
    if (shape.closed) refs.push(refs[0]!);
    const finalTags = tags ?? way.tags;
    if (!sameRefs(refs, oldRefs) || !sameTags(finalTags, way.tags)) this.modify.push({ ...way, nodeRefs: refs, tags: finalTags });
  }

  /** `tags` are the final (already merged) tags of the relation. */
  reuseRelation(relationId: number, members: MemberShape[], tags: OsmTags): void {
    const relation = this.lookup<OsmRelation>('relation', relationId);
    const existing = { outer: [] as number[], inner: [] as number[] };
    const others: OsmMember[] = [];
    for (const m of relation.members) {
      if (m.type === 'way' && (m.role === 'outer' || m.role === 'inner')) existing[m.role].push(m.ref);
      else others.push(m); // label nodes and the like, added by others: kept as they are
    }
    const taken = { outer: 0, inner: 0 };
    const newMembers = members.map((m): OsmMember => {
      const reuse = existing[m.role][taken[m.role]++];
      if (reuse === undefined) return { type: 'way', ref: this.newWay(m.shape, {}), role: m.role };
      this.reuseWay(reuse, m.shape, null);
      return { type: 'way', ref: reuse, role: m.role };
    });
    for (const role of ['outer', 'inner'] as const) for (const leftover of existing[role].slice(taken[role])) this.candidateDeleteWay(leftover);
    const finalMembers = [...newMembers, ...others];
    if (!sameMembers(finalMembers, relation.members) || !sameTags(tags, relation.tags)) {
      this.modify.push({ ...relation, members: finalMembers, tags });
    }
  }

  /** Delete the old root unconditionally and its parts if nothing else uses them. */
  deleteRoot(type: RootKind, id: number): void {
    const root = this.lookup(type, id);
    this.deleteStrict.push(root);
    if (root.type === 'way') for (const ref of root.nodeRefs) this.candidateDelete('node', ref);
    if (root.type === 'relation') for (const m of root.members) if (m.type === 'way' && (m.role === 'outer' || m.role === 'inner')) this.candidateDeleteWay(m.ref);
  }

  private candidateDeleteWay(wayId: number): void {
    const way = this.current.get(elementKey('way', wayId)) as OsmWay | undefined;
    if (!way) return; // already gone: nothing to clean up
    this.candidateDelete('way', wayId);
    for (const ref of way.nodeRefs) this.candidateDelete('node', ref);
  }

  private candidateDelete(type: OsmType, id: number): void {
    const element = this.current.get(elementKey(type, id));
    if (element) this.deleteCandidates.set(elementKey(type, id), element);
  }

  build(): OsmChange {
    const deleteIfUnused = [...this.deleteCandidates.entries()].filter(([key]) => !this.kept.has(key)).map(([, e]) => e);
    return { create: this.create, modify: this.modify, delete: this.deleteStrict, deleteIfUnused };
  }
}

function checkWaySize(shape: WayShape): void {
  const count = shape.positions.length + (shape.closed ? 1 : 0);
  if (count > MAX_WAY_NODES) throw new RangeError(`a way of ${count} nodes exceeds the OSM limit of ${MAX_WAY_NODES}`);
}

const sameRefs = (a: number[], b: number[]) => a.length === b.length && a.every((v, i) => v === b[i]);
const sameMembers = (a: OsmMember[], b: OsmMember[]) =>
  a.length === b.length && a.every((m, i) => m.type === b[i]!.type && m.ref === b[i]!.ref && m.role === b[i]!.role);

function createRoot(builder: ChangeBuilder, geometry: FeatureGeometry, tags: OsmTags): { type: RootKind; id: number } {
  switch (geometry.type) {
    case 'Point': {
      const id = builder.newNode(geometry.coordinates);
      const node = builder.create[builder.create.length - 1]!;
      node.tags = tags;
      return { type: 'node', id };
    }
    case 'LineString':
      return { type: 'way', id: builder.newWay({ positions: geometry.coordinates, closed: false }, tags) };
    case 'Polygon':
    case 'MultiPolygon':
      if (rootKindOf(geometry) === 'way') return { type: 'way', id: builder.newWay(ringShape(geometry.coordinates[0] as Position[]), tags) };
      return { type: 'relation', id: builder.newRelation(memberShapes(geometry), tags) };
  }
}

/** First export: create every element. `tags` are the feature tags (see tags.ts). */
export function planFirstExport(geometry: FeatureGeometry, tags: OsmTags): OsmPlan {
  const builder = new ChangeBuilder();
  const root = createRoot(builder, geometry, tags);
  return { change: builder.build(), root };
}

/**
 * Re-export onto the elements created before. `current` holds the root and its parts as OSM has them
 * now (GET …/full), with their current versions; `ourTags` are merged over the root's existing tags.
 */
export function planReExport(
  geometry: FeatureGeometry,
  ourTags: OsmTags,
  managedKeys: ReadonlySet<string>,
  previousRoot: { type: RootKind; id: number },
  current: ReadonlyMap<string, OsmElement>,
): OsmPlan {
  const builder = new ChangeBuilder(current);
  const kind = rootKindOf(geometry);
  const existingRoot = current.get(elementKey(previousRoot.type, previousRoot.id));
  if (!existingRoot) throw new PlanConflictError(`${previousRoot.type} ${previousRoot.id} is no longer on OSM`);
  if (kind !== previousRoot.type) {
    builder.deleteRoot(previousRoot.type, previousRoot.id);
    const root = createRoot(builder, geometry, ourTags);
    return { change: builder.build(), root };
  }
  const tags = mergeTags(existingRoot.tags, ourTags, managedKeys);
  switch (geometry.type) {
    case 'Point': {
      const node = existingRoot as OsmNode;
      const [lon, lat] = geometry.coordinates;
      if (!samePosition([node.lon, node.lat], geometry.coordinates) || !sameTags(tags, node.tags)) {
        builder.modify.push({ ...node, lat: roundCoordinate(lat), lon: roundCoordinate(lon), tags });
      }
      break;
    }
    case 'LineString':
      builder.reuseWay(previousRoot.id, { positions: geometry.coordinates, closed: false }, tags);
      break;
    case 'Polygon':
    case 'MultiPolygon':
      if (kind === 'way') builder.reuseWay(previousRoot.id, ringShape(geometry.coordinates[0] as Position[]), tags);
      else builder.reuseRelation(previousRoot.id, memberShapes(geometry), tags);
      break;
  }
  const change = builder.build();
  const rootTouched = change.modify.some((e) => e.type === previousRoot.type && e.id === previousRoot.id);
  return rootTouched ? { change, root: previousRoot } : { change, root: previousRoot, unchangedRootVersion: existingRoot.version! };
}
