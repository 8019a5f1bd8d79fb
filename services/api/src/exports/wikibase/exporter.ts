import { randomUUID } from 'node:crypto';
import type WBEdit from 'wikibase-edit';
import { licenceRefusal, type ExportsSettings, type WikibaseSettings } from '../config.js';
import { bestNameSimilarity } from '../conflation/names.js';
import { decideWikibase, type WikibaseCandidate, type WikibaseConflationDecision } from '../conflation/wikibase.js';
import { RetryableExportError } from '../errors.js';
import { InvalidGeometryError, assertExportableGeometry, centroidOf } from '../geometry.js';
import type { WikibaseExportJournal } from '../journal.js';
import type { CategoryMapping, ExportOutcome, FeatureSnapshot } from '../types.js';
import { RETRYABLE_API_CODES, WikibaseApiError, WikibaseReader, withMaxlagRetries, type MaxlagPolicy, type WikibaseItem } from './reads.js';

/** What the caller persists after an export and hands back for the next one. */
export interface WikibaseExportRecord {
  itemId: string;
  revisionId: number;
  /** The item existed before (conflation): only missing statements are ever added, nothing overwritten. */
  linked?: boolean;
}

export interface WikibaseExportRequest {
  snapshot: FeatureSnapshot;
  previous: WikibaseExportRecord | null;
  /** Scoped to this one export of this one approved version. */
  journal: WikibaseExportJournal;
  /** The OSM element the feature's OSM export created or linked, with its `wikidata` tag if it had one. */
  osmLink?: { type: string; id: number; wikidata: string | null } | null;
}

export interface WikibaseExporterDeps {
  settings: Pick<ExportsSettings, 'wikibase' | 'userAgent' | 'httpTimeoutMs' | 'licence'> & { osm?: Pick<ExportsSettings['osm'], 'conflation'> };
  mapping: CategoryMapping;
  /** Pause before the first maxlag retry (doubled each time); tests shorten it. */
  maxlagBackoffMs?: number;
}

/** Conflation thresholds when no OSM settings are given (the stand-alone exporter in tests and CLIs). */
const DEFAULT_CONFLATION = { enabled: true, nameStrong: 0.8, nameWeak: 0.5 };

type Coordinate = { latitude: number; longitude: number; precision: number; globe: string };

/** Wikidata's Earth; Wikibase installs use the same globe URI for coordinates. */
const EARTH = 'http://www.wikidata.org/entity/Q2';
/** 1e-6° ≈ 0.1 m: finer than any feature we map, coarse enough to compare without float noise. */
const PRECISION = 0.000001;
const round = (v: number) => Number(v.toFixed(6));

type WbEdit = ReturnType<typeof WBEdit>;
type EditParams = Parameters<WbEdit['entity']['edit']>[0];

/**
 * Why no feature can be exported to Wikibase with these settings (not configured, no credentials, the
 * licence), before anything is read for an export; null when exports can go.
 */
export function wikibaseSkipped(settings: Pick<ExportsSettings, 'wikibase' | 'licence'>): { status: 'skipped'; reason: string } | null {
  if (!settings.wikibase.instanceUrl) return { status: 'skipped', reason: 'WIKIBASE_URL is not set' };
  if (!settings.wikibase.credentials) return { status: 'skipped', reason: 'no Wikibase credentials (WIKIBASE_USERNAME/WIKIBASE_PASSWORD or WIKIBASE_OAUTH2_TOKEN)' };
  const refusal = licenceRefusal(settings.licence, 'wikidata');
  return refusal ? { status: 'skipped', reason: refusal } : null;
}

/**
 * Exports an approved feature to Wikidata or any Wikibase with wikibase-edit: a new item (label =
 * name, P31 = the category's class, P625 = centroid), or an update of the item created before.
 *
 * Crash safety: before the item is created, an intent token is journaled and put into the edit
 * summary. A re-run that finds a journaled token first looks for that summary among the bot's
 * contributions and adopts the item it finds instead of creating another one.
 */
