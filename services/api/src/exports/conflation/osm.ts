import type { ScoredOsmCandidate } from '../../../../shared/conflation.js';
import type { OsmPlanReview } from '../../../../shared/osm-plan.js';
import type { ConflationSettings } from '../config.js';
import { RetryableExportError, isRetryableStatus, retryAfterMs } from '../errors.js';
import { matchesFamily } from '../osm-tag-mapping.js';
import type { OsmElement, OsmTags, OsmType } from '../osm/model.js';
import type { FeatureSnapshot, Position, TagFilter } from '../types.js';
import { bestNameSimilarity, extendsName, namesOf } from './names.js';
import { metresToDegrees, positionsOf, projectionAround, searchBounds, shapeOfGeometry, spatialRelation, type Bounds, type Shape } from './spatial.js';

/**
 * Conflation for OpenStreetMap: before a feature's first export, find OSM elements that may already
 * be the same object — same tag family, at the same place, similar name — and decide:
 *
 *   no candidate                            → create (as without conflation)
 *   one strong candidate, any other named and clearly another object (DOMINANCE)
 *                                           → link: merge our tags into that element
 *   otherwise                               → needs_decision: a reviewer picks one or "create new"
 *
 * Where: a point or line feature and a point candidate within `pointRadiusM`; a point inside an area
 * candidate (distance 0) or within the radius of its outline; two areas overlapping by at least
 * MIN_OVERLAP of the smaller one (a touching neighbour is another object). The lookup asks for the
 * feature's bounds grown by SEARCH_MARGIN_M AND for the areas that cover the feature's
 * representative point, however large (a memorial inside a 40 ha cemetery finds the cemetery).
 *
 * What: a candidate has one of the category's tag families (config/osm-tags.yaml `match`); the
 * first family is `primary`, the others `secondary` (amenity=grave_yard for a friedhof): a secondary
 * one is strong only with a name similarity of 0.95 or more.
 *
 * Name: names.ts (tokens; a differently named object nearby is another object, not a candidate).
 * Strong: name similarity ≥ nameStrong at the same place; an unnamed candidate is always weak.
 */
export const SEARCH_MARGIN_M = 250;
/** Two areas are the same place when they overlap by this share of the smaller one. */
export const MIN_OVERLAP = 0.3;
/** Where the map call (no area query of its own) looks for areas covering the point. */
export const COVERING_SEARCH_M = 1_000;
/** How far below the strong candidate's name similarity every other candidate must be for an automatic link. */
export const DOMINANCE = 0.3;

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
  | { outcome: 'needs_decision'; reason: string; candidates: ScoredCandidate[]; plan?: OsmPlanReview };

export interface CandidateSource {
  readonly name: 'overpass' | 'map';
  /**
   * Elements of any of the families within `bounds`, and the areas of the families that cover
   * `probe` (a position of the feature) wherever their outline is.
   */
  find(bounds: Bounds, families: readonly TagFilter[], probe: Position): Promise<OsmCandidate[]>;
}

const round = (v: number, digits: number) => Number(v.toFixed(digits));

function geoJsonOf(shape: Shape): ScoredCandidate['geometry'] {
  if (shape.kind === 'point') return { type: 'Point', coordinates: shape.position };
  if (shape.kind === 'line') return { type: 'LineString', coordinates: shape.positions };
  return shape.rings.length === 1 ? { type: 'Polygon', coordinates: [shape.rings[0]] } : { type: 'MultiPolygon', coordinates: shape.rings.map((r) => [r]) };
}

/** A position of the feature for the "areas covering it" query: the point, a line's middle vertex, an area's centroid (or first vertex). */
export function probeOf(shape: Shape): Position {
  if (shape.kind === 'point') return shape.position;
  if (shape.kind === 'line') return shape.positions[Math.floor(shape.positions.length / 2)]!;
  const ring = shape.rings[0]!;
  const vertices = ring.slice(0, -1);
  const centroid: Position = [vertices.reduce((s, p) => s + p[0], 0) / vertices.length, vertices.reduce((s, p) => s + p[1], 0) / vertices.length];
  const projection = projectionAround(centroid);
  return spatialRelation({ kind: 'point', position: centroid }, shape, projection).distanceM === 0 ? centroid : ring[0]!;
}

