import type { ScoredOsmCandidate } from '../../../../shared/conflation.js';
import type { ConflationSettings } from '../config.js';
import { RetryableExportError, isRetryableStatus, retryAfterMs } from '../errors.js';
import { matchesFamily } from '../osm-tag-mapping.js';
import type { OsmElement, OsmTags, OsmType } from '../osm/model.js';
import type { FeatureSnapshot, Position, TagFilter } from '../types.js';
import { bestNameSimilarity, namesOf } from './names.js';
import { positionsOf, projectionAround, searchBounds, shapeOfGeometry, spatialRelation, type Bounds, type Shape } from './spatial.js';

/**
 * Conflation for OpenStreetMap: before a feature's first export, find OSM elements that may already
 * be the same object — same tag family, near or overlapping, similar name — and decide:
 *
 *   no candidate                         → create (as without conflation)
 *   exactly one candidate and it is strong → link: merge our tags into that element
 *   several candidates, or a weak one    → needs_decision: a reviewer picks one or "create new"
 *
 * A candidate is an element of the category's tag family within `pointRadiusM` of the feature (for
 * two areas: overlapping), whose name is at least `nameWeak` similar — or that has no name at all.
 * It is strong when its name is at least `nameStrong` similar. A differently named object nearby is
 * another object (two memorials on one square), not a candidate.
 *
 * One lookup per feature: one Overpass query or one map call over the feature's bounds grown by
 * SEARCH_MARGIN_M, so an area around a point feature is found by its nearby outline too.
 */
export const SEARCH_MARGIN_M = 250;

export interface OsmCandidate {
  type: OsmType;
  id: number;
  tags: OsmTags;
  shape: Shape;
}

/** A scored candidate, as stored with a job waiting for a decision (services/shared/conflation.ts). */
export type ScoredCandidate = ScoredOsmCandidate;

export interface Decider {
  id: string;
  name: string | null;
}

export type OsmConflationDecision =
  | { outcome: 'create'; reason: string; candidates: ScoredCandidate[]; decidedBy: Decider | null }
  | { outcome: 'link'; target: { type: OsmType; id: number }; moveGeometry: boolean; reason: string; candidates: ScoredCandidate[]; decidedBy: Decider | null }
  | { outcome: 'needs_decision'; reason: string; candidates: ScoredCandidate[] };

export interface CandidateSource {
  readonly name: 'overpass' | 'map';
  /** Elements of any of the families within `bounds`: exactly one HTTP request. */
  find(bounds: Bounds, families: readonly TagFilter[]): Promise<OsmCandidate[]>;
}

const round = (v: number, digits: number) => Number(v.toFixed(digits));

function geoJsonOf(shape: Shape): ScoredCandidate['geometry'] {
  if (shape.kind === 'point') return { type: 'Point', coordinates: shape.position };
  if (shape.kind === 'line') return { type: 'LineString', coordinates: shape.positions };
  return shape.rings.length === 1 ? { type: 'Polygon', coordinates: [shape.rings[0]] } : { type: 'MultiPolygon', coordinates: shape.rings.map((r) => [r]) };
}

export function scoreCandidates(snapshot: Pick<FeatureSnapshot, 'name' | 'geometry'>, found: OsmCandidate[], settings: Pick<ConflationSettings, 'pointRadiusM' | 'nameStrong' | 'nameWeak'>): ScoredCandidate[] {
  const feature = shapeOfGeometry(snapshot.geometry);
  const projection = projectionAround(positionsOf(feature)[0]!);
  const scored: ScoredCandidate[] = [];
  for (const candidate of found) {
    const relation = spatialRelation(feature, candidate.shape, projection);
    const near = relation.overlap !== null ? relation.overlap > 0 || relation.distanceM <= settings.pointRadiusM / 3 : relation.distanceM <= settings.pointRadiusM;
    if (!near) continue;
    const similarity = bestNameSimilarity(snapshot.name, namesOf(candidate.tags));
    if (similarity !== null && similarity < settings.nameWeak) continue;
    scored.push({
      type: candidate.type,
      id: candidate.id,
      name: candidate.tags.name ?? null,
      tags: candidate.tags,
      distanceM: round(relation.distanceM, 1),
      overlap: relation.overlap === null ? null : round(relation.overlap, 2),
      nameSimilarity: similarity === null ? null : round(similarity, 2),
      strength: similarity !== null && similarity >= settings.nameStrong ? 'strong' : 'weak',
      geometry: geoJsonOf(candidate.shape),
    });
  }
  // Best first: strong before weak, then by name similarity, then by distance.
  return scored.sort((a, b) => (a.strength === b.strength ? 0 : a.strength === 'strong' ? -1 : 1) || (b.nameSimilarity ?? 0) - (a.nameSimilarity ?? 0) || a.distanceM - b.distanceM);
}

