import { managedOsmKeys } from '../category-mapping.js';
import { licenceRefusal, type ExportsSettings } from '../config.js';
import { ConflationLookupError, OverpassSource, candidatesFromOsmElements, conflate, type CandidateSource, type OsmConflationDecision } from '../conflation/osm.js';
import { RetryableExportError } from '../errors.js';
import { InvalidGeometryError, assertExportableGeometry } from '../geometry.js';
import type { OsmExportJournal } from '../journal.js';
import type { CategoryMapping, ExportOutcome, FeatureSnapshot } from '../types.js';
import { OsmApiClient, OsmApiError } from './client.js';
import { elementKey, isEmptyChange, type OsmChange, type OsmElement, type OsmType } from './model.js';
import { PlanConflictError, planFirstExport, planReExport, rootKindOf, type OsmPlan } from './plan.js';
import { featureTags, linkedTags, sameTags } from './tags.js';

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
}

export interface OsmExportRequest {
  snapshot: FeatureSnapshot;
  /** The record of the last successful export of this feature, or null for the first one. */
  previous: OsmExportRecord | null;
  /** Scoped to this one export of this one approved version. */
  journal: OsmExportJournal;
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
}

export interface PreparedOsmExport {
  part: OsmExportPart;
}

/** The export record once the part's root is known on OSM. */
export function recordOf(part: Pick<OsmExportPart, 'root' | 'linked'>, id: number, version: number, changesetId: number | null): OsmExportRecord {
  return {
    type: part.root.type,
    id,
    version,
    changesetId,
    ...(part.linked ? { linked: true, ownedKeys: part.linked.ownedKeys, geometryOwned: part.linked.geometryOwned } : {}),
  };
}

