import { managedOsmKeys } from '../category-mapping.js';
import { licenceRefusal, type ExportsSettings } from '../config.js';
import { assignOneToOne } from '../conflation/assignment.js';
import { ConflationLookupError, OverpassSource, areasCovering, candidatesFromOsmElements, coveringBounds, lookupCandidates, type CandidateSource, type OsmConflationDecision, type ScoredCandidate } from '../conflation/osm.js';
import { RetryableExportError } from '../errors.js';
import { InvalidGeometryError, assertExportableGeometry } from '../geometry.js';
import type { OsmExportJournal } from '../journal.js';
import type { CategoryMapping, ExportOutcome, FeatureSnapshot } from '../types.js';
import { OsmApiClient, OsmApiError } from './client.js';
import { boundsOf } from '../conflation/spatial.js';
import type { FeatureGeometry, Position } from '../types.js';
import { elementKey, isEmptyChange, type OsmChange, type OsmElement, type OsmTags, type OsmType } from './model.js';
import { PlanConflictError, emptyContext, planFirstExport, planReExport, reExportRootKind, rootKindOf, type OsmPlan, type PlanContext } from './plan.js';
import { categoryTagsFor, featureTags, geometryKindOf, sameTags, threeWayTags, type KeptValue } from './tags.js';

/** What the caller persists after an export and hands back for the next one. */
export interface OsmExportRecord {
  /** The element carrying the feature's tags (node, way or multipolygon relation). */
  type: OsmType;
  id: number;
  version: number;
  /** The changeset of the last upload; null when nothing had to change. */
  changesetId: number | null;
  /**
   * Set when conflation linked the feature to an element that existed before: then only `ownedKeys`
   * (tags the platform added) are ever changed or removed, every other tag is the community's, and
   * the geometry is moved only if a reviewer chose so (`geometryOwned`).
   */
  linked?: boolean;
  ownedKeys?: string[];
  geometryOwned?: boolean;
  /**
   * The root's tags as the platform wrote them at this export (its values only): the base of the
   * next export's three-way merge (tags.ts threeWayTags). Absent in records of earlier releases: then
   * the element's version `version` is read from OSM's history instead.
   */
  tags?: OsmTags;
  /** The changesets the platform uploaded for this feature, newest last (at most 50): what is "ours". */
  changesets?: number[];
}

/** A value a reviewer must settle before the export can go on (no valid tagging for the geometry). */
export class ExportQuestion extends Error {
  override readonly name = 'ExportQuestion';
}

export interface OsmExportRequest {
  snapshot: FeatureSnapshot;
  /** The record of the last successful export of this feature, or null for the first one. */
  previous: OsmExportRecord | null;
  /** Scoped to this one export of this one approved version. */
  journal: OsmExportJournal;
  /**
   * Which of these OSM elements other features already hold — their export record, or a link decided
   * for their export still on its way — as `type/id` → "feature …" (one-to-one across exports). Such
   * an element is never linked automatically (conflation/assignment.ts).
   */
  heldElsewhere?: (elements: readonly { type: OsmType; id: number }[]) => Promise<ReadonlyMap<string, string>>;
  /**
   * The feature's Wikidata item (its Wikibase export record), written as `wikidata=*` on the element:
   * the link back from OSM, through the same three-way merge (a different value someone set stays).
   */
  wikidataItem?: string | null;
}

export interface OsmExporterDeps {
  settings: Pick<ExportsSettings, 'osm' | 'userAgent' | 'httpTimeoutMs' | 'licence'>;
  mapping: CategoryMapping;
  fetch?: typeof fetch;
}

/**
 * Exports one approved feature version to OSM: create changeset → upload osmChange → close, one
 * changeset per feature export.
 *
 * Crash safety: the changeset id is journaled before the upload. A re-run that finds a journaled
 * changeset downloads it first; an upload is atomic on OSM, so a non-empty changeset means the earlier
 * attempt's upload went through and its elements are recovered from the download instead of being
 * uploaded again. Only an empty changeset is (re)used for an upload.
 *
 * Errors: 409/412 (version conflict, element still used, element gone) → `conflict`, recorded and not
 * retried; other 4xx → `failed`; network errors, timeouts, 5xx and 429 → RetryableExportError.
 */
type OsmFamilies = NonNullable<CategoryMapping[string]['osmMatch']>;