/** The automatic decision over scored candidates. */
export function decide(candidates: ScoredCandidate[]): OsmConflationDecision {
  if (candidates.length === 0) return { outcome: 'create', reason: 'no OSM element of this kind nearby', candidates, decidedBy: null };
  if (candidates.length === 1 && candidates[0]!.strength === 'strong') {
    const c = candidates[0]!;
    return {
      outcome: 'link',
      target: { type: c.type, id: c.id },
      moveGeometry: false,
      reason: `one strong candidate: ${c.type} ${c.id} "${c.name ?? ''}" (name similarity ${c.nameSimilarity}, ${c.overlap !== null ? `overlap ${c.overlap}` : `${c.distanceM} m away`})`,
      candidates,
      decidedBy: null,
    };
  }
  const reason = candidates.length > 1 ? `${candidates.length} candidates` : `one weak candidate (${candidates[0]!.name === null ? 'no name' : `name similarity ${candidates[0]!.nameSimilarity}`})`;
  return { outcome: 'needs_decision', reason, candidates };
}

export async function conflate(snapshot: FeatureSnapshot, families: readonly TagFilter[], source: CandidateSource, settings: ConflationSettings): Promise<OsmConflationDecision> {
  const shape = shapeOfGeometry(snapshot.geometry);
  const bounds = searchBounds(shape, Math.max(settings.pointRadiusM, SEARCH_MARGIN_M));
  const found = await source.find(bounds, families);
  return decide(scoreCandidates(snapshot, found, settings));
}

// ---- shapes of OSM data ---------------------------------------------------------------------------

/** Join member ways into closed rings where their ends meet (outer members of a multipolygon). */
export function ringsFromWays(ways: Position[][]): Position[][] {
  const same = (a: Position, b: Position) => a[0] === b[0] && a[1] === b[1];
  const open = ways.filter((w) => w.length > 1).map((w) => [...w]);
  const rings: Position[][] = [];
  while (open.length > 0) {
    let ring = open.shift()!;
    let grown = true;
    while (!same(ring[0]!, ring[ring.length - 1]!) && grown) {
      grown = false;
      for (let i = 0; i < open.length; i++) {
        const w = open[i]!;
        const end = ring[ring.length - 1]!;
        if (same(w[0]!, end)) ring = [...ring, ...w.slice(1)];
        else if (same(w[w.length - 1]!, end)) ring = [...ring, ...[...w].reverse().slice(1)];
        else continue;
        open.splice(i, 1);
        grown = true;
        break;
      }
    }
    if (!same(ring[0]!, ring[ring.length - 1]!)) ring = [...ring, ring[0]!];
    rings.push(ring);
  }
  return rings;
}

function wayShape(positions: Position[], closedById: boolean): Shape {
  if (positions.length === 1) return { kind: 'point', position: positions[0]! };
  return closedById && positions.length >= 4 ? { kind: 'area', rings: [positions] } : { kind: 'line', positions };
}

/** Shapes of the family members among OSM API elements (the map call: nodes, ways, relations). */
export function candidatesFromOsmElements(elements: OsmElement[], families: readonly TagFilter[]): OsmCandidate[] {
  const nodes = new Map<number, Position>();
  const ways = new Map<number, { refs: number[] }>();
  for (const e of elements) {
    if (e.type === 'node') nodes.set(e.id, [e.lon, e.lat]);
    if (e.type === 'way') ways.set(e.id, { refs: e.nodeRefs });
  }
  const wayPositions = (refs: number[]) => refs.map((r) => nodes.get(r)).filter((p): p is Position => p !== undefined);
  const out: OsmCandidate[] = [];
  for (const e of elements) {
    if (!matchesFamily(e.tags, families)) continue;
    if (e.type === 'node') out.push({ type: 'node', id: e.id, tags: e.tags, shape: { kind: 'point', position: [e.lon, e.lat] } });
    if (e.type === 'way') {
      const positions = wayPositions(e.nodeRefs);
      if (positions.length === 0) continue;
      out.push({ type: 'way', id: e.id, tags: e.tags, shape: wayShape(positions, e.nodeRefs.length > 3 && e.nodeRefs[0] === e.nodeRefs[e.nodeRefs.length - 1]) });
    }
    if (e.type === 'relation') {
      const outer = e.members.filter((m) => m.type === 'way' && (m.role === 'outer' || m.role === '')).map((m) => wayPositions(ways.get(m.ref)?.refs ?? []));
      const usable = outer.filter((w) => w.length > 1);
      if (usable.length > 0 && e.tags.type === 'multipolygon') out.push({ type: 'relation', id: e.id, tags: e.tags, shape: { kind: 'area', rings: ringsFromWays(usable) } });
      else {
        const points = e.members.flatMap((m) => (m.type === 'node' ? [nodes.get(m.ref)] : m.type === 'way' ? wayPositions(ways.get(m.ref)?.refs ?? []) : [])).filter((p): p is Position => p !== undefined);
        if (points.length > 0) out.push({ type: 'relation', id: e.id, tags: e.tags, shape: points.length === 1 ? { kind: 'point', position: points[0]! } : { kind: 'line', positions: points } });
      }
    }
  }
  return out;
}

// ---- Overpass -------------------------------------------------------------------------------------

