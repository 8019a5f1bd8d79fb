import { RetryableExportError, isRetryableStatus, retryAfterMs } from '../errors.js';

/** A MediaWiki API error answer ({ error: { code, info } }). */
export class WikibaseApiError extends Error {
  override readonly name = 'WikibaseApiError';
  constructor(
    readonly code: string,
    readonly info: string,
  ) {
    super(`${code}: ${info}`);
  }
}

/** Error codes a later attempt can get past (replica lag, read-only maintenance, rate limits). */
export const RETRYABLE_API_CODES = new Set(['maxlag', 'readonly', 'ratelimited', 'actionthrottledtext', 'failed-save']);

export interface WikibaseStatement {
  id: string;
  mainsnak: { property: string; datavalue?: { type: string; value: unknown } };
  references?: { snaks: Record<string, unknown[]> | unknown[] }[];
}

export interface WikibaseItem {
  id: string;
  lastrevid: number;
  labels: Record<string, { value: string }>;
  claims: Record<string, WikibaseStatement[]>;
}

/** Maxlag etiquette: every request carries maxlag; a maxlag answer is retried after a growing pause. */
export interface MaxlagPolicy {
  maxlag: number;
  retries: number;
  /** The first pause; doubled on every further retry, never shorter than the server's Retry-After. */
  backoffMs: number;
}

export const DEFAULT_MAXLAG_POLICY: MaxlagPolicy = { maxlag: 5, retries: 4, backoffMs: 5000 };