/** One export's share of a batch upload: its change (placeholders from -1 down) and how to record it. */
export interface OsmExportPart {
  root: { type: OsmType; id: number };
  change: OsmChange;
  /** The root's current version when the change does not touch the root. */
  unchangedRootVersion?: number;
  linked?: { ownedKeys: string[]; geometryOwned: boolean };
  /** Said with the outcome (e.g. which existing element it was merged into). */
  detail?: string;
  /** The root's values of ours after this change (the next merge's base), and the changesets before it. */
  written?: OsmTags;
  ownChangesets?: number[];
  /** Values someone else changed since our last export, kept although we wanted others. */
  kept?: KeptValue[];
  /** The root's tags on OSM before this change ({} for a creation): the review's tag diff. */
  beforeTags?: OsmTags;
}

export interface PreparedOsmExport {
  part: OsmExportPart;
}

/** The export record once the part's root is known on OSM. */
export function recordOf(part: Pick<OsmExportPart, 'root' | 'linked' | 'written' | 'ownChangesets'>, id: number, version: number, changesetId: number | null): OsmExportRecord {
  const changesets = [...(part.ownChangesets ?? [])];
  if (changesetId !== null && !changesets.includes(changesetId)) changesets.push(changesetId);
  return {
    type: part.root.type,
    id,
    version,
    changesetId,
    ...(part.linked ? { linked: true, ownedKeys: part.linked.ownedKeys, geometryOwned: part.linked.geometryOwned } : {}),
    ...(part.written ? { tags: part.written } : {}),
    ...(part.written || changesets.length > 0 ? { changesets: changesets.slice(-50) } : {}),
  };
}

/** What a plan says beyond the osmChange: merge base, kept values, linked state. */
type PlannedExport = OsmPlan & Pick<OsmExportPart, 'linked' | 'written' | 'ownChangesets' | 'kept' | 'beforeTags'>;

/** "kept operator=Stadtwerke (ours: Stadt)" for the outcome's detail. */
export function keptDetail(kept: readonly KeptValue[] | undefined): string | undefined {
  if (!kept || kept.length === 0) return undefined;
  return `kept values changed on OSM since our last export: ${kept.map((k) => `${k.key}=${k.theirs ?? '(removed)'} (ours: ${k.ours ?? '(none)'})`).join(', ')}`;
}

function familiesOf(rule: CategoryMapping[string]): OsmFamilies {
  return rule.osmMatch && rule.osmMatch.length > 0 ? rule.osmMatch : [Object.fromEntries(Object.entries(rule.osmTags).map(([k, v]) => [k, [v]]))];
}

/**
 * When every OSM export is skipped, whatever the feature: no access token, or the licence refuses
 * OSM. Known from the settings alone, so the QC worker records such exports without claiming a
 * batch (tasks.ts runJobBatch), as it does an unconfigured Wikibase's (wikibaseSkipped).
 */
export function osmSkipped(settings: Pick<ExportsSettings, 'osm' | 'licence'>): { status: 'skipped'; reason: string } | null {
  if (!settings.osm.accessToken) return { status: 'skipped', reason: 'OSM_ACCESS_TOKEN is not set' };
  const refusal = licenceRefusal(settings.licence, 'osm');
  return refusal ? { status: 'skipped', reason: refusal } : null;
}

/**
 * A failure as a terminal outcome: 409/412/410 (version conflict, element still used, element gone)
 * → conflict; other permanent errors → failed. Transient errors (RetryableExportError) and anything
 * unknown are thrown on.
 */
export function outcomeOfError(error: unknown): ExportOutcome<OsmExportRecord> {
  if (error instanceof RetryableExportError) throw error;
  if (error instanceof ConflationLookupError) return { status: 'failed', reason: error.message };
  if (error instanceof InvalidGeometryError || error instanceof RangeError) return { status: 'failed', reason: error.message };
  if (error instanceof PlanConflictError) return { status: 'conflict', reason: error.message };
  if (error instanceof ExportQuestion) return { status: 'needs_decision', reason: error.message, candidates: [] };
  if (error instanceof OsmApiError) {
    if (error.status === 409 || error.status === 412 || error.status === 410) return { status: 'conflict', reason: error.message };
    return { status: 'failed', reason: error.message };
  }
  throw error;
}

function geometryPositions(geometry: FeatureGeometry): Position[] {
  switch (geometry.type) {
    case 'Point':
      return [geometry.coordinates];
    case 'LineString':
      return [...geometry.coordinates];
    case 'Polygon':
      return geometry.coordinates.flat();
    case 'MultiPolygon':
      return geometry.coordinates.flat(2);
  }
}

