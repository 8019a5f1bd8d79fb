import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { closeGracefully, listen } from '../../http-server.js';
import type { OpenApiContract, MatchedOperation } from './openapi-contract.js';

/**
 * An HTTP server on port 0 that answers one port of an Ory service (public or admin) from handlers keyed
 * by operationId, checking each request and each response against the vendored OpenAPI contract.
 *
 * A request off the contract is answered 400 (or 404 for an unknown path) like the real service would,
 * and recorded in `violations`; so is a response off the contract (answered 500). Tests assert that
 * `violations` is empty, so neither the code under test nor the double can drift from Ory's API.
 */

export interface DoubleRequest {
  operationId: string;
  method: string;
  pathname: string;
  query: URLSearchParams;
  headers: IncomingMessage['headers'];
  cookies: Record<string, string>;
  pathParams: Record<string, string>;
  body: unknown;
}

export interface DoubleResponse {
  status: number;
  body?: unknown;
  /** Defaults to application/json when there is a body. */
  contentType?: string;
  headers?: Record<string, string | string[]>;
}

export type DoubleHandler = (request: DoubleRequest) => DoubleResponse | Promise<DoubleResponse>;

export interface ExchangeRecord {
  operationId: string;
  method: string;
  path: string;
  status: number;
}

export function parseCookies(header: string | undefined): Record<string, string> {
  const cookies: Record<string, string> = {};
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq <= 0) continue;
    cookies[part.slice(0, eq).trim()] = decodeURIComponent(part.slice(eq + 1).trim());
  }
  return cookies;
}

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size > 1_000_000) throw new Error('request body over 1 MB');
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * Form fields as Ory decodes them: a dotted name (`traits.email`) is a path into a nested object, so
 * an HTML form and a JSON body of the same request check against the same schema.
 */
export function formFields(raw: string): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  for (const [name, value] of new URLSearchParams(raw)) {
    const path = name.split('.');
    if (path.some((part) => part === '' || part === '__proto__' || part === 'constructor' || part === 'prototype')) continue;
    let target = body;
    for (const part of path.slice(0, -1)) {
      const next = target[part];
      target = (target[part] = next !== null && typeof next === 'object' ? next : {}) as Record<string, unknown>;
    }
    target[path[path.length - 1]!] = value;
  }
  return body;
}

export class ContractServer {
  readonly violations: string[] = [];
  readonly exchanges: ExchangeRecord[] = [];
  private readonly handlers = new Map<string, DoubleHandler>();
  private readonly extras: Array<{ method: string; pattern: RegExp; name: string; handler: DoubleHandler }> = [];
  private readonly server: Server;
  url = '';

  constructor(
    readonly name: string,
    private readonly contract: OpenApiContract,
    /** Which operations this port serves (public vs admin): others answer 404 as on the real port. */
    private readonly serves: (template: string) => boolean,
    private readonly errorBody: (status: number, message: string) => unknown,
  ) {
    this.server = createServer((req, res) => void this.dispatch(req, res));
  }

  on(operationId: string, handler: DoubleHandler): this {
    this.handlers.set(operationId, handler);
    return this;
  }

  /**
   * A route the service serves that its OpenAPI document does not list (Kratos' social sign-in callback
   * `/self-service/methods/oidc/callback/{provider}` is one: the provider sends the browser there). Its
   * exchanges are recorded under `name` but have no contract to be checked against.
   */
  extra(method: string, pattern: RegExp, name: string, handler: DoubleHandler): this {
    this.extras.push({ method, pattern, name, handler });
    return this;
  }

  async start(): Promise<string> {
    const port = await listen(this.server, 0, '127.0.0.1');
    this.url = `http://127.0.0.1:${port}`;
    return this.url;
  }

  async close(): Promise<void> {
    await closeGracefully(this.server, 1000);
  }

  /** Count of exchanges with an operation, for "the cache spared a call" assertions. */
  count(operationId: string): number {
    return this.exchanges.filter((e) => e.operationId === operationId).length;
  }