function familiesOf(rule: CategoryMapping[string]): OsmFamilies {
  return rule.osmMatch && rule.osmMatch.length > 0 ? rule.osmMatch : [Object.fromEntries(Object.entries(rule.osmTags).map(([k, v]) => [k, [v]]))];
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
  if (error instanceof OsmApiError) {
    if (error.status === 409 || error.status === 412 || error.status === 410) return { status: 'conflict', reason: error.message };
    return { status: 'failed', reason: error.message };
  }
  throw error;
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
    return { name: 'map', find: async (bounds, families) => candidatesFromOsmElements(await client.map(bounds), families) };
  }

  /**
   * What must hold before any OSM call, for a single export and a batch alike: a client, the licence,
   * OSM tags for the kategorie. Answers the terminal outcome when one fails.
   */
  private gate(request: OsmExportRequest): { outcome: ExportOutcome<OsmExportRecord> } | { client: OsmApiClient; rule: NonNullable<CategoryMapping[string]> } {
    if (!this.client) return { outcome: { status: 'skipped', reason: 'OSM_ACCESS_TOKEN is not set' } };
    const { snapshot } = request;
    const refusal = licenceRefusal(this.deps.settings.licence, 'osm');
    if (refusal) return { outcome: { status: 'skipped', reason: refusal } };
    const rule = this.deps.mapping[snapshot.kategorie];
    if (!rule || Object.keys(rule.osmTags).length === 0) {
      return { outcome: { status: 'not_applicable', reason: `category ${snapshot.kategorie} has no OSM tags in the mapping` } };
    }
    return { client: this.client, rule };
  }

  async export(request: OsmExportRequest): Promise<ExportOutcome<OsmExportRecord>> {
    const gate = this.gate(request);
    if ('outcome' in gate) return gate.outcome;
    const { client, rule } = gate;
    try {
      assertExportableGeometry(request.snapshot.geometry);
      return await this.run(client, request, rule.osmTags, familiesOf(rule));
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
   * (qc/jobs/osm-batch.ts): the licence gate, the mapping, conflation (journaled, as in `export`) and
   * the plan. Answers a terminal outcome, or the prepared change with placeholders from -1 down.
   */
  async prepare(request: OsmExportRequest): Promise<ExportOutcome<OsmExportRecord> | PreparedOsmExport> {
    const gate = this.gate(request);
    if ('outcome' in gate) return gate.outcome;
    const { client, rule } = gate;
    const { snapshot } = request;
    try {
      assertExportableGeometry(snapshot.geometry);
      const resolved = await this.resolvePrevious(client, request, familiesOf(rule));
      if ('status' in resolved) return resolved;
      const { previous, decision } = resolved;
      const plan = await this.plan(client, snapshot, previous, rule.osmTags);
      const part: PreparedOsmExport['part'] = {
        root: plan.root,
        change: plan.change,
        ...(plan.unchangedRootVersion !== undefined ? { unchangedRootVersion: plan.unchangedRootVersion } : {}),
        ...(plan.linked ? { linked: plan.linked } : {}),
        ...(decision?.outcome === 'link' ? { detail: `merged into existing ${decision.target.type} ${decision.target.id}: ${decision.reason}` } : {}),
      };
      if (isEmptyChange(plan.change)) return { status: 'unchanged', result: recordOf(part, plan.root.id, plan.unchangedRootVersion!, null) };
      return { part };
    } catch (error) {
      return outcomeOfError(error);
    }
  }

  /** Before the first write: the conflation decision (journaled first, so a re-run uses it) and what it links to. */
  private async resolvePrevious(client: OsmApiClient, request: OsmExportRequest, families: OsmFamilies): Promise<{ previous: OsmExportRecord | null; decision: OsmConflationDecision | null } | ExportOutcome<OsmExportRecord>> {
    const { snapshot, journal } = request;
    let previous = request.previous;
    let decision: OsmConflationDecision | null = null;
    if (!previous && this.deps.settings.osm.conflation.enabled) {
      decision = await journal.recordedDecision();
      if (!decision) {
        decision = await conflate(snapshot, families, this.candidateSource(client), this.deps.settings.osm.conflation);
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

  private async run(client: OsmApiClient, request: OsmExportRequest, categoryTags: Record<string, string>, families: OsmFamilies): Promise<ExportOutcome<OsmExportRecord>> {
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

    const plan = await this.plan(client, snapshot, previous, categoryTags);
    const record = (id: number, version: number, changeset: number | null): OsmExportRecord => ({
      type: plan.root.type,
      id,
      version,
      changesetId: changeset,
      ...(plan.linked ? { linked: true, ownedKeys: plan.linked.ownedKeys, geometryOwned: plan.linked.geometryOwned } : {}),
    });
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
    } catch (error) {
      // The changeset stays empty; close it so it does not linger open for an hour.
      if (error instanceof OsmApiError) await client.closeChangeset(changesetId).catch(() => undefined);
      throw error;
    }
    const root = diff.find((d) => d.type === plan.root.type && d.oldId === plan.root.id);
    const result = record(root?.newId ?? plan.root.id, root?.newVersion ?? plan.unchangedRootVersion!, changesetId);
    if (result.id < 0) throw new Error(`diffResult of changeset ${changesetId} lacks the root ${plan.root.type} ${plan.root.id}`);
    await client.closeChangeset(changesetId);
    return decision?.outcome === 'link' ? { status: 'exported', result, detail: `merged into existing ${decision.target.type} ${decision.target.id}: ${decision.reason}` } : { status: 'exported', result };
  }

  private async plan(client: OsmApiClient, snapshot: FeatureSnapshot, previous: OsmExportRecord | null, categoryTags: Record<string, string>): Promise<OsmPlan & { linked?: { ownedKeys: string[]; geometryOwned: boolean } }> {
    const tags = featureTags(snapshot, { osmTags: categoryTags, wikidataClass: null }, rootKindOf(snapshot.geometry) === 'relation');
    if (!previous) return planFirstExport(snapshot.geometry, tags);
    const elements = await client.fetchFull(previous.type, previous.id);
    if (!elements) throw new PlanConflictError(`${previous.type} ${previous.id} was deleted on OSM`);
    const current = new Map(elements.map((e) => [elementKey(e.type, e.id), e] as const));
    if (previous.linked) return this.planLinked(snapshot, previous, current);
    return planReExport(snapshot.geometry, tags, this.managedKeys, previous, current);
  }

  /**
   * An element that existed before the platform linked to it: our tags are merged in without
   * overwriting anyone's values (see linkedTags); its geometry stays unless a reviewer chose to move
   * it, and it is never deleted or replaced by an element of another kind.
   */
  private planLinked(snapshot: FeatureSnapshot, previous: OsmExportRecord, current: ReadonlyMap<string, OsmElement>): OsmPlan & { linked: { ownedKeys: string[]; geometryOwned: boolean } } {
    const existing = current.get(elementKey(previous.type, previous.id));
    if (!existing) throw new PlanConflictError(`${previous.type} ${previous.id} is no longer on OSM`);
    // The category tags are left out: the element already carries its family's tagging.
    const ours = featureTags(snapshot, { osmTags: {}, wikidataClass: null }, false);
    const merged = linkedTags(existing.tags, ours, new Set(previous.ownedKeys ?? []));
    const geometryOwned = previous.geometryOwned === true;
    const linked = { ownedKeys: merged.ownedKeys, geometryOwned };
    if (geometryOwned) {
      if (rootKindOf(snapshot.geometry) !== previous.type) throw new PlanConflictError(`the reviewer chose to move ${previous.type} ${previous.id} to the feature's geometry, but a ${snapshot.geometry.type} cannot become a ${previous.type}`);
      // Every key of the element counts as managed here: merged already holds the final tags.
      return { ...planReExport(snapshot.geometry, merged.tags, new Set(Object.keys(existing.tags)), previous, current), linked };
    }
    if (sameTags(merged.tags, existing.tags)) return { change: { create: [], modify: [], delete: [], deleteIfUnused: [] }, root: previous, unchangedRootVersion: existing.version!, linked };
    return { change: { create: [], modify: [{ ...existing, tags: merged.tags }], delete: [], deleteIfUnused: [] }, root: previous, linked };
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
    const kind = rootKindOf(snapshot.geometry);
    let root: OsmElement | undefined;
    if (previous?.linked) {
      root = touched.find((e) => e.type === previous.type && e.id === previous.id);
      if (!root || root.version === undefined) throw new PlanConflictError(`changeset ${changesetId} has changes but not to the linked ${previous.type} ${previous.id}`);
      // The keys the platform added are those the element lacked when conflation looked at it.
      const before = decision?.candidates.find((c) => c.type === previous.type && c.id === previous.id)?.tags ?? {};
      const ours = featureTags(snapshot, { osmTags: {}, wikidataClass: null }, false);
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
    const licence = this.deps.settings.licence;
    if (licence.licence) tags['source:license'] = licence.licence;
    return tags;
  }
}