export class OsmExporter {
  private readonly client: OsmApiClient | null;
  private readonly managedKeys: Set<string>;

  constructor(private readonly deps: OsmExporterDeps) {
    const { osm, userAgent, httpTimeoutMs } = deps.settings;
    this.client = osm.accessToken
      ? new OsmApiClient({ apiUrl: osm.apiUrl, accessToken: osm.accessToken, userAgent, timeoutMs: httpTimeoutMs, ...(deps.fetch ? { fetch: deps.fetch } : {}) })
      : null;
    this.managedKeys = managedOsmKeys(deps.mapping);
    for (const key of deps.settings.osm.tagMapping.managedKeys) this.managedKeys.add(key);
  }

  /** Where conflation looks: Overpass, or the OSM API's map call on the same server as the upload. */
  private candidateSource(client: OsmApiClient): CandidateSource {
    const { conflation } = this.deps.settings.osm;
    if (conflation.source === 'overpass' && conflation.overpassUrl) {
      return new OverpassSource({ url: conflation.overpassUrl, userAgent: this.deps.settings.userAgent, timeoutMs: this.deps.settings.httpTimeoutMs, ...(this.deps.fetch ? { fetch: this.deps.fetch } : {}) });
    }
    // The map call has no area query: when nothing in the box covers the point, a second call over
    // COVERING_SEARCH_M around it adds the areas that do.
    return {
      name: 'map',
      find: async (bounds, families, probe) => {
        const near = candidatesFromOsmElements(await client.map(bounds), families);
        if (areasCovering(near, probe).length > 0) return near;
        return [...near, ...areasCovering(candidatesFromOsmElements(await client.map(coveringBounds(probe)), families), probe)];
      },
    };
  }

  /**
   * What must hold before any OSM call, for a single export and a batch alike: a client, the licence,
   * OSM tags for the kategorie. Answers the terminal outcome when one fails.
   */
  private gate(request: OsmExportRequest): { outcome: ExportOutcome<OsmExportRecord> } | { client: OsmApiClient; rule: NonNullable<CategoryMapping[string]> } {
    const skipped = osmSkipped(this.deps.settings);
    if (skipped || !this.client) return { outcome: skipped ?? { status: 'skipped', reason: 'OSM_ACCESS_TOKEN is not set' } };
    const { snapshot } = request;
    const rule = this.deps.mapping[snapshot.kategorie];
    if (!rule || Object.keys(rule.osmTags).length === 0) {
      return { outcome: { status: 'not_applicable', reason: `category ${snapshot.kategorie} has no OSM tags in the mapping` } };
    }
    return { client: this.client, rule };
  }

  private accountChecked: Promise<string | null> | null = null;

  /**
   * With OSM_IMPORT_ACCOUNT set, the token must belong to that dedicated account (checked once per
   * exporter): an import never runs under a personal account by a mixed-up token. null when it does.
   */
  private wrongAccount(client: OsmApiClient): Promise<string | null> {
    const wanted = this.deps.settings.osm.changeset.account;
    if (!wanted) return Promise.resolve(null);
    this.accountChecked ??= client.accountName().then((name) => (name === wanted ? null : `the OSM token belongs to "${name}", not to the import account OSM_IMPORT_ACCOUNT="${wanted}"`));
    return this.accountChecked;
  }

  async export(request: OsmExportRequest): Promise<ExportOutcome<OsmExportRecord>> {
    const gate = this.gate(request);
    if ('outcome' in gate) return gate.outcome;
    const { client, rule } = gate;
    try {
      const wrong = await this.wrongAccount(client);
      if (wrong) return { status: 'failed', reason: wrong };
      assertExportableGeometry(request.snapshot.geometry);
      return await this.run(client, request, rule, familiesOf(rule));
    } catch (error) {
      return outcomeOfError(error);
    }
  }

  /** The API client (null without OSM_ACCESS_TOKEN), for uploads of several prepared exports together. */
  get api(): OsmApiClient | null {
    return this.client;
  }