export class WikibaseExporter {
  private edit: WbEdit | null = null;
  private readonly apiEndpoint: string | undefined;

  constructor(private readonly deps: WikibaseExporterDeps) {
    this.apiEndpoint = deps.settings.wikibase.instanceUrl ? `${deps.settings.wikibase.instanceUrl}/w/api.php` : undefined;
  }

  async export(request: WikibaseExportRequest): Promise<ExportOutcome<WikibaseExportRecord>> {
    const settings = this.deps.settings.wikibase;
    const skipped = wikibaseSkipped(this.deps.settings);
    if (skipped || !settings.instanceUrl || !this.apiEndpoint) return skipped ?? { status: 'skipped', reason: 'WIKIBASE_URL is not set' };
    const rule = this.deps.mapping[request.snapshot.kategorie];
    if (!rule?.wikidataClass) return { status: 'not_applicable', reason: `category ${request.snapshot.kategorie} has no Wikidata class` };
    try {
      assertExportableGeometry(request.snapshot.geometry);
      return await this.run(settings, request, rule.wikidataClass);
    } catch (error) {
      if (error instanceof EditRejected) return error.outcome;
      if (error instanceof InvalidGeometryError || error instanceof WikibaseApiError) return { status: 'failed', reason: error.message };
      throw error; // RetryableExportError, and journal failures the job queue must see
    }
  }