type Thresholds = Pick<ConflationSettings, 'pointRadiusM' | 'nameStrong' | 'nameWeak'>;

export function scoreCandidates(snapshot: Pick<FeatureSnapshot, 'name' | 'geometry'>, found: OsmCandidate[], settings: Thresholds, families: readonly TagFilter[] = []): ScoredCandidate[] {
  const feature = shapeOfGeometry(snapshot.geometry);
  const projection = projectionAround(positionsOf(feature)[0]!);
  const scored: ScoredCandidate[] = [];
  const seen = new Set<string>();
  for (const candidate of found) {
    const key = `${candidate.type}/${candidate.id}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const relation = spatialRelation(feature, candidate.shape, projection);
    // Same place: areas overlapping enough; otherwise within the radius (inside an area is 0 m).
    const near = relation.overlap !== null ? relation.overlap >= MIN_OVERLAP : relation.distanceM <= settings.pointRadiusM;
    if (!near) continue;
    const similarity = bestNameSimilarity(snapshot.name, namesOf(candidate.tags));
    // A differently named object nearby is another object; but an area of the family that largely
    // overlaps or covers the feature is the same place whatever its name says: a reviewer decides.
    const samePlace = relation.overlap !== null ? relation.overlap >= 0.5 : candidate.shape.kind === 'area' && feature.kind !== 'point' && relation.distanceM === 0;
    if (similarity !== null && similarity < settings.nameWeak && !samePlace) continue;
    const familyIndex = families.findIndex((f) => matchesFamily(candidate.tags, [f]));
    const category: 'primary' | 'secondary' = familyIndex <= 0 ? 'primary' : 'secondary';
    const place = relation.overlap !== null ? relation.overlap : 1 - Math.min(1, relation.distanceM / settings.pointRadiusM) / 2;
    const score = (similarity ?? 0.4) * (category === 'primary' ? 1 : 0.9) * (0.6 + 0.4 * place);
    // Areas: half of the smaller one overlapping, or MIN_OVERLAP with (nearly) the same name.
    const enoughOverlap = relation.overlap === null || relation.overlap >= 0.5 || (similarity !== null && similarity >= 0.95);
    const strong = similarity !== null && similarity >= settings.nameStrong && (category === 'primary' || similarity >= 0.95) && enoughOverlap;
    scored.push({
      type: candidate.type,
      id: candidate.id,
      name: candidate.tags.name ?? null,
      tags: candidate.tags,
      distanceM: round(relation.distanceM, 1),
      overlap: relation.overlap === null ? null : round(relation.overlap, 2),
      nameSimilarity: similarity === null ? null : round(similarity, 2),
      strength: strong ? 'strong' : 'weak',
      category,
      score: round(score, 3),
      geometry: geoJsonOf(candidate.shape),
    });
  }
  // Best first: strong before weak, then by score, then by distance.
  return scored.sort((a, b) => (a.strength === b.strength ? 0 : a.strength === 'strong' ? -1 : 1) || (b.score ?? 0) - (a.score ?? 0) || a.distanceM - b.distanceM);
}

/**
 * The automatic decision over one feature's scored candidates, as if no other feature wanted them;
 * assignOneToOne (assignment.ts) applies it to what is left for the feature after the batch's
 * one-to-one assignment.
 */
export function decide(candidates: ScoredCandidate[], featureName?: string): OsmConflationDecision {
  if (candidates.length === 0) return { outcome: 'create', reason: 'no OSM element of this kind nearby', candidates, decidedBy: null };
  const strong = candidates.filter((c) => c.strength === 'strong');
  // One strong candidate, and every other one named and clearly another object (similarity at most
  // DOMINANCE below it): the strong one. An unnamed neighbour could be the object itself: asked.
  // Nor one whose name is ours and more ("Kriegerdenkmal 1870/71" next to "Kriegerdenkmal").
  const clearlyOther = (c: ScoredCandidate) =>
    c.nameSimilarity !== null && c.nameSimilarity <= (strong[0]!.nameSimilarity ?? 0) - DOMINANCE && !(featureName && namesOf(c.tags).some((n) => extendsName(featureName, n)));
  const dominant = strong.length === 1 && candidates.every((c) => c === strong[0] || clearlyOther(c));
  if (dominant) {
    const c = strong[0]!;
    return {
      outcome: 'link',
      target: { type: c.type, id: c.id },
      moveGeometry: false,
      reason: `${candidates.length === 1 ? 'one strong candidate' : `one strong candidate of ${candidates.length}`}: ${c.type} ${c.id} "${c.name ?? ''}" (name similarity ${c.nameSimilarity}, ${c.overlap !== null ? `overlap ${c.overlap}` : `${c.distanceM} m away`}, score ${c.score})`,
      candidates,
      decidedBy: null,
    };
  }
  const reason = candidates.length > 1 ? `${candidates.length} candidates` : `one weak candidate (${candidates[0]!.name === null ? 'no name' : `name similarity ${candidates[0]!.nameSimilarity}`})`;
  return { outcome: 'needs_decision', reason, candidates };
}

/**
 * The candidates of a feature before its first export, scored and best first. What becomes of them
 * is decided for the whole batch at once (assignment.ts assignOneToOne: one element per feature).
 */
export async function lookupCandidates(snapshot: FeatureSnapshot, families: readonly TagFilter[], source: CandidateSource, settings: ConflationSettings): Promise<ScoredCandidate[]> {
  const shape = shapeOfGeometry(snapshot.geometry);
  const bounds = searchBounds(shape, Math.max(settings.pointRadiusM, SEARCH_MARGIN_M));
  const found = await source.find(bounds, families, probeOf(shape));
  return scoreCandidates(snapshot, found, settings, families);
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

/**
 * One `nwr[…](bbox)` statement per family entry (alternatives of one key become an anchored regex),
 * and the family's ways and relations among the areas covering `probe` (`is_in` + `pivot`), so an
 * area whose outline is far from the feature is found too.
 */
export function overpassQuery(bounds: Bounds, families: readonly TagFilter[], timeoutSeconds: number, probe?: Position): string {
  const f = (v: number) => v.toFixed(7);
  const filtersOf = (entry: TagFilter) => Object.entries(entry).map(([k, values]) =>
    values.length === 1 ? `[${qlString(k)}=${qlString(values[0]!)}]` : `[${qlString(k)}~${qlString(`^(${values.map(regexEscape).join('|')})$`)}]`,
  ).join('');
  const box = `(${f(bounds.south)},${f(bounds.west)},${f(bounds.north)},${f(bounds.east)})`;
  const statements = families.map((entry) => `  nwr${filtersOf(entry)}${box};`);
  if (probe) for (const entry of families) statements.push(`  way(pivot.covering)${filtersOf(entry)};`, `  rel(pivot.covering)${filtersOf(entry)};`);
  const covering = probe ? `is_in(${f(probe[1])},${f(probe[0])})->.covering;\n` : '';
  return `[out:json][timeout:${timeoutSeconds}];\n${covering}(\n${statements.join('\n')}\n);\nout body geom;`;
}

/** The candidates that are areas containing `probe`. */
export function areasCovering(candidates: OsmCandidate[], probe: Position): OsmCandidate[] {
  const point: Shape = { kind: 'point', position: probe };
  const projection = projectionAround(probe);
  return candidates.filter((c) => c.shape.kind === 'area' && spatialRelation(point, c.shape, projection).distanceM === 0);
}

/** The map call's box around `probe` for covering areas: COVERING_SEARCH_M, within the API's 0.25 square degrees. */
export function coveringBounds(probe: Position): Bounds {
  const { dLat, dLon } = metresToDegrees(COVERING_SEARCH_M, probe[1]);
  const scale = Math.min(1, Math.sqrt(0.24 / (4 * dLat * dLon)));
  return { south: probe[1] - dLat * scale, west: probe[0] - dLon * scale, north: probe[1] + dLat * scale, east: probe[0] + dLon * scale };
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

  async find(bounds: Bounds, families: readonly TagFilter[], probe?: Position): Promise<OsmCandidate[]> {
    const query = overpassQuery(bounds, families, Math.max(1, Math.ceil(this.options.timeoutMs / 1000)), probe);
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