  /**
   * Everything of an export before its upload, for a batch of exports in one changeset
   * (qc/jobs/osm-batch.ts): the licence gate, the mapping, the conflation decision (the batch's
   * one-to-one assignment journaled it after `lookup`; without one, as in `export`) and the plan.
   * Answers a terminal outcome, or the prepared change with placeholders from -1 down.
   */
  async prepare(request: OsmExportRequest): Promise<ExportOutcome<OsmExportRecord> | PreparedOsmExport> {
    const gate = this.gate(request);
    if ('outcome' in gate) return gate.outcome;
    const { client, rule } = gate;
    const { snapshot } = request;
    try {
      const wrong = await this.wrongAccount(client);
      if (wrong) return { status: 'failed', reason: wrong };
      assertExportableGeometry(snapshot.geometry);
      const resolved = await this.resolvePrevious(client, request, familiesOf(rule));
      if ('status' in resolved) return resolved;
      const { previous, decision } = resolved;
      const plan = await this.plan(client, snapshot, previous, rule, request.wikidataItem ?? null);
      const detail = [decision?.outcome === 'link' ? `merged into existing ${decision.target.type} ${decision.target.id}: ${decision.reason}` : undefined, keptDetail(plan.kept)].filter(Boolean).join('; ');
      const part: PreparedOsmExport['part'] = {
        root: plan.root,
        change: plan.change,
        ...(plan.unchangedRootVersion !== undefined ? { unchangedRootVersion: plan.unchangedRootVersion } : {}),
        ...(plan.linked ? { linked: plan.linked } : {}),
        ...(detail ? { detail } : {}),
        ...(plan.written ? { written: plan.written } : {}),
        ...(plan.ownChangesets ? { ownChangesets: plan.ownChangesets } : {}),
        ...(plan.kept && plan.kept.length > 0 ? { kept: plan.kept } : {}),
        beforeTags: plan.beforeTags ?? {},
      };
      if (isEmptyChange(plan.change)) return { status: 'unchanged', result: recordOf(part, plan.root.id, plan.unchangedRootVersion!, null) };
      return { part };
    } catch (error) {
      return outcomeOfError(error);
    }
  }

  /**
   * The conflation lookup of a first export whose decision is not journaled yet: its candidates,
   * scored, for a batch to assign one-to-one (qc/jobs/osm-batch.ts) before each export's `prepare`
   * reads the decision back. null when there is nothing to look up (a re-export, conflation off, a
   * decision already journaled); a terminal outcome when the export cannot go on.
   */
  async lookup(request: OsmExportRequest): Promise<ExportOutcome<OsmExportRecord> | { candidates: ScoredCandidate[] } | null> {
    const gate = this.gate(request);
    if ('outcome' in gate) return gate.outcome;
    if (request.previous || !this.deps.settings.osm.conflation.enabled) return null;
    try {
      const wrong = await this.wrongAccount(gate.client);
      if (wrong) return { status: 'failed', reason: wrong };
      assertExportableGeometry(request.snapshot.geometry);
      if (await request.journal.recordedDecision()) return null;
      return { candidates: await lookupCandidates(request.snapshot, familiesOf(gate.rule), this.candidateSource(gate.client), this.deps.settings.osm.conflation) };
    } catch (error) {
      return outcomeOfError(error);
    }
  }

  /**
   * Before the first write: the conflation decision (journaled first, so a re-run uses it) and what
   * it links to. Without a journaled one (a lone export), the feature is a batch of one for the
   * one-to-one assignment, against the elements other features hold.
   */
  private async resolvePrevious(client: OsmApiClient, request: OsmExportRequest, families: OsmFamilies): Promise<{ previous: OsmExportRecord | null; decision: OsmConflationDecision | null } | ExportOutcome<OsmExportRecord>> {
    const { snapshot, journal } = request;
    let previous = request.previous;
    let decision: OsmConflationDecision | null = null;
    if (!previous && this.deps.settings.osm.conflation.enabled) {
      decision = await journal.recordedDecision();
      if (!decision) {
        const { conflation } = this.deps.settings.osm;
        const candidates = await lookupCandidates(snapshot, families, this.candidateSource(client), conflation);
        const held = request.heldElsewhere && candidates.length > 0 ? await request.heldElsewhere(candidates) : new Map<string, string>();
        decision = assignOneToOne([{ label: `feature ${snapshot.id}`, name: snapshot.name, candidates, held }], conflation.ambiguityMargin)[0]!;
        await journal.recordDecision(decision);
      }
      if (decision.outcome === 'needs_decision') return { status: 'needs_decision', reason: decision.reason, candidates: decision.candidates };
      if (decision.outcome === 'link') {
        // version 0: the plan reads the element's current version; only the kind and id matter here.
        previous = { type: decision.target.type, id: decision.target.id, version: 0, changesetId: null, linked: true, ownedKeys: [], geometryOwned: decision.moveGeometry };
      }
    }
    return { previous, decision };
  }

