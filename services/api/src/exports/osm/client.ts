import { RetryableExportError, isRetryableStatus, retryAfterMs } from '../errors.js';
import type { DiffResultEntry, OsmChange, OsmElement, OsmTags, OsmType } from './model.js';
import {
  parseChangesetDocument,
  parseDiffResult,
  parseOsmChangeDocument,
  parseOsmDocument,
  serializeChangesetCreate,
  serializeOsmChange,
  type ChangesetInfo,
} from './xml.js';

/** A non-2xx answer that retrying will not fix (4xx other than 408/429). */
export class OsmApiError extends Error {
  override readonly name = 'OsmApiError';
  constructor(
    readonly status: number,
    readonly body: string,
    readonly operation: string,
  ) {
    super(`OSM API ${operation} answered ${status}: ${body.slice(0, 300)}`);
  }
}

export interface OsmClientOptions {
  /** Base URL without /api/0.6, e.g. https://master.apis.dev.openstreetmap.org. */
  apiUrl: string;
  /** OAuth2 access token with the write_api scope. */
  accessToken: string;
  userAgent: string;
  timeoutMs: number;
  fetch?: typeof fetch;
}

const XML = 'text/xml; charset=utf-8';

/** A small client for the OSM API 0.6 calls the exporter makes; every call is one HTTP request. */
export class OsmApiClient {
  private readonly fetchImpl: typeof fetch;

  constructor(private readonly options: OsmClientOptions) {
    this.fetchImpl = options.fetch ?? fetch;
  }

  private async call(operation: string, method: string, path: string, body?: string): Promise<string> {
    const headers: Record<string, string> = {
      'user-agent': this.options.userAgent,
      authorization: `Bearer ${this.options.accessToken}`,
    };
    if (body !== undefined) headers['content-type'] = XML;
    let response: Response;
    try {
      response = await this.fetchImpl(`${this.options.apiUrl}/api/0.6${path}`, {
        method,
        headers,
        ...(body === undefined ? {} : { body }),
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
    } catch (cause) {
      throw new RetryableExportError(`OSM API ${operation}: ${(cause as Error).message}`, { cause });
    }
    let text: string;
    try {
      text = await response.text();
    } catch (cause) {
      throw new RetryableExportError(`OSM API ${operation}: reading the answer failed: ${(cause as Error).message}`, { cause });
    }
    if (response.ok) return text;
    if (isRetryableStatus(response.status)) {
      const delay = retryAfterMs(response.headers.get('retry-after'));
      throw new RetryableExportError(`OSM API ${operation} answered ${response.status}`, delay === undefined ? {} : { retryAfterMs: delay });
    }
    throw new OsmApiError(response.status, text, operation);
  }

  /** The display name of the token's account (GET /api/0.6/user/details). */
  async accountName(): Promise<string> {
    const text = await this.call('user details', 'GET', '/user/details');
    const match = /display_name="([^"]*)"/.exec(text);
    if (!match) throw new OsmApiError(200, text, 'user details (no display_name)');
    return match[1]!.replace(/&quot;/g, '"').replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
  }

  async createChangeset(tags: OsmTags): Promise<number> {
    const text = await this.call('changeset create', 'PUT', '/changeset/create', serializeChangesetCreate(tags));
    const id = Number(text.trim());
    if (!Number.isSafeInteger(id) || id <= 0) throw new OsmApiError(200, text, 'changeset create (not an id)');
    return id;
  }

  /** Replace an open changeset's tags (PUT /api/0.6/changeset/#id), e.g. its comment after a partial upload. */
  async updateChangeset(id: number, tags: OsmTags): Promise<void> {
    await this.call('changeset update', 'PUT', `/changeset/${id}`, serializeChangesetCreate(tags));
  }

  async getChangeset(id: number): Promise<ChangesetInfo> {
    return parseChangesetDocument(await this.call('changeset read', 'GET', `/changeset/${id}`));
  }

  async upload(changesetId: number, change: OsmChange): Promise<DiffResultEntry[]> {
    const xml = serializeOsmChange(change, changesetId);
    return parseDiffResult(await this.call('changeset upload', 'POST', `/changeset/${changesetId}/upload`, xml));
  }

  /** Close; a changeset that is already closed (409) counts as closed. */
  async closeChangeset(id: number): Promise<void> {
    try {
      await this.call('changeset close', 'PUT', `/changeset/${id}/close`);
    } catch (error) {
      if (error instanceof OsmApiError && error.status === 409) return;
      throw error;
    }
  }

  async downloadChangeset(id: number): Promise<ReturnType<typeof parseOsmChangeDocument>> {
    return parseOsmChangeDocument(await this.call('changeset download', 'GET', `/changeset/${id}/download`));
  }

  /**
   * The map call: every node in the box, the ways using them (with all their nodes) and the
   * relations using either. `GET /api/0.6/map?bbox=left,bottom,right,top`.
   */
  async map(bounds: { south: number; west: number; north: number; east: number }): Promise<OsmElement[]> {
    const f = (v: number) => v.toFixed(7);
    return parseOsmDocument(await this.call('map', 'GET', `/map?bbox=${f(bounds.west)},${f(bounds.south)},${f(bounds.east)},${f(bounds.north)}`));
  }

  /** The element as it was at `version` (GET /api/0.6/#type/#id/#version); null when OSM has no such version. */
  async fetchVersion(type: OsmType, id: number, version: number): Promise<OsmElement | null> {
    try {
      const [element] = parseOsmDocument(await this.call(`${type} version read`, 'GET', `/${type}/${id}/${version}`));
      return element ?? null;
    } catch (error) {
      if (error instanceof OsmApiError && (error.status === 404 || error.status === 410 || error.status === 403)) return null;
      throw error;
    }
  }

  /**
   * The element with everything it references (ways: their nodes; relations: members and their
   * nodes), current versions included; null when it was deleted (410) or never existed (404).
   */
  async fetchFull(type: OsmType, id: number): Promise<OsmElement[] | null> {
    const path = type === 'node' ? `/node/${id}` : `/${type}/${id}/full`;
    try {
      return parseOsmDocument(await this.call(`${type} read`, 'GET', path));
    } catch (error) {
      if (error instanceof OsmApiError && (error.status === 404 || error.status === 410)) return null;
      throw error;
    }
  }
}