  private send(res: ServerResponse, matched: MatchedOperation | undefined, reply: DoubleResponse, path: string, checkReply = true): void {
    const contentType = reply.body === undefined ? undefined : (reply.contentType ?? 'application/json');
    if (matched && checkReply) {
      const problems = this.contract.checkResponse(matched, reply.status, contentType, reply.body);
      if (problems.length > 0) {
        this.violations.push(`${this.name} response to ${matched.operationId}: ${problems.join('; ')}`);
        reply = { status: 500, body: { error: 'double answered off contract' } };
      }
      this.exchanges.push({ operationId: matched.operationId, method: matched.method.toUpperCase(), path, status: reply.status });
    }
    for (const [name, value] of Object.entries(reply.headers ?? {})) res.setHeader(name, value);
    if (reply.body === undefined) {
      res.writeHead(reply.status).end();
      return;
    }
    const payload = typeof reply.body === 'string' ? reply.body : JSON.stringify(reply.body);
    res.writeHead(reply.status, { 'content-type': contentType ?? 'application/json' }).end(payload);
  }

  private async dispatch(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://double');
    const method = req.method ?? 'GET';
    const extra = this.extras.find((e) => e.method === method && e.pattern.test(url.pathname));
    if (extra) {
      req.resume();
      const groups = extra.pattern.exec(url.pathname)?.groups ?? {};
      try {
        const reply = await extra.handler({ operationId: extra.name, method, pathname: url.pathname, query: url.searchParams, headers: req.headers, cookies: parseCookies(req.headers.cookie), pathParams: groups, body: undefined });
        this.exchanges.push({ operationId: extra.name, method, path: url.pathname, status: reply.status });
        this.send(res, undefined, reply, url.pathname, false);
      } catch (error) {
        this.violations.push(`${this.name} ${extra.name}: handler threw ${(error as Error).stack ?? String(error)}`);
        res.writeHead(500).end();
      }
      return;
    }
    const matched = this.contract.match(method, url.pathname);
    if (!matched || !this.serves(matched.template)) {
      const known = this.contract.hasPath(url.pathname);
      if (!known || (matched && !this.serves(matched.template))) this.violations.push(`${this.name}: no ${method} ${url.pathname} on this port`);
      else this.violations.push(`${this.name}: ${method} is not allowed on ${url.pathname}`);
      req.resume();
      res.writeHead(known && !matched ? 405 : 404, { 'content-type': 'application/json' }).end(JSON.stringify(this.errorBody(404, 'not found')));
      return;
    }
    let body: unknown;
    const contentType = req.headers['content-type'];
    try {
      const raw = await readBody(req);
      if (raw !== '') {
        if ((contentType ?? '').startsWith('application/x-www-form-urlencoded')) body = formFields(raw);
        else body = JSON.parse(raw) as unknown;
      }
    } catch (error) {
      this.violations.push(`${this.name} ${matched.operationId}: unreadable body (${(error as Error).message})`);
      this.send(res, matched, { status: 400, body: this.errorBody(400, 'unreadable body') }, url.pathname, false);
      return;
    }
    const problems = this.contract.checkRequest(matched, { method, pathname: url.pathname, query: url.searchParams, headers: req.headers, contentType, body });
    if (problems.length > 0) {
      this.violations.push(`${this.name} request ${matched.operationId}: ${problems.join('; ')}`);
      // The refusal itself is not checked: the violation is already recorded and fails the test.
      this.send(res, matched, { status: 400, body: this.errorBody(400, problems.join('; ')) }, url.pathname, false);
      return;
    }
    const handler = this.handlers.get(matched.operationId);
    if (!handler) {
      this.violations.push(`${this.name}: the double does not implement ${matched.operationId}`);
      res.writeHead(501).end();
      return;
    }
    try {
      const reply = await handler({
        operationId: matched.operationId,
        method,
        pathname: url.pathname,
        query: url.searchParams,
        headers: req.headers,
        cookies: parseCookies(req.headers.cookie),
        pathParams: matched.pathParams,
        body,
      });
      this.send(res, matched, reply, url.pathname);
    } catch (error) {
      this.violations.push(`${this.name} ${matched.operationId}: handler threw ${(error as Error).stack ?? String(error)}`);
      res.writeHead(500).end();
    }
  }
}
