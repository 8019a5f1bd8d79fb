import { randomUUID } from 'node:crypto';
import WBEdit from 'wikibase-edit';
import type { ExportsSettings, WikibaseSettings } from '../config.js';
import { RetryableExportError } from '../errors.js';
import { InvalidGeometryError, assertExportableGeometry, centroidOf } from '../geometry.js';
import type { WikibaseExportJournal } from '../journal.js';
import type { CategoryMapping, ExportOutcome, FeatureSnapshot } from '../types.js';
import { RETRYABLE_API_CODES, WikibaseApiError, WikibaseReader, type WikibaseItem } from './reads.js';

/** What the caller persists after an export and hands back for the next one. */
export interface WikibaseExportRecord {
  itemId: string;
  revisionId: number;
}

export interface WikibaseExportRequest {
  snapshot: FeatureSnapshot;
  previous: WikibaseExportRecord | null;
  /** Scoped to this one export of this one approved version. */
  journal: WikibaseExportJournal;
}

export interface WikibaseExporterDeps {
  settings: Pick<ExportsSettings, 'wikibase' | 'userAgent' | 'httpTimeoutMs'>;
  mapping: CategoryMapping;
}

/** Wikidata's Earth; Wikibase installs use the same globe URI for coordinates. */
const EARTH = 'http://www.wikidata.org/entity/Q2';
/** 1e-6° ≈ 0.1 m: finer than any feature we map, coarse enough to compare without float noise. */
const PRECISION = 0.000001;
const round = (v: number) => Number(v.toFixed(6));

type WbEdit = ReturnType<typeof WBEdit>;
type EditParams = Parameters<WbEdit['entity']['edit']>[0];

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
    if (!settings.instanceUrl || !this.apiEndpoint) return { status: 'skipped', reason: 'WIKIBASE_URL is not set' };
    if (!settings.credentials) return { status: 'skipped', reason: 'no Wikibase credentials (WIKIBASE_USERNAME/WIKIBASE_PASSWORD or WIKIBASE_OAUTH2_TOKEN)' };
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
      return await Promise.race([call(), deadline]);
    } catch (error) {
      // A failed login or token fetch stays cached inside a wikibase-edit instance; start afresh next time.
      this.edit = null;
      throw error instanceof RetryableExportError ? error : classify(error);
    } finally {
      clearTimeout(timer);
    }
  }

  private reader(settings: WikibaseSettings): WikibaseReader {
    const bearer = settings.credentials && 'oauth2Token' in settings.credentials ? settings.credentials.oauth2Token : undefined;
    return new WikibaseReader({ apiEndpoint: this.apiEndpoint!, userAgent: this.deps.settings.userAgent, timeoutMs: this.deps.settings.httpTimeoutMs, ...(bearer ? { bearer } : {}) });
  }

  private editor(settings: WikibaseSettings): WbEdit {
    if (this.edit) return this.edit;
    const credentials = settings.credentials!;
    this.edit = WBEdit({
      instance: settings.instanceUrl as `http${string}`,
      credentials: 'oauth2Token' in credentials ? { oauth2: { accessToken: credentials.oauth2Token } } : { username: credentials.username, password: credentials.password },
      userAgent: this.deps.settings.userAgent,
      bot: settings.bot,
      // wikibase-edit would otherwise retry some errors without limit; the job queue owns retries.
      autoRetry: false,
    });
    return this.edit;
  }

  private async run(settings: WikibaseSettings, { snapshot, previous, journal }: WikibaseExportRequest, wikidataClass: string): Promise<ExportOutcome<WikibaseExportRecord>> {
    const reader = this.reader(settings);
    const centroid = centroidOf(snapshot.geometry);
    const coordinate = { latitude: round(centroid.latitude), longitude: round(centroid.longitude), precision: PRECISION, globe: EARTH };
    const label = snapshot.name.trim().slice(0, 250);

    if (previous) {
      const item = await reader.getItem(previous.itemId);
      if (!item) return { status: 'conflict', reason: `item ${previous.itemId} no longer exists on ${settings.instanceUrl}` };
      const changes = this.updateFor(item, settings, label, wikidataClass, coordinate);
      if (!changes) return { status: 'unchanged', result: { itemId: item.id, revisionId: item.lastrevid } };
      const params = { id: item.id as `Q${number}`, ...changes, summary: this.summary(snapshot, 'update') } as EditParams;
      const response = await this.viaWikibaseEdit(() => this.editor(settings).entity.edit(params));
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
    const params = {
      type: 'item',
      labels: { [settings.language]: label },
      claims: { [settings.instanceOfProperty]: wikidataClass, [settings.coordinatesProperty]: { value: coordinate } },
      summary: `${this.summary(snapshot, 'create')} [${intent}]`,
    } as Parameters<WbEdit['entity']['create']>[0];
    const response = await this.viaWikibaseEdit(() => this.editor(settings).entity.create(params));
    return { status: 'exported', result: { itemId: String(response.entity.id), revisionId: Number(response.entity.lastrevid) } };
  }

  /**
   * The edit that brings an existing item in line, or null if it already is. Only what the platform
   * manages is touched: the label in the configured language, P31 values that are classes of the
   * mapping, and P625. Other statements and labels added by the community stay.
   */
  private updateFor(item: WikibaseItem, settings: WikibaseSettings, label: string, wikidataClass: string, coordinate: { latitude: number; longitude: number; precision: number; globe: string }): Partial<EditParams> | null {
    const managedClasses = new Set(Object.values(this.deps.mapping).map((r) => r.wikidataClass).filter((c): c is string => c !== null));
    const claims: Record<string, unknown[]> = {};
    const classStatements = item.claims[settings.instanceOfProperty] ?? [];
    const classOf = (s: (typeof classStatements)[number]) => (s.mainsnak.datavalue?.value as { id?: string } | undefined)?.id;
    const classEdits: unknown[] = classStatements.filter((s) => classOf(s) !== wikidataClass && managedClasses.has(classOf(s) ?? '')).map((s) => ({ id: s.id, remove: true }));
    if (!classStatements.some((s) => classOf(s) === wikidataClass)) classEdits.push(wikidataClass);
    if (classEdits.length > 0) claims[settings.instanceOfProperty] = classEdits;

    const coordinateStatements = item.claims[settings.coordinatesProperty] ?? [];
    const sameCoordinate = coordinateStatements.length === 1 && (() => {
      const v = coordinateStatements[0]!.mainsnak.datavalue?.value as { latitude?: number; longitude?: number } | undefined;
      return v !== undefined && Math.abs((v.latitude ?? NaN) - coordinate.latitude) < PRECISION / 2 && Math.abs((v.longitude ?? NaN) - coordinate.longitude) < PRECISION / 2;
    })();
    if (!sameCoordinate) claims[settings.coordinatesProperty] = [...coordinateStatements.map((s) => ({ id: s.id, remove: true })), { value: coordinate }];

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

  private summary(snapshot: FeatureSnapshot, kind: 'create' | 'update'): string {
    return `${kind === 'create' ? 'Created' : 'Updated'} from approved feature ${snapshot.id} version ${snapshot.version}`;
  }
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
