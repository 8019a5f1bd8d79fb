import { roundCoordinate, samePosition } from '../geometry.js';
import type { FeatureGeometry, Position } from '../types.js';
import { elementKey, type OsmChange, type OsmElement, type OsmMember, type OsmNode, type OsmRelation, type OsmTags, type OsmType, type OsmWay } from './model.js';
import { sameTags } from './tags.js';

/**
 * Turning a geometry into an osmChange, for a first export (everything created) and for a re-export
 * (the same elements modified with their current versions).
 *
 * Point → node. LineString → open way. Polygon without holes → closed way (the closing node is the
 * first node again). Polygon with holes and MultiPolygon → type=multipolygon relation whose member
 * ways are the rings (role outer / inner). The tags sit on the root element only.
 *
 * What a re-export keeps (docs/qc.md, "Edits that keep others' work"):
 * - Node identity: a vertex at the position of one of the way's nodes keeps that node; only nodes
 *   that are the platform's own and untouched (last edited in one of its changesets, untagged, used by
 *   no other way or relation) are moved to new vertices, nearest first. A node someone else connected
 *   to, tagged or edited stays where it is; the way gets a new node instead.
 * - Shared positions: a vertex at the exact position of an existing way node joins that node; within
 *   one plan a position gets one node, however many rings use it.
 * - The element: a re-export never deletes its root to create one of another kind. A closed way that
 *   gains a hole becomes the outer member of a new multipolygon relation, which takes its tags; a
 *   relation that loses its holes stays a relation. A node cannot become a way (and back): that is a
 *   conflict an admin resolves on OSM.
 * - Leftovers: only the platform's own untagged nodes and member ways are deleted, and only if unused.
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
      return geometry.coordinates.length === 1 && geometry.coordinates[0]!.length === 1 ? 'way' : 'relation';
  }
}

/** The root's kind after a re-export onto `previous` (see the rules above); throws for node ↔ way. */
export function reExportRootKind(geometry: FeatureGeometry, previous: RootKind): RootKind {
  const wanted = rootKindOf(geometry);
  if ((wanted === 'node') !== (previous === 'node')) {
    throw new PlanConflictError(`the feature changed from ${previous === 'node' ? 'a point' : 'a line or area'} to ${wanted === 'node' ? 'a point' : 'a line or area'}; OSM has no way to turn a ${previous} into a ${wanted} without deleting it, so an admin must do it on OSM`);
  }
  if (previous === 'relation') {
    if (geometry.type === 'LineString') throw new PlanConflictError('a multipolygon relation cannot become an open way; an admin must do it on OSM');
    return 'relation';
  }
  return wanted;
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

/**
 * What OSM has around the feature: the root with its parts (GET …/full) and, when `parentsKnown`,
 * every way and relation using a node in the area (the map call), which is what tells the platform's
 * own nodes from nodes someone else connected to.
 */
export interface PlanContext {
  current: ReadonlyMap<string, OsmElement>;
  parentsKnown: boolean;
  /** The changesets the platform uploaded for this feature: an element last edited in one is its own. */
  ownChangesets: ReadonlySet<number>;
  /**
   * A reviewer chose to move this (linked) element onto the feature: its nodes count as the
   * platform's own whoever edited them last. Nodes of other ways and tagged nodes still never move.
   */
  reviewerMoves?: boolean;
}

export const emptyContext = (): PlanContext => ({ current: new Map(), parentsKnown: false, ownChangesets: new Set() });

export const MAX_WAY_NODES = 2000;

const positionKey = (p: Position) => `${roundCoordinate(p[0])},${roundCoordinate(p[1])}`;

class ChangeBuilder {
  private nextPlaceholder = -1;
  readonly create: OsmElement[] = [];
  readonly modify: OsmElement[] = [];
  private readonly deleteCandidates = new Map<string, OsmElement>();
  /** Elements kept or created in the result; a delete candidate among them is not deleted. */
  private readonly kept = new Set<string>();
  /** Nodes created in this plan by position: one node per position. */
  private readonly createdAt = new Map<string, number>();
  /** Existing way nodes by position (joinable), and who uses each node. */
  private readonly existingAt = new Map<string, number>();
  private readonly wayParents = new Map<number, Set<number>>();
  private readonly relationParents = new Set<number>();
  /** Nodes this plan moved or matched already: never moved twice. */
  private readonly claimed = new Set<number>();

  constructor(private readonly ctx: PlanContext = emptyContext()) {
    for (const e of ctx.current.values()) {
      if (e.type === 'way') for (const ref of e.nodeRefs) {
        if (!this.wayParents.has(ref)) this.wayParents.set(ref, new Set());
        this.wayParents.get(ref)!.add(e.id);
      }
      if (e.type === 'relation') for (const m of e.members) if (m.type === 'node') this.relationParents.add(m.ref);
    }
    for (const e of ctx.current.values()) {
      if (e.type === 'node' && this.wayParents.has(e.id)) this.existingAt.set(positionKey([e.lon, e.lat]), e.id);
    }
  }

  private placeholder(): number {
    return this.nextPlaceholder--;
  }

  private lookup<T extends OsmElement>(type: T['type'], id: number): T {
    const element = this.ctx.current.get(elementKey(type, id));
    if (!element) throw new PlanConflictError(`${type} ${id} is no longer on OSM`);
    return element as T;
  }

  private isOwn(e: OsmElement): boolean {
    if (this.ctx.reviewerMoves) return true;
    return e.changeset !== undefined && this.ctx.ownChangesets.has(e.changeset);
  }

  /** A node the platform may move or delete: its own, untouched, untagged, used only by `ownWays`. */
  private movable(nodeId: number, ownWays: ReadonlySet<number>): boolean {
    if (!this.ctx.parentsKnown || this.claimed.has(nodeId) || this.relationParents.has(nodeId)) return false;
    const node = this.ctx.current.get(elementKey('node', nodeId));
    if (!node || node.type !== 'node' || Object.keys(node.tags).length > 0 || !this.isOwn(node)) return false;
    return [...(this.wayParents.get(nodeId) ?? [])].every((w) => ownWays.has(w));
  }

  newNode(p: Position, tags: OsmTags = {}): number {
    const id = this.placeholder();
    this.create.push({ type: 'node', id, lat: roundCoordinate(p[1]), lon: roundCoordinate(p[0]), tags });
    this.kept.add(elementKey('node', id));
    return id;
  }

  /** The node for a vertex: one created at this position already, an existing way node there, or a new one. */
  private vertexNode(p: Position): number {
    const k = positionKey(p);
    const created = this.createdAt.get(k);
    if (created !== undefined) return created;
    const existing = this.existingAt.get(k);
    if (existing !== undefined) {
      this.kept.add(elementKey('node', existing));
      this.claimed.add(existing);
      return existing;
    }
    const id = this.newNode(p);
    this.createdAt.set(k, id);
    return id;
  }

  newWay(shape: WayShape, tags: OsmTags): number {
    checkWaySize(shape);
    const refs = shape.positions.map((p) => this.vertexNode(p));
    if (shape.closed) refs.push(refs[0]!);
    const id = this.placeholder();
    this.create.push({ type: 'way', id, nodeRefs: refs, tags });
    this.kept.add(elementKey('way', id));
    return id;
  }

  newRelation(members: OsmMember[], tags: OsmTags): number {
    const id = this.placeholder();
    this.create.push({ type: 'relation', id, members, tags });
    return id;
  }

  newMembers(members: MemberShape[]): OsmMember[] {
    return members.map((m): OsmMember => ({ type: 'way', ref: this.newWay(m.shape, {}), role: m.role }));
  }

  /**
   * The existing way with new vertices: its nodes at unchanged positions stay, a vertex at an existing
   * way node joins it, the platform's own movable nodes move to the remaining vertices (nearest
   * first), and what is still missing is created. `ownWays`: the feature's ways (the root, or the
   * relation's members), whose nodes count as the feature's own.
   */
  reuseWay(wayId: number, shape: WayShape, tags: OsmTags | null, ownWays: ReadonlySet<number>): void {
    checkWaySize(shape);
    const way = this.lookup<OsmWay>('way', wayId);
    this.kept.add(elementKey('way', wayId));
    const oldRefs = way.nodeRefs;
    const oldClosed = oldRefs.length > 2 && oldRefs[0] === oldRefs[oldRefs.length - 1];
    const oldVertices = [...new Set(oldClosed ? oldRefs.slice(0, -1) : oldRefs)];
    const refs: (number | undefined)[] = shape.positions.map(() => undefined);
    const used = new Set<number>();
    const nodeOf = (id: number) => this.lookup<OsmNode>('node', id);

    // 1. Unchanged vertices keep their nodes.
    shape.positions.forEach((p, i) => {
      const same = oldVertices.find((id) => !used.has(id) && samePosition([nodeOf(id).lon, nodeOf(id).lat], p));
      if (same !== undefined) {
        refs[i] = same;
        used.add(same);
        this.kept.add(elementKey('node', same));
      }
    });
    // 2. A vertex on an existing way node (another way's, or one created in this plan) joins it.
    shape.positions.forEach((p, i) => {
      if (refs[i] !== undefined) return;
      const k = positionKey(p);
      const joined = this.createdAt.get(k) ?? this.existingAt.get(k);
      if (joined !== undefined && !used.has(joined)) {
        refs[i] = joined;
        used.add(joined);
        this.kept.add(elementKey('node', joined));
      }
    });
    // 3. The platform's own untouched nodes move to the remaining vertices, nearest pairs first.
    const movable = oldVertices.filter((id) => !used.has(id) && this.movable(id, ownWays));
    const pairs: { i: number; id: number; d: number }[] = [];
    shape.positions.forEach((p, i) => {
      if (refs[i] !== undefined) return;
      for (const id of movable) pairs.push({ i, id, d: Math.hypot(nodeOf(id).lon - p[0], nodeOf(id).lat - p[1]) });
    });
    pairs.sort((a, b) => a.d - b.d || a.i - b.i);
    for (const { i, id } of pairs) {
      if (refs[i] !== undefined || used.has(id)) continue;
      const p = shape.positions[i]!;
      refs[i] = id;
      used.add(id);
      this.claimed.add(id);
      this.kept.add(elementKey('node', id));
      this.modify.push({ ...nodeOf(id), lat: roundCoordinate(p[1]), lon: roundCoordinate(p[0]) });
    }
    // 4. New nodes for the rest.
    const final = shape.positions.map((p, i) => refs[i] ?? this.vertexNode(p));
    for (const id of final) this.claimed.add(id);
    // Left-over nodes: the platform's own are deleted if unused; anyone else's stay where they are.
    for (const leftover of oldVertices) if (!used.has(leftover) && this.movable(leftover, ownWays)) this.candidateDelete('node', leftover);
    if (shape.closed) final.push(final[0]!);
    const finalTags = tags ?? way.tags;
    if (!sameRefs(final, oldRefs) || !sameTags(finalTags, way.tags)) this.modify.push({ ...way, nodeRefs: final, tags: finalTags });
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
    const ownWays = new Set([...existing.outer, ...existing.inner]);
    const taken = { outer: 0, inner: 0 };
    const newMembers = members.map((m): OsmMember => {
      const reuse = existing[m.role][taken[m.role]++];
      if (reuse === undefined || !this.ctx.current.has(elementKey('way', reuse))) return { type: 'way', ref: this.newWay(m.shape, {}), role: m.role };
      this.reuseWay(reuse, m.shape, null, ownWays);
      return { type: 'way', ref: reuse, role: m.role };
    });
    for (const role of ['outer', 'inner'] as const) for (const leftover of existing[role].slice(taken[role])) this.candidateDeleteWay(leftover, ownWays);
    const finalMembers = [...newMembers, ...others];
    if (!sameMembers(finalMembers, relation.members) || !sameTags(tags, relation.tags)) {
      this.modify.push({ ...relation, members: finalMembers, tags });
    }
  }

  /** A member way no longer needed: deleted (if unused) only when it is the platform's own and untagged. */
  private candidateDeleteWay(wayId: number, ownWays: ReadonlySet<number>): void {
    const way = this.ctx.current.get(elementKey('way', wayId)) as OsmWay | undefined;
    if (!way || Object.keys(way.tags).length > 0 || !this.isOwn(way) || !this.ctx.parentsKnown) return;
    this.candidateDelete('way', wayId);
    for (const ref of way.nodeRefs) if (this.movable(ref, ownWays)) this.candidateDelete('node', ref);
  }

  private candidateDelete(type: OsmType, id: number): void {
    const element = this.ctx.current.get(elementKey(type, id));
    if (element) this.deleteCandidates.set(elementKey(type, id), element);
  }

  build(): OsmChange {
    const deleteIfUnused = [...this.deleteCandidates.entries()].filter(([key]) => !this.kept.has(key)).map(([, e]) => e);
    return { create: this.create, modify: this.modify, delete: [], deleteIfUnused };
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
  switch (rootKindOf(geometry)) {
    case 'node':
      return { type: 'node', id: builder.newNode((geometry as { coordinates: Position }).coordinates, tags) };
    case 'way':
      if (geometry.type === 'LineString') return { type: 'way', id: builder.newWay({ positions: geometry.coordinates, closed: false }, tags) };
      return { type: 'way', id: builder.newWay(memberShapes(geometry)[0]!.shape, tags) };
    case 'relation':
      return { type: 'relation', id: builder.newRelation(builder.newMembers(memberShapes(geometry)), tags) };
  }
}

/**
 * First export: create every element; a vertex at the position of an existing way node in `ctx`
 * (another way's) joins that node. `tags` are the feature tags (see tags.ts).
 */
export function planFirstExport(geometry: FeatureGeometry, tags: OsmTags, ctx: PlanContext = emptyContext()): OsmPlan {
  const builder = new ChangeBuilder(ctx);
  const root = createRoot(builder, geometry, tags);
  return { change: builder.build(), root };
}

/**
 * Re-export onto the elements created (or linked) before. `ctx.current` holds the root and its parts
 * as OSM has them now, with their current versions; `tags` are the root's final tags, already merged
 * (tags.ts threeWayTags) for the kind `reExportRootKind` answers.
 */
export function planReExport(geometry: FeatureGeometry, tags: OsmTags, previousRoot: { type: RootKind; id: number }, ctx: PlanContext): OsmPlan {
  const builder = new ChangeBuilder(ctx);
  const existingRoot = ctx.current.get(elementKey(previousRoot.type, previousRoot.id));
  if (!existingRoot) throw new PlanConflictError(`${previousRoot.type} ${previousRoot.id} is no longer on OSM`);
  const kind = reExportRootKind(geometry, previousRoot.type);
  let root: { type: RootKind; id: number } = previousRoot;
  if (geometry.type === 'Point') {
    const node = existingRoot as OsmNode;
    const [lon, lat] = geometry.coordinates;
    if (!samePosition([node.lon, node.lat], geometry.coordinates) || !sameTags(tags, node.tags)) {
      builder.modify.push({ ...node, lat: roundCoordinate(lat), lon: roundCoordinate(lon), tags });
    }
  } else if (geometry.type === 'LineString') {
    builder.reuseWay(previousRoot.id, { positions: geometry.coordinates, closed: false }, tags, new Set([previousRoot.id]));
  } else if (kind === 'way') {
    builder.reuseWay(previousRoot.id, memberShapes(geometry)[0]!.shape, tags, new Set([previousRoot.id]));
  } else if (previousRoot.type === 'relation') {
    builder.reuseRelation(previousRoot.id, memberShapes(geometry), tags);
  } else {
    // A closed way that gains a hole or a second part: it becomes the first outer member of a new
    // multipolygon relation, which takes its tags; the way keeps its id, nodes and history.
    const [first, ...rest] = memberShapes(geometry);
    builder.reuseWay(previousRoot.id, first!.shape, {}, new Set([previousRoot.id]));
    const members: OsmMember[] = [{ type: 'way', ref: previousRoot.id, role: 'outer' }, ...builder.newMembers(rest)];
    root = { type: 'relation', id: builder.newRelation(members, tags) };
  }
  const change = builder.build();
  if (root.id < 0) return { change, root };
  const rootTouched = change.modify.some((e) => e.type === previousRoot.type && e.id === previousRoot.id);
  return rootTouched ? { change, root } : { change, root, unchangedRootVersion: existingRoot.version! };
}