  private async run(client: OsmApiClient, request: OsmExportRequest, rule: CategoryMapping[string], families: OsmFamilies): Promise<ExportOutcome<OsmExportRecord>> {
    const { snapshot, journal } = request;
    const resolved = await this.resolvePrevious(client, request, families);
    if ('status' in resolved) return resolved;
    const { previous, decision } = resolved;

    let changesetId = await journal.recordedChangeset();
    if (changesetId !== null) {
      const recovered = await this.recover(client, changesetId, snapshot, previous, decision);
      if (recovered) {
        await client.closeChangeset(changesetId);
        return { status: 'exported', result: recovered, detail: `recovered from changeset ${changesetId}` };
      }
    }

    const plan = await this.plan(client, snapshot, previous, rule, request.wikidataItem ?? null);
    const record = (id: number, version: number, changeset: number | null): OsmExportRecord => recordOf(plan, id, version, changeset);
    if (isEmptyChange(plan.change)) {
      // An empty changeset left open by an earlier attempt would linger for an hour.
      if (changesetId !== null) await client.closeChangeset(changesetId).catch(() => undefined);
      return { status: 'unchanged', result: record(plan.root.id, plan.unchangedRootVersion!, null) };
    }

    if (changesetId === null || !(await client.getChangeset(changesetId)).open) {
      changesetId = await client.createChangeset(this.changesetTags(snapshot));
      await journal.recordChangeset(changesetId);
    }

    let diff;
    try {
      diff = await client.upload(changesetId, plan.change);
    } finally {
      // Closed on every path: an upload that failed leaves it empty, and one that went through
      // unanswered is found again by the next attempt in the journaled changeset's download.
      await client.closeChangeset(changesetId).catch(() => undefined);
    }
    const root = diff.find((d) => d.type === plan.root.type && d.oldId === plan.root.id);
    const result = record(root?.newId ?? plan.root.id, root?.newVersion ?? plan.unchangedRootVersion!, changesetId);
    if (result.id < 0) throw new Error(`diffResult of changeset ${changesetId} lacks the root ${plan.root.type} ${plan.root.id}`);
    const detail = [decision?.outcome === 'link' ? `merged into existing ${decision.target.type} ${decision.target.id}: ${decision.reason}` : undefined, keptDetail(plan.kept)].filter(Boolean).join('; ');
    return detail ? { status: 'exported', result, detail } : { status: 'exported', result };
  }