  /** Run a wikibase-edit call; its errors become RetryableExportError or an EditRejected outcome. */
  private async viaWikibaseEdit<T>(call: () => Promise<T>): Promise<T> {
    // wikibase-edit retries a refused connection during its token fetch without limit; the deadline
    // hands the job back to the queue instead of hanging (see docs/qc.md, residual risks).
    const deadlineMs = this.deps.settings.httpTimeoutMs * 4;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new RetryableExportError(`Wikibase did not answer within ${deadlineMs} ms`)), deadlineMs);
      timer.unref();
    });
    try {
      // Maxlag answers are waited out here with backoff (bot etiquette), not thrown to the queue at once.
      return await withMaxlagRetries(this.maxlagPolicy(), () => Promise.race([call(), deadline]), (e) => {
        const err = e as { name?: string; headers?: { get?: (name: string) => string | null } };
        if (err.name !== 'maxlag') return null;
        const header = err.headers?.get?.('retry-after');
        return { retryAfterMs: header && /^\d+$/.test(header) ? Number(header) * 1000 : undefined };
      });
    } catch (error) {
      // A failed login or token fetch stays cached inside a wikibase-edit instance; start afresh next time.
      this.edit = null;
      throw error instanceof RetryableExportError ? error : classify(error);
    } finally {
      clearTimeout(timer);
    }
  }

  private maxlagPolicy(): MaxlagPolicy {
    const { maxlag, maxlagRetries } = this.deps.settings.wikibase;
    return { maxlag, retries: maxlagRetries, backoffMs: this.deps.maxlagBackoffMs ?? 5000 };
  }

  private reader(settings: WikibaseSettings): WikibaseReader {
    const bearer = settings.credentials && 'oauth2Token' in settings.credentials ? settings.credentials.oauth2Token : undefined;
    return new WikibaseReader({ apiEndpoint: this.apiEndpoint!, userAgent: this.deps.settings.userAgent, timeoutMs: this.deps.settings.httpTimeoutMs, maxlag: this.maxlagPolicy(), ...(bearer ? { bearer } : {}) });
  }

  private async editor(settings: WikibaseSettings): Promise<WbEdit> {
    if (this.edit) return this.edit;
    const credentials = settings.credentials!;
    // Loaded on the first edit, not with the API: wikibase-edit and its dependencies take a few
    // hundred milliseconds to load, which every start of the API would otherwise pay.
    const { default: createEditor } = await import('wikibase-edit');
    this.edit = createEditor({
      instance: settings.instanceUrl as `http${string}`,
      credentials: 'oauth2Token' in credentials ? { oauth2: { accessToken: credentials.oauth2Token } } : { username: credentials.username, password: credentials.password },
      userAgent: this.deps.settings.userAgent,
      bot: settings.bot,
      maxlag: settings.maxlag,
      // wikibase-edit would otherwise retry some errors without limit; the job queue owns retries.
      autoRetry: false,
    });
    return this.edit;
  }

  private async run(settings: WikibaseSettings, request: WikibaseExportRequest, wikidataClass: string): Promise<ExportOutcome<WikibaseExportRecord>> {
    const { snapshot, journal } = request;
    let previous = request.previous;
    const reader = this.reader(settings);
    const centroid = centroidOf(snapshot.geometry);
    const coordinate = { latitude: round(centroid.latitude), longitude: round(centroid.longitude), precision: PRECISION, globe: EARTH };
    const label = snapshot.name.trim().slice(0, 250);
    const reference = this.reference(snapshot);
    if (settings.botAccount && (await this.accountName(settings, reader)) !== settings.botAccount) {
      return { status: 'failed', reason: `the Wikibase credentials do not log in as the configured bot account ${settings.botAccount} (WIKIBASE_BOT_ACCOUNT)` };
    }

    const conflation = this.deps.settings.osm?.conflation ?? DEFAULT_CONFLATION;
    let match: WikibaseConflationDecision | null = null;
    if (!previous && conflation.enabled) {
      match = await journal.recordedMatch();
      if (!match) {
        match = decideWikibase(await this.candidates(reader, settings, snapshot.name, coordinate, wikidataClass, request.osmLink ?? null, conflation));
        await journal.recordMatch(match);
      }
      if (match.outcome === 'needs_decision') return { status: 'needs_decision', reason: match.reason, candidates: match.candidates };
      if (match.outcome === 'link') previous = { itemId: match.itemId, revisionId: 0, linked: true };
    }

    if (previous?.linked) {
      const item = await reader.getItem(previous.itemId);
      if (!item) return { status: 'conflict', reason: `item ${previous.itemId} no longer exists on ${settings.instanceUrl}` };
      const missing = this.missingStatements(item, settings, reference, label, wikidataClass, coordinate, request.osmLink ?? null);
      const unreferenced = this.statementsLackingOurReference(item, settings, reference, wikidataClass, coordinate);
      if (!missing && unreferenced.length === 0) return { status: 'unchanged', result: { itemId: item.id, revisionId: item.lastrevid, linked: true } };
      let revisionId = item.lastrevid;
      if (missing) {
        const params = { id: item.id as `Q${number}`, ...missing, summary: this.summary(snapshot, 'update') } as EditParams;
        const response = await this.viaWikibaseEdit(async () => (await this.editor(settings)).entity.edit(params));
        revisionId = Number(response.entity.lastrevid);
      }
      // Statements already there that say what our data says get our reference too (one edit each).
      for (const guid of unreferenced) {
        const params = { guid, snaks: reference, summary: this.summary(snapshot, 'update') } as Parameters<WbEdit['reference']['set']>[0];
        const response = (await this.viaWikibaseEdit(async () => (await this.editor(settings)).reference.set(params))) as { pageinfo?: { lastrevid?: number } };
        revisionId = Number(response.pageinfo?.lastrevid ?? revisionId);
      }
      const detail = match?.outcome === 'link' ? `added missing statements and references to existing item ${item.id}: ${match.reason}` : undefined;
      return { status: 'exported', result: { itemId: item.id, revisionId, linked: true }, ...(detail ? { detail } : {}) };
    }

    if (previous) {
      const item = await reader.getItem(previous.itemId);
      if (!item) return { status: 'conflict', reason: `item ${previous.itemId} no longer exists on ${settings.instanceUrl}` };
      const changes = this.updateFor(item, settings, reference, label, wikidataClass, coordinate);
      if (!changes) return { status: 'unchanged', result: { itemId: item.id, revisionId: item.lastrevid } };
      const params = { id: item.id as `Q${number}`, ...changes, summary: this.summary(snapshot, 'update') } as EditParams;
      const response = await this.viaWikibaseEdit(async () => (await this.editor(settings)).entity.edit(params));
      return { status: 'exported', result: { itemId: item.id, revisionId: Number(response.entity.lastrevid) } };
    }

    let intent = await journal.recordedIntent();
    if (intent) {
      const found = await reader.findCreatedItem(await this.accountName(settings, reader), intent);
      if (found) return { status: 'exported', result: found, detail: `recovered item created by an earlier attempt (${intent})` };
    } else {
      // Read something first: if the wiki is down this fails fast, before wikibase-edit is involved.
      await this.accountName(settings, reader);
      intent = `fmp-export:${snapshot.id}:v${snapshot.version}:${randomUUID().slice(0, 8)}`;
      await journal.recordIntent(intent);
    }
    const description = this.description(snapshot);
    const params = {
      type: 'item',
      labels: { [settings.language]: label },
      ...(description ? { descriptions: { [settings.language]: description } } : {}),
      claims: {
        [settings.instanceOfProperty]: { value: wikidataClass, references: [reference] },
        [settings.coordinatesProperty]: { value: coordinate, references: [reference] },
        ...(settings.country.item ? { [settings.country.property]: { value: settings.country.item, references: [reference] } } : {}),
        ...(settings.locatedIn.item ? { [settings.locatedIn.property]: { value: settings.locatedIn.item, references: [reference] } } : {}),
        ...(() => {
          const property = osmLinkProperty(settings, request.osmLink?.type);
          return property && request.osmLink ? { [property]: { value: String(request.osmLink.id), references: [reference] } } : {};
        })(),
      },
      summary: `${this.summary(snapshot, 'create')} [${intent}]`,
    } as Parameters<WbEdit['entity']['create']>[0];
    const response = await this.viaWikibaseEdit(async () => (await this.editor(settings)).entity.create(params));
    return { status: 'exported', result: { itemId: String(response.entity.id), revisionId: Number(response.entity.lastrevid) } };
  }

  /**
   * The edit that brings an existing item in line, or null if it already is. Only what the platform
   * manages is touched: the label in the configured language, P31 values that are classes of the
   * mapping, and P625. Other statements and labels added by the community stay.
   */
  private updateFor(item: WikibaseItem, settings: WikibaseSettings, reference: Record<string, string>, label: string, wikidataClass: string, coordinate: Coordinate): Partial<EditParams> | null {
    const managedClasses = new Set(Object.values(this.deps.mapping).map((r) => r.wikidataClass).filter((c): c is string => c !== null));
    const claims: Record<string, unknown[]> = {};
    const classStatements = item.claims[settings.instanceOfProperty] ?? [];
    const classOf = (s: (typeof classStatements)[number]) => (s.mainsnak.datavalue?.value as { id?: string } | undefined)?.id;
    const classEdits: unknown[] = classStatements.filter((s) => classOf(s) !== wikidataClass && managedClasses.has(classOf(s) ?? '')).map((s) => ({ id: s.id, remove: true }));
    if (!classStatements.some((s) => classOf(s) === wikidataClass)) classEdits.push({ value: wikidataClass, references: [reference] });
    if (classEdits.length > 0) claims[settings.instanceOfProperty] = classEdits;

    const coordinateStatements = item.claims[settings.coordinatesProperty] ?? [];
    const sameCoordinate = coordinateStatements.length === 1 && (() => {
      const v = coordinateStatements[0]!.mainsnak.datavalue?.value as { latitude?: number; longitude?: number } | undefined;
      return v !== undefined && Math.abs((v.latitude ?? NaN) - coordinate.latitude) < PRECISION / 2 && Math.abs((v.longitude ?? NaN) - coordinate.longitude) < PRECISION / 2;
    })();
    if (!sameCoordinate) claims[settings.coordinatesProperty] = [...coordinateStatements.map((s) => ({ id: s.id, remove: true })), { value: coordinate, references: [reference] }];

    const changes: Record<string, unknown> = {};
    if (item.labels[settings.language]?.value !== label) changes.labels = { [settings.language]: label };
    if (Object.keys(claims).length > 0) changes.claims = claims;
    return Object.keys(changes).length > 0 ? (changes as Partial<EditParams>) : null;
  }

  private async accountName(settings: WikibaseSettings, reader: WikibaseReader): Promise<string> {
    const credentials = settings.credentials!;
    // Bot passwords log in as "Account@BotName"; edits are attributed to "Account".
    if ('username' in credentials) {
      await reader.ping();
      return credentials.username.split('@')[0]!;
    }
    return reader.currentUserName();
  }

  /** "Friedhof in Kleinbergen": WIKIBASE_DESCRIPTION with {Kategorie} and {place}; null when the template needs a place not configured. */
  private description(snapshot: FeatureSnapshot): string | null {
    const { template, place } = this.deps.settings.wikibase.description;
    if (template.includes('{place}') && !place) return template.includes(' in {place}') ? template.replace(' in {place}', '').replaceAll('{Kategorie}', capitalised(snapshot.kategorie)).replaceAll('{kategorie}', snapshot.kategorie) : null;
    return template.replaceAll('{Kategorie}', capitalised(snapshot.kategorie)).replaceAll('{kategorie}', snapshot.kategorie).replaceAll('{place}', place ?? '').slice(0, 250);
  }

  private summary(snapshot: FeatureSnapshot, kind: 'create' | 'update'): string {
    const approval = this.deps.settings.wikibase.botApprovalUrl;
    return `${kind === 'create' ? 'Created' : 'Updated'} from approved feature ${snapshot.id} version ${snapshot.version}${approval ? ` (bot approval: ${approval})` : ''}`;
  }

  /**
   * The reference every statement carries: stated in (P248) the city's dataset item when one is
   * configured, the reference URL (P854) of the feature's public page, and retrieved (P813) today.
   * Never "imported from" (P143).
   */
  private reference(snapshot: FeatureSnapshot): Record<string, string> {
    const { references } = this.deps.settings.wikibase;
    const out: Record<string, string> = {};
    if (references.statedInItem) out[references.statedInProperty] = references.statedInItem;
    if (references.publicUrl) out[references.referenceUrlProperty] = references.publicUrl.replaceAll('{featureId}', encodeURIComponent(snapshot.id));
    out[references.retrievedProperty] = new Date().toISOString().slice(0, 10);
    return out;
  }

  /**
   * An item that existed before: add what it lacks — the label in our language, P31 when it has no
   * class at all, P625 when it has no coordinate, P402 when OSM linked a relation — each with our
   * reference. Values already there are never replaced, even where ours differ.
   */
  private missingStatements(item: WikibaseItem, settings: WikibaseSettings, reference: Record<string, string>, label: string, wikidataClass: string, coordinate: Coordinate, osmLink: WikibaseExportRequest['osmLink']): Partial<EditParams> | null {
    const claims: Record<string, unknown[]> = {};
    if ((item.claims[settings.instanceOfProperty] ?? []).length === 0) claims[settings.instanceOfProperty] = [{ value: wikidataClass, references: [reference] }];
    if ((item.claims[settings.coordinatesProperty] ?? []).length === 0) claims[settings.coordinatesProperty] = [{ value: coordinate, references: [reference] }];
    const linkProperty = osmLinkProperty(settings, osmLink?.type);
    if (osmLink && linkProperty && (item.claims[linkProperty] ?? []).length === 0) claims[linkProperty] = [{ value: String(osmLink.id), references: [reference] }];
    const changes: Record<string, unknown> = {};
    if (!item.labels[settings.language]) changes.labels = { [settings.language]: label };
    if (Object.keys(claims).length > 0) changes.claims = claims;
    return Object.keys(changes).length > 0 ? (changes as Partial<EditParams>) : null;
  }

  /**
   * Statements of an existing item that state what our data states — P31 = the category's class, P625
   * within 25 m of our centroid — but do not carry our reference yet (recognised by its reference URL).
   */
  private statementsLackingOurReference(item: WikibaseItem, settings: WikibaseSettings, reference: Record<string, string>, wikidataClass: string, coordinate: Coordinate): string[] {
    const ourUrl = reference[settings.references.referenceUrlProperty];
    // Without a public URL our reference cannot be told from others': existing statements are left alone.
    if (ourUrl === undefined) return [];
    const hasOurs = (statement: WikibaseItem['claims'][string][number]) =>
      (statement.references ?? []).some((r) => {
        const snaks = Array.isArray(r.snaks) ? (r.snaks as { property?: string; datavalue?: { value?: unknown } }[]) : Object.values(r.snaks as Record<string, { property?: string; datavalue?: { value?: unknown } }[]>).flat();
        return snaks.some((snak) => snak.property === settings.references.referenceUrlProperty && snak.datavalue?.value === ourUrl);
      });
    const out: string[] = [];
    for (const statement of item.claims[settings.instanceOfProperty] ?? []) {
      if ((statement.mainsnak.datavalue?.value as { id?: string } | undefined)?.id === wikidataClass && !hasOurs(statement)) out.push(statement.id);
    }
    for (const statement of item.claims[settings.coordinatesProperty] ?? []) {
      const v = statement.mainsnak.datavalue?.value as { latitude?: number; longitude?: number } | undefined;
      if (v?.latitude === undefined || v.longitude === undefined) continue;
      if (haversineM(coordinate, { latitude: v.latitude, longitude: v.longitude }) <= 25 && !hasOurs(statement)) out.push(statement.id);
    }
    return out;
  }

  /**
   * Whether one of `classes` is `target` or a subclass of it (P279, breadth first up to
   * SUBCLASS_DEPTH levels, at most SUBCLASS_READS class items read): "war memorial" is a memorial.
   */
  private async isSubclass(reader: WikibaseReader, settings: WikibaseSettings, classes: string[], target: string): Promise<boolean> {
    const seen = new Set<string>(classes);
    let level = classes;
    for (let depth = 0; depth <= SUBCLASS_DEPTH && level.length > 0; depth++) {
      if (level.includes(target)) return true;
      if (seen.size > SUBCLASS_READS) return false;
      const items = await reader.getItems(level);
      const parents = items.flatMap((item) => (item.claims[settings.subclassOfProperty] ?? []).map((st) => (st.mainsnak.datavalue?.value as { id?: string } | undefined)?.id)).filter((c): c is string => c !== undefined && !seen.has(c));
      parents.forEach((c) => seen.add(c));
      level = [...new Set(parents)];
    }
    return false;
  }

  /**
   * Candidate items: through the OSM link (the element's wikidata tag, or P402 = the relation), and
   * items with a coordinate nearby whose P31 is the category's class and whose label is similar.
   */
  private async candidates(
    reader: WikibaseReader,
    settings: WikibaseSettings,
    name: string,
    coordinate: Coordinate,
    wikidataClass: string,
    osmLink: WikibaseExportRequest['osmLink'] | null,
    thresholds: { nameStrong: number; nameWeak: number },
  ): Promise<WikibaseCandidate[]> {
    const linkedIds = new Set<string>();
    if (osmLink?.wikidata && /^Q[1-9]\d*$/.test(osmLink.wikidata)) linkedIds.add(osmLink.wikidata);
    if (osmLink?.type === 'relation') for (const id of await reader.itemsWithStatement(settings.osmRelationProperty, String(osmLink.id))) linkedIds.add(id);
    const nearIds = await reader.itemsNear(coordinate.latitude, coordinate.longitude, settings.conflationRadiusM);
    const items = await reader.getItems([...new Set([...linkedIds, ...nearIds])]);
    const out: WikibaseCandidate[] = [];
    for (const item of items) {
      const viaOsmLink = linkedIds.has(item.id);
      const classes = (item.claims[settings.instanceOfProperty] ?? []).map((s) => (s.mainsnak.datavalue?.value as { id?: string } | undefined)?.id).filter((c): c is string => c !== undefined);
      if (!viaOsmLink && !(await this.isSubclass(reader, settings, classes, wikidataClass))) continue;
      const similarity = bestNameSimilarity(name, Object.values(item.labels).map((l) => l.value));
      if (!viaOsmLink && similarity !== null && similarity < thresholds.nameWeak) continue;
      const position = item.claims[settings.coordinatesProperty]?.[0]?.mainsnak.datavalue?.value as { latitude?: number; longitude?: number } | undefined;
      const distanceM = position?.latitude !== undefined && position.longitude !== undefined ? Math.round(haversineM(coordinate, { latitude: position.latitude, longitude: position.longitude })) : null;
      out.push({
        itemId: item.id,
        label: item.labels[settings.language]?.value ?? Object.values(item.labels)[0]?.value ?? null,
        distanceM,
        nameSimilarity: similarity === null ? null : Number(similarity.toFixed(2)),
        viaOsmLink,
        strength: viaOsmLink || (similarity !== null && similarity >= thresholds.nameStrong) ? 'strong' : 'weak',
      });
    }
    return out;
  }
}

