import { managedOsmKeys } from '../category-mapping.js';
import type { ExportsSettings } from '../config.js';
import { RetryableExportError } from '../errors.js';
import { InvalidGeometryError, assertExportableGeometry } from '../geometry.js';
import type { OsmExportJournal } from '../journal.js';
import type { CategoryMapping, ExportOutcome, FeatureSnapshot } from '../types.js';
import { OsmApiClient, OsmApiError } from './client.js';
import { elementKey, isEmptyChange, type OsmElement, type OsmType } from './model.js';
import { PlanConflictError, planFirstExport, planReExport, rootKindOf, type OsmPlan } from './plan.js';
import { featureTags } from './tags.js';

/** What the caller persists after an export and hands back for the next one. */
export interface OsmExportRecord {
  /** The element carrying the feature's tags (node, way or multipolygon relation). */
  type: OsmType;
  id: number;
  version: number;
  /** The changeset of the last upload; null when nothing had to change. */
  changesetId: number | null;
}

export interface OsmExportRequest {
  snapshot: FeatureSnapshot;
  /** The record of the last successful export of this feature, or null for the first one. */
  previous: OsmExportRecord | null;
  /** Scoped to this one export of this one approved version. */
  journal: OsmExportJournal;
}

export interface OsmExporterDeps {
  settings: Pick<ExportsSettings, 'osm' | 'userAgent' | 'httpTimeoutMs'>;
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
export class OsmExporter {
  private readonly client: OsmApiClient | null;
  private readonly managedKeys: Set<string>;

  constructor(private readonly deps: OsmExporterDeps) {
    const { osm, userAgent, httpTimeoutMs } = deps.settings;
    this.client = osm.accessToken
      ? new OsmApiClient({ apiUrl: osm.apiUrl, accessToken: osm.accessToken, userAgent, timeoutMs: httpTimeoutMs, ...(deps.fetch ? { fetch: deps.fetch } : {}) })
      : null;
    this.managedKeys = managedOsmKeys(deps.mapping);
  }

  async export(request: OsmExportRequest): Promise<ExportOutcome<OsmExportRecord>> {
    if (!this.client) return { status: 'skipped', reason: 'OSM_ACCESS_TOKEN is not set' };
    const { snapshot } = request;
    const rule = this.deps.mapping[snapshot.kategorie];
    if (!rule || Object.keys(rule.osmTags).length === 0) {
      return { status: 'not_applicable', reason: `category ${snapshot.kategorie} has no OSM tags in the mapping` };
    }
    try {
      assertExportableGeometry(snapshot.geometry);
      return await this.run(this.client, request, rule.osmTags);
    } catch (error) {
      if (error instanceof RetryableExportError) throw error;
      if (error instanceof InvalidGeometryError || error instanceof RangeError) return { status: 'failed', reason: error.message };
      if (error instanceof PlanConflictError) return { status: 'conflict', reason: error.message };
      if (error instanceof OsmApiError) {
        if (error.status === 409 || error.status === 412 || error.status === 410) return { status: 'conflict', reason: error.message };
        return { status: 'failed', reason: error.message };
      }
      throw error;
    }
  }

  private async run(client: OsmApiClient, { snapshot, previous, journal }: OsmExportRequest, categoryTags: Record<string, string>): Promise<ExportOutcome<OsmExportRecord>> {
    let changesetId = await journal.recordedChangeset();
    if (changesetId !== null) {
      const recovered = await this.recover(client, changesetId, snapshot, previous);
      if (recovered) {
        await client.closeChangeset(changesetId);
        return { status: 'exported', result: recovered, detail: `recovered from changeset ${changesetId}` };
      }
    }

    const plan = await this.plan(client, snapshot, previous, categoryTags);
    if (isEmptyChange(plan.change)) {
      // An empty changeset left open by an earlier attempt would linger for an hour.
      if (changesetId !== null) await client.closeChangeset(changesetId).catch(() => undefined);
      return { status: 'unchanged', result: { type: plan.root.type, id: plan.root.id, version: plan.unchangedRootVersion!, changesetId: null } };
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
    const record: OsmExportRecord = {
      type: plan.root.type,
      id: root?.newId ?? plan.root.id,
      version: root?.newVersion ?? plan.unchangedRootVersion!,
      changesetId,
    };
    if (record.id < 0) throw new Error(`diffResult of changeset ${changesetId} lacks the root ${plan.root.type} ${plan.root.id}`);
    await client.closeChangeset(changesetId);
    return { status: 'exported', result: record };
  }

  private async plan(client: OsmApiClient, snapshot: FeatureSnapshot, previous: OsmExportRecord | null, categoryTags: Record<string, string>): Promise<OsmPlan> {
    const tags = featureTags(snapshot, { osmTags: categoryTags, wikidataClass: null }, rootKindOf(snapshot.geometry) === 'relation');
    if (!previous) return planFirstExport(snapshot.geometry, tags);
    const elements = await client.fetchFull(previous.type, previous.id);
    if (!elements) throw new PlanConflictError(`${previous.type} ${previous.id} was deleted on OSM`);
    const current = new Map(elements.map((e) => [elementKey(e.type, e.id), e] as const));
    return planReExport(snapshot.geometry, tags, this.managedKeys, previous, current);
  }

  /**
   * The result of an earlier attempt's upload into `changesetId`, or null if that changeset is empty.
   * The root is the previous root when it kept its kind, otherwise the created element of the new
   * kind that no other created or modified element references.
   */
  private async recover(client: OsmApiClient, changesetId: number, snapshot: FeatureSnapshot, previous: OsmExportRecord | null): Promise<OsmExportRecord | null> {
    const download = await client.downloadChangeset(changesetId);
    const touched = [...download.create, ...download.modify];
    if (touched.length + download.delete.length === 0) return null;
    const kind = rootKindOf(snapshot.geometry);
    let root: OsmElement | undefined;
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

  private changesetTags(snapshot: FeatureSnapshot): Record<string, string> {
    return {
      comment: `${snapshot.kategorie} "${snapshot.name}" (feature ${snapshot.id}, version ${snapshot.version})`.slice(0, 255),
      created_by: this.deps.settings.userAgent.slice(0, 255),
    };
  }
}