  /**
   * The change for this export. First export: everything created, with the category's tags for the
   * geometry (a reviewer is asked when there are none, ExportQuestion). Re-export: the root's tags
   * merged three ways (what we wrote last, what OSM has, what we want) and the geometry applied
   * keeping node identity (plan.ts). A linked element keeps its geometry unless a reviewer chose to
   * move it.
   */
  private async plan(client: OsmApiClient, snapshot: FeatureSnapshot, previous: OsmExportRecord | null, rule: CategoryMapping[string], wikidataItem: string | null): Promise<PlannedExport> {
    const { geometry } = snapshot;
    const link: OsmTags = wikidataItem && /^Q[1-9]\d*$/.test(wikidataItem) ? { wikidata: wikidataItem } : {};
    if (!previous) {
      const wanted = { ...featureTags(snapshot, this.categoryTags(rule, geometry), rootKindOf(geometry) === 'relation'), ...link };
      const ctx = geometry.type === 'Point' ? emptyContext() : await this.context(client, geometry, [], []);
      return { ...planFirstExport(geometry, wanted, ctx), written: wanted, ownChangesets: [], beforeTags: {} };
    }
    const elements = await client.fetchFull(previous.type, previous.id);
    if (!elements) throw new PlanConflictError(`${previous.type} ${previous.id} was deleted on OSM`);
    const existing = elements.find((e) => e.type === previous.type && e.id === previous.id);
    if (!existing) throw new PlanConflictError(`${previous.type} ${previous.id} is no longer on OSM`);
    const own = previous.changesets ?? (previous.changesetId !== null ? [previous.changesetId] : []);
    const base = await this.mergeBase(client, previous);
    if (previous.linked) {
      // The category tags are left out: the element already carries its family's tagging.
      const merged = threeWayTags(base, existing.tags, { ...featureTags(snapshot, {}, false), ...link });
      const geometryOwned = previous.geometryOwned === true;
      const linked = { ownedKeys: Object.keys(merged.written).sort(), geometryOwned };
      const common = { linked, written: merged.written, ownChangesets: own, kept: merged.kept, beforeTags: existing.tags };
      if (geometryOwned) {
        if (reExportRootKind(geometry, previous.type) !== previous.type) throw new PlanConflictError(`the reviewer chose to move ${previous.type} ${previous.id} to the feature's geometry, but a ${geometry.type} cannot become a ${previous.type}`);
        const ctx = { ...(await this.context(client, geometry, elements, own)), reviewerMoves: true };
        return { ...planReExport(geometry, merged.tags, previous, ctx), ...common };
      }
      if (sameTags(merged.tags, existing.tags)) return { change: { create: [], modify: [], delete: [], deleteIfUnused: [] }, root: previous, unchangedRootVersion: existing.version!, ...common };
      return { change: { create: [], modify: [{ ...existing, tags: merged.tags }], delete: [], deleteIfUnused: [] }, root: previous, ...common };
    }
    const kind = reExportRootKind(geometry, previous.type);
    const wanted = { ...featureTags(snapshot, this.categoryTags(rule, geometry), kind === 'relation'), ...link };
    const merged = threeWayTags(base, existing.tags, wanted);
    const ctx = geometry.type === 'Point' ? { ...emptyContext(), current: new Map(elements.map((e) => [elementKey(e.type, e.id), e] as const)) } : await this.context(client, geometry, elements, own);
    return { ...planReExport(geometry, merged.tags, previous, ctx), written: merged.written, ownChangesets: own, kept: merged.kept, beforeTags: existing.tags };
  }

  /** The category's tags for the feature's geometry, or a question when it has none valid there. */
  private categoryTags(rule: CategoryMapping[string], geometry: FeatureGeometry): OsmTags {
    const kind = geometryKindOf(geometry);
    const tags = categoryTagsFor(rule, kind);
    if (!tags) {
      const what = kind === 'point' ? 'a point (a node)' : 'a line (an open way)';
      throw new ExportQuestion(`the category has no valid OSM tagging for ${what}: ${Object.entries(rule.osmTags).map(([k, v]) => `${k}=${v}`).join(' ')} describes an area. Draw the feature as an area, or set "${kind}:" tags for the category in the OSM tag mapping`);
    }
    return tags;
  }

  /**
   * What the platform wrote at its last export: the record's `tags`, or for a record of an earlier
   * release the element as it was at the recorded version (OSM's history), restricted for a linked
   * element to the keys it owned. null when neither is known: then only missing keys are added.
   */
  private async mergeBase(client: OsmApiClient, previous: OsmExportRecord): Promise<OsmTags | null> {
    if (previous.tags) return previous.tags;
    if (previous.version <= 0) return previous.linked ? {} : null;
    const old = await client.fetchVersion(previous.type, previous.id, previous.version);
    if (!old) return previous.linked ? {} : null;
    if (!previous.linked) return old.tags;
    return Object.fromEntries(Object.entries(old.tags).filter(([k]) => (previous.ownedKeys ?? []).includes(k)));
  }

  /**
   * The plan's view of OSM: the root's elements plus the map call over the feature and the root
   * (grown by about a metre), which lists every way and relation using a node there — what tells
   * the platform's own nodes from those someone else connected to, and the nodes a new vertex can
   * join. An area over the map call's limit (0.25 square degrees) is planned without it: then no
   * node is moved or deleted and none joined.
   */
  private async context(client: OsmApiClient, geometry: FeatureGeometry, elements: OsmElement[], own: number[]): Promise<PlanContext> {
    const current = new Map<string, OsmElement>();
    const positions: Position[] = geometryPositions(geometry);
    for (const e of elements) if (e.type === 'node') positions.push([e.lon, e.lat]);
    const b = boundsOf(positions);
    const margin = 0.00002;
    const bounds = { south: b.south - margin, west: b.west - margin, north: b.north + margin, east: b.east + margin };
    let parentsKnown = false;
    if ((bounds.east - bounds.west) * (bounds.north - bounds.south) <= 0.25) {
      for (const e of await client.map(bounds)) current.set(elementKey(e.type, e.id), e);
      parentsKnown = true;
    }
    for (const e of elements) current.set(elementKey(e.type, e.id), e);
    return { current, parentsKnown, ownChangesets: new Set(own) };
  }

