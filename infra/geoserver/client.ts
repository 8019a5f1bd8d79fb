import { errorMessage } from '../../services/shared/retry.js';

/**
 * A small GeoServer REST client (fetch, HTTP Basic). Paths are relative to `<baseUrl>/rest`, exactly
 * as the vendored REST specification writes them (minus its "/rest" quirk). Errors name the method,
 * the path and the status, never the credentials.
 */

export interface GeoServerClientOptions {
  /** GeoServer's web application URL, e.g. http://geoserver:8080/geoserver */
  baseUrl: string;
  user: string;
  password: string;
  /** Per-request time limit. */
  timeoutMs?: number;
}

export interface RestResponse {
  status: number;
  contentType: string;
  text: string;
}

export interface RestRequest {
  query?: Record<string, string>;
  /** A JSON body (sent as application/json) or a raw body with its content type. */
  json?: unknown;
  raw?: { body: string; contentType: string };
  accept?: string;
}

export class GeoServerError extends Error {
  override readonly name = 'GeoServerError';
  constructor(
    readonly method: string,
    readonly path: string,
    readonly status: number,
    detail: string,
  ) {
    super(`GeoServer ${method} ${path} answered ${status}: ${detail.slice(0, 300)}`);
  }
}

export class GeoServerClient {
  private readonly restUrl: string;
  private readonly authorization: string;
  private readonly timeoutMs: number;

  constructor(options: GeoServerClientOptions) {
    this.restUrl = `${options.baseUrl.replace(/\/+$/, '')}/rest`;
    this.authorization = `Basic ${Buffer.from(`${options.user}:${options.password}`).toString('base64')}`;
    this.timeoutMs = options.timeoutMs ?? 30_000;
  }

  async request(method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, request: RestRequest = {}): Promise<RestResponse> {
    const url = new URL(`${this.restUrl}${path}`);
    for (const [key, value] of Object.entries(request.query ?? {})) url.searchParams.set(key, value);
    const headers: Record<string, string> = { authorization: this.authorization, accept: request.accept ?? 'application/json' };
    let body: string | undefined;
    if (request.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(request.json);
    } else if (request.raw) {
      headers['content-type'] = request.raw.contentType;
      body = request.raw.body;
    }
    let response: Response;
    try {
      response = await fetch(url, { method, headers, body, signal: AbortSignal.timeout(this.timeoutMs), redirect: 'manual' });
    } catch (cause) {
      throw new GeoServerError(method, path, 0, `no answer (${errorMessage(cause)})`);
    }
    return { status: response.status, contentType: response.headers.get('content-type') ?? '', text: await response.text() };
  }

  /**
   * GET that maps 404 to undefined and any other non-2xx to an error. `quietOnNotFound` keeps an
   * expected 404 out of GeoServer's log; only some endpoints declare it, so callers opt out.
   */
  async find(path: string, request: RestRequest = {}, options: { quietOnNotFound?: boolean } = {}): Promise<RestResponse | undefined> {
    const quiet = options.quietOnNotFound ?? true;
    const response = await this.request('GET', path, { ...request, query: { ...(quiet ? { quietOnNotFound: 'true' } : {}), ...request.query } });
    if (response.status === 404) return undefined;
    return expectOk('GET', path, response);
  }

  async getJson<T>(path: string): Promise<T> {
    const response = expectOk('GET', path, await this.request('GET', path));
    return parseJson<T>('GET', path, response);
  }

  async send(method: 'POST' | 'PUT' | 'DELETE', path: string, request: RestRequest): Promise<RestResponse> {
    return expectOk(method, path, await this.request(method, path, request));
  }
}

export function expectOk(method: string, path: string, response: RestResponse): RestResponse {
  if (response.status < 200 || response.status > 299) throw new GeoServerError(method, path, response.status, response.text);
  return response;
}

export function parseJson<T>(method: string, path: string, response: RestResponse): T {
  try {
    return JSON.parse(response.text) as T;
  } catch {
    throw new GeoServerError(method, path, response.status, `expected JSON, got ${response.contentType || 'no content type'}`);
  }
}