/** Run `attempt` until it stops failing with maxlag, pausing with exponential backoff in between. */
export async function withMaxlagRetries<T>(policy: MaxlagPolicy, attempt: () => Promise<T>, isMaxlag: (error: unknown) => { retryAfterMs: number | undefined } | null): Promise<T> {
  for (let n = 0; ; n++) {
    try {
      return await attempt();
    } catch (error) {
      const lag = isMaxlag(error);
      if (!lag) throw error;
      const pause = Math.max(policy.backoffMs * 2 ** n, lag.retryAfterMs ?? 0);
      if (n >= policy.retries) throw new RetryableExportError(`Wikibase replication lag stayed above maxlag=${policy.maxlag} after ${n + 1} attempts`, { cause: error, retryAfterMs: pause });
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}

class MaxlagAnswer extends Error {
  constructor(readonly retryAfterMs: number | undefined) {
    super('maxlag');
  }
}

export interface WikibaseReaderOptions {
  maxlag?: MaxlagPolicy;
  /** e.g. https://www.wikidata.org/w/api.php */
  apiEndpoint: string;
  userAgent: string;
  timeoutMs: number;
  /** OAuth2 token, sent so userinfo names the bot account. */
  bearer?: string;
  fetch?: typeof fetch;
}

/**
 * The reads the exporter makes itself (wikibase-edit only writes): the item before an update, the
 * bot's account name and its recent contributions (to recover an item after a crash).
 */
export class WikibaseReader {
  private readonly fetchImpl: typeof fetch;

  constructor(private readonly options: WikibaseReaderOptions) {
    this.fetchImpl = options.fetch ?? fetch;
  }

  private get(params: Record<string, string>): Promise<Record<string, unknown>> {
    const policy = this.options.maxlag ?? DEFAULT_MAXLAG_POLICY;
    return withMaxlagRetries(policy, () => this.getOnce({ ...params, maxlag: String(policy.maxlag) }), (e) => (e instanceof MaxlagAnswer ? { retryAfterMs: e.retryAfterMs } : null));
  }

  private async getOnce(params: Record<string, string>): Promise<Record<string, unknown>> {
    const url = `${this.options.apiEndpoint}?${new URLSearchParams({ ...params, format: 'json' }).toString()}`;
    const headers: Record<string, string> = { 'user-agent': this.options.userAgent };
    if (this.options.bearer) headers.authorization = `Bearer ${this.options.bearer}`;
    let response: Response;
    let text: string;
    try {
      response = await this.fetchImpl(url, { headers, signal: AbortSignal.timeout(this.options.timeoutMs) });
      text = await response.text();
    } catch (cause) {
      throw new RetryableExportError(`Wikibase ${params.action}: ${(cause as Error).message}`, { cause });
    }
    if (isRetryableStatus(response.status)) throw new RetryableExportError(`Wikibase ${params.action} answered ${response.status}`);
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(text) as Record<string, unknown>;
    } catch {
      throw new WikibaseApiError('bad-response', `HTTP ${response.status}, not JSON: ${text.slice(0, 200)}`);
    }
    const error = body.error as { code?: string; info?: string } | undefined;
    if (error) {
      if (error.code === 'maxlag') throw new MaxlagAnswer(retryAfterMs(response.headers.get('retry-after')));
      if (RETRYABLE_API_CODES.has(error.code ?? '')) throw new RetryableExportError(`Wikibase ${params.action}: ${error.code}`);
      throw new WikibaseApiError(error.code ?? 'unknown', error.info ?? '');
    }
    return body;
  }

  /** The item with labels and statements, or null if it does not exist (deleted, never created). */
  async getItem(id: string): Promise<WikibaseItem | null> {
    return (await this.getItems([id]))[0] ?? null;
  }

  /** Up to 50 items in one request; missing ones are left out. */
  async getItems(ids: string[]): Promise<WikibaseItem[]> {
    if (ids.length === 0) return [];
    const body = await this.get({ action: 'wbgetentities', ids: ids.slice(0, 50).join('|'), props: 'info|labels|claims' });
    const entities = (body.entities ?? {}) as Record<string, Record<string, unknown>>;
    return ids.slice(0, 50).flatMap((id) => {
      const entity = entities[id];
      if (!entity || 'missing' in entity) return [];
      return [{ id, lastrevid: Number(entity.lastrevid), labels: (entity.labels ?? {}) as WikibaseItem['labels'], claims: (entity.claims ?? {}) as WikibaseItem['claims'] }];
    });
  }

  /** Items with a coordinate within `radiusM` (GeoData's list=geosearch, which indexes P625 on Wikidata). */
  async itemsNear(latitude: number, longitude: number, radiusM: number): Promise<string[]> {
    const body = await this.get({ action: 'query', list: 'geosearch', gscoord: `${latitude.toFixed(6)}|${longitude.toFixed(6)}`, gsradius: String(Math.round(radiusM)), gslimit: '50' });
    const hits = (body.query as { geosearch?: { title: string }[] } | undefined)?.geosearch ?? [];
    return hits.map((h) => /(Q[1-9]\d*)$/.exec(h.title)?.[1]).filter((id): id is string => id !== undefined);
  }

  /** Items with a statement property=value (CirrusSearch's haswbstatement), e.g. P402=the OSM relation. */
  async itemsWithStatement(property: string, value: string): Promise<string[]> {
    const body = await this.get({ action: 'query', list: 'search', srsearch: `haswbstatement:${property}=${value}`, srlimit: '10' });
    const hits = (body.query as { search?: { title: string }[] } | undefined)?.search ?? [];
    return hits.map((h) => /(Q[1-9]\d*)$/.exec(h.title)?.[1]).filter((id): id is string => id !== undefined);
  }

  /** A cheap read that proves the wiki is reachable before anything is written. */
  async ping(): Promise<void> {
    await this.get({ action: 'query', meta: 'userinfo' });
  }

  async currentUserName(): Promise<string> {
    const body = await this.get({ action: 'query', meta: 'userinfo' });
    const info = (body.query as { userinfo?: { name?: string; anon?: string } } | undefined)?.userinfo;
    if (!info?.name || info.anon !== undefined) throw new WikibaseApiError('not-logged-in', 'the OAuth2 token does not identify an account');
    return info.name;
  }

  /**
   * The item whose creation summary carries `marker`, among the account's last 500 edits (newest
   * first). A crash recovery runs minutes after the crash, so 500 edits is a wide margin.
   */
  async findCreatedItem(user: string, marker: string): Promise<{ itemId: string; revisionId: number } | null> {
    const body = await this.get({ action: 'query', list: 'usercontribs', ucuser: user, ucprop: 'ids|title|comment', uclimit: '500' });
    const contributions = ((body.query as { usercontribs?: { title: string; comment?: string; revid: number }[] } | undefined)?.usercontribs ?? []);
    const hit = contributions.find((c) => c.comment?.includes(marker));
    const itemId = hit ? /(Q[1-9]\d*)$/.exec(hit.title)?.[1] : undefined;
    return hit && itemId ? { itemId, revisionId: hit.revid } : null;
  }
}