  /**
   * The result of an earlier attempt's upload into `changesetId`, or null if that changeset is empty.
   * The root is the previous root when it kept its kind, otherwise the created element of the new
   * kind that no other created or modified element references.
   */
  private async recover(client: OsmApiClient, changesetId: number, snapshot: FeatureSnapshot, previous: OsmExportRecord | null, decision: OsmConflationDecision | null): Promise<OsmExportRecord | null> {
    const download = await client.downloadChangeset(changesetId);
    const touched = [...download.create, ...download.modify];
    if (touched.length + download.delete.length === 0) return null;
    const kind = previous && !previous.linked ? reExportRootKind(snapshot.geometry, previous.type) : rootKindOf(snapshot.geometry);
    let root: OsmElement | undefined;
    if (previous?.linked) {
      root = touched.find((e) => e.type === previous.type && e.id === previous.id);
      if (!root || root.version === undefined) throw new PlanConflictError(`changeset ${changesetId} has changes but not to the linked ${previous.type} ${previous.id}`);
      // The keys the platform added are those the element lacked when conflation looked at it.
      const before = decision?.candidates.find((c) => c.type === previous.type && c.id === previous.id)?.tags ?? {};
      const ours = featureTags(snapshot, {}, false);
      const ownedKeys = previous.ownedKeys && previous.ownedKeys.length > 0 ? previous.ownedKeys : Object.keys(ours).filter((k) => before[k] === undefined);
      return { type: root.type, id: root.id, version: root.version, changesetId, linked: true, ownedKeys, geometryOwned: previous.geometryOwned === true };
    }
    if (previous && previous.type === kind) {
      root = touched.find((e) => e.type === previous.type && e.id === previous.id);
      if (!root) {
        const current = await client.fetchFull(previous.type, previous.id);
        root = current?.find((e) => e.type === previous.type && e.id === previous.id);
      }
    } else {
      const referenced = new Set<string>();
      for (const e of touched) {
        if (e.type === 'way') e.nodeRefs.forEach((ref) => referenced.add(elementKey('node', ref)));
        if (e.type === 'relation') e.members.forEach((m) => referenced.add(elementKey(m.type, m.ref)));
      }
      root = download.create.find((e) => e.type === kind && !referenced.has(elementKey(e.type, e.id)));
    }
    if (!root || root.version === undefined) throw new PlanConflictError(`changeset ${changesetId} has changes but its root element cannot be identified`);
    return { type: root.type, id: root.id, version: root.version, changesetId };
  }

  /**
   * The import conventions (docs/qc.md): comment, source, created_by, hashtags and import=yes. One
   * feature: OSM_CHANGESET_COMMENT; a batch of several: OSM_CHANGESET_BATCH_COMMENT.
   */
  changesetTags(snapshots: FeatureSnapshot | readonly FeatureSnapshot[]): Record<string, string> {
    const conventions = this.deps.settings.osm.changeset;
    const all = Array.isArray(snapshots) ? (snapshots as readonly FeatureSnapshot[]) : [snapshots as FeatureSnapshot];
    const single = all.length === 1 ? all[0]! : null;
    const comment = single
      ? conventions.comment
          .replaceAll('{kategorie}', single.kategorie)
          .replaceAll('{name}', single.name.trim())
          .replaceAll('{featureId}', single.id)
          .replaceAll('{version}', String(single.version))
      : conventions.batchComment
          .replaceAll('{count}', String(all.length))
          .replaceAll('{kategorien}', [...new Set(all.map((s) => s.kategorie))].sort().join(', '))
          .replaceAll('{names}', all.map((s) => s.name.trim()).join(', '));
    const tags: Record<string, string> = {
      comment: `${comment} ${conventions.hashtags.split(';').join(' ')}`.slice(0, 255),
      source: conventions.source,
      created_by: this.deps.settings.userAgent.slice(0, 255),
      hashtags: conventions.hashtags,
    };
    if (conventions.importTag) tags.import = 'yes';
    if (conventions.importPage) tags.url = conventions.importPage;
    const licence = this.deps.settings.licence;
    if (licence.licence) tags['source:license'] = licence.licence;
    return tags;
  }
}