const qlString = (s: string) => `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
const regexEscape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** One `nwr[…]` statement per family entry; alternatives of one key become an anchored regex. */
export function overpassQuery(bounds: Bounds, families: readonly TagFilter[], timeoutSeconds: number): string {
  const f = (v: number) => v.toFixed(7);
  const statements = families.map((entry) => {
    const filters = Object.entries(entry).map(([k, values]) =>
      values.length === 1 ? `[${qlString(k)}=${qlString(values[0]!)}]` : `[${qlString(k)}~${qlString(`^(${values.map(regexEscape).join('|')})$`)}]`,
    );
    return `  nwr${filters.join('')};`;
  });
  return `[out:json][timeout:${timeoutSeconds}][bbox:${f(bounds.south)},${f(bounds.west)},${f(bounds.north)},${f(bounds.east)}];\n(\n${statements.join('\n')}\n);\nout body geom;`;
}

interface OverpassElement {
  type: OsmType;
  id: number;
  lat?: number;
  lon?: number;
  tags?: OsmTags;
  nodes?: number[];
  geometry?: ({ lat: number; lon: number } | null)[];
  members?: { type: OsmType; ref: number; role: string; lat?: number; lon?: number; geometry?: ({ lat: number; lon: number } | null)[] }[];
}

export function candidatesFromOverpass(elements: OverpassElement[], families: readonly TagFilter[]): OsmCandidate[] {
  const out: OsmCandidate[] = [];
  const positions = (g: OverpassElement['geometry']) => (g ?? []).filter((p): p is { lat: number; lon: number } => p !== null).map((p): Position => [p.lon, p.lat]);
  for (const e of elements) {
    const tags = e.tags ?? {};
    if (!matchesFamily(tags, families)) continue;
    if (e.type === 'node' && e.lat !== undefined && e.lon !== undefined) out.push({ type: 'node', id: e.id, tags, shape: { kind: 'point', position: [e.lon, e.lat] } });
    if (e.type === 'way') {
      const p = positions(e.geometry);
      if (p.length === 0) continue;
      const nodes = e.nodes ?? [];
      out.push({ type: 'way', id: e.id, tags, shape: wayShape(p, nodes.length > 3 && nodes[0] === nodes[nodes.length - 1]) });
    }
    if (e.type === 'relation') {
      const members = e.members ?? [];
      const outer = members.filter((m) => m.type === 'way' && (m.role === 'outer' || m.role === '')).map((m) => positions(m.geometry)).filter((w) => w.length > 1);
      if (tags.type === 'multipolygon' && outer.length > 0) out.push({ type: 'relation', id: e.id, tags, shape: { kind: 'area', rings: ringsFromWays(outer) } });
      else {
        const points = members.flatMap((m) => (m.lat !== undefined && m.lon !== undefined ? [[m.lon, m.lat] as Position] : positions(m.geometry)));
        if (points.length > 0) out.push({ type: 'relation', id: e.id, tags, shape: points.length === 1 ? { kind: 'point', position: points[0]! } : { kind: 'line', positions: points } });
      }
    }
  }
  return out;
}

export class OverpassSource implements CandidateSource {
  readonly name = 'overpass' as const;
  private readonly fetchImpl: typeof fetch;

  constructor(private readonly options: { url: string; userAgent: string; timeoutMs: number; fetch?: typeof fetch }) {
    this.fetchImpl = options.fetch ?? fetch;
  }

  async find(bounds: Bounds, families: readonly TagFilter[]): Promise<OsmCandidate[]> {
    const query = overpassQuery(bounds, families, Math.max(1, Math.ceil(this.options.timeoutMs / 1000)));
    let response: Response;
    let text: string;
    try {
      response = await this.fetchImpl(`${this.options.url}/api/interpreter`, {
        method: 'POST',
        headers: { 'user-agent': this.options.userAgent, 'content-type': 'application/x-www-form-urlencoded; charset=utf-8' },
        body: new URLSearchParams({ data: query }).toString(),
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
      text = await response.text();
    } catch (cause) {
      throw new RetryableExportError(`Overpass: ${(cause as Error).message}`, { cause });
    }
    if (isRetryableStatus(response.status)) {
      const delay = retryAfterMs(response.headers.get('retry-after'));
      throw new RetryableExportError(`Overpass answered ${response.status}`, delay === undefined ? {} : { retryAfterMs: delay });
    }
    if (!response.ok) throw new ConflationLookupError(`Overpass answered ${response.status}: ${text.replace(/<[^>]+>/g, ' ').replace(/\s+/g, ' ').trim().slice(0, 300)}`);
    let body: { elements?: OverpassElement[]; remark?: string };
    try {
      body = JSON.parse(text) as typeof body;
    } catch {
      throw new ConflationLookupError(`Overpass answered something other than JSON: ${text.slice(0, 200)}`);
    }
    // A runtime error (timeout, out of memory) comes as 200 with a remark and partial elements.
    if (body.remark && /runtime (error|remark)/i.test(body.remark)) throw new RetryableExportError(`Overpass: ${body.remark}`);
    return candidatesFromOverpass(body.elements ?? [], families);
  }
}

/** The lookup was refused for good (bad query, bad answer): the export records it as failed. */
export class ConflationLookupError extends Error {
  override readonly name = 'ConflationLookupError';
}