const capitalised = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

/** The item's property for the OSM element: P402 for a relation, the configured way / node property otherwise. */
function osmLinkProperty(settings: WikibaseSettings, type: string | undefined): string | undefined {
  if (type === 'relation') return settings.osmRelationProperty;
  if (type === 'way') return settings.osmWayProperty;
  if (type === 'node') return settings.osmNodeProperty;
  return undefined;
}

/** How far up the P279 tree a class is followed, and how many class items at most are read for one feature. */
const SUBCLASS_DEPTH = 5;
const SUBCLASS_READS = 60;

function haversineM(a: { latitude: number; longitude: number }, b: { latitude: number; longitude: number }): number {
  const rad = Math.PI / 180;
  const h = Math.sin(((b.latitude - a.latitude) * rad) / 2) ** 2 + Math.cos(a.latitude * rad) * Math.cos(b.latitude * rad) * Math.sin(((b.longitude - a.longitude) * rad) / 2) ** 2;
  return 2 * 6_371_000 * Math.asin(Math.sqrt(h));
}

const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', 'EPIPE', 'EAI_AGAIN', 'ENETUNREACH', 'EHOSTUNREACH', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT']);

/** A wikibase-edit call ended in a terminal outcome (failed, conflict). */
class EditRejected extends Error {
  constructor(readonly outcome: ExportOutcome<WikibaseExportRecord>) {
    super('reason' in outcome ? outcome.reason : outcome.status);
  }
}

/** wikibase-edit errors carry the MediaWiki error code as `name` or in `body.error.code`. */
function classify(error: unknown): RetryableExportError | EditRejected {
  const e = error as { name?: string; code?: string; type?: string; message?: string; body?: { error?: { code?: string } }; cause?: { code?: string } };
  const apiCode = e.body?.error?.code ?? e.name;
  if (NETWORK_CODES.has(e.code ?? '') || NETWORK_CODES.has(e.cause?.code ?? '') || e.type === 'system' || e.message === 'request timeout' || e.name === 'wrong response format' || RETRYABLE_API_CODES.has(apiCode ?? '')) {
    return new RetryableExportError(`Wikibase: ${e.message ?? String(error)}`, { cause: error });
  }
  if (apiCode === 'editconflict') return new EditRejected({ status: 'conflict', reason: e.message ?? 'edit conflict' });
  return new EditRejected({ status: 'failed', reason: `Wikibase: ${e.message ?? String(error)}` });
}
