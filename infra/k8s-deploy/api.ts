import { readFileSync } from 'node:fs';
import { request as httpsRequest, type RequestOptions } from 'node:https';

/**
 * The deploy driver's Kubernetes API client: the handful of REST calls it makes, over node:https with
 * the cluster's CA and the pod's service-account token, each call with a time limit and a cap on what
 * it reads. No kubectl, no client library: @kubernetes/client-node would bring sixteen runtime
 * dependencies (ws, tar-fs, openid-client, socks …) into the webhook image for eight requests, and
 * its generated calls take neither a per-call deadline nor a size cap without wrapping each one.
 *
 * In a pod: the API at https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the token and CA at
 * the standard paths (/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}); tests point all
 * three elsewhere (K8S_API_URL, K8S_TOKEN_FILE, K8S_CA_FILE). The token is read for every call: the
 * kubelet rotates a projected token, and a deploy may outlive one.
 */

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export interface ApiSettings {
  /** https://host:port, no path. */
  url: URL;
  /** PEM of the CA that signed the API server's certificate. */
  ca: string;
  tokenFile: string;
  /** Time limit of one call (a log stream excepted: it ends with its container or its signal). */
  callTimeoutMs: number;
}

/** The most a JSON answer may hold (a ConfigMap is at most 1 MiB; a list of one Job's pods is small). */
const MAX_JSON_BYTES = 4 * 1024 * 1024;
/** A token file larger than this is not a token. */
const MAX_TOKEN_BYTES = 64 * 1024;

export type Json = Record<string, unknown>;

/** What a call was, for messages: `get configmaps build-main in geodata-builds`. */
export interface CallTarget {
  verb: 'get' | 'list' | 'create' | 'patch' | 'delete';
  resource: string;
  namespace: string;
  name?: string;
}

const describeCall = (t: CallTarget) => `${t.verb} ${t.resource}${t.name ? ` ${t.name}` : ''} in ${t.namespace}`;

/** The API server answered with an error status (its Status object's message and reason kept). */
export class KubeApiError extends Error {
  constructor(
    readonly call: CallTarget,
    readonly status: number,
    readonly reason: string,
    readonly serverMessage: string,
  ) {
    super(KubeApiError.explain(call, status, reason, serverMessage));
    this.name = 'KubeApiError';
  }

  private static explain(call: CallTarget, status: number, reason: string, message: string): string {
    const what = `the Kubernetes API refused to ${describeCall(call)} (${status}${reason ? ` ${reason}` : ''}): ${message}`;
    if (status === 401) return `${what}; the service-account token was not accepted`;
    if (status === 403) {
      return `${what}; the webhook's service account lacks this permission: its Roles (webhook-builds in the builds namespace, webhook-deploy in the site namespaces, infra/k8s/sites.ts) must allow it`;
    }
    return what;
  }
}

/** The API server could not be reached or did not answer in time. */
export class KubeUnreachableError extends Error {
  constructor(call: CallTarget, cause: Error) {
    super(`the Kubernetes API did not answer ${describeCall(call)}: ${cause.message}`, { cause });
    this.name = 'KubeUnreachableError';
  }
}

export interface CallOptions {
  query?: Record<string, string>;
  body?: unknown;
  contentType?: string;
  signal?: AbortSignal;
}

export class KubeClient {
  constructor(private readonly settings: ApiSettings) {}

  /** One JSON call; resolves with the answer's object, rejects with KubeApiError or KubeUnreachableError. */
  async call(call: CallTarget, path: string, options: CallOptions = {}): Promise<Json> {
    const method = { get: 'GET', list: 'GET', create: 'POST', patch: 'PATCH', delete: 'DELETE' }[call.verb];
    const body = options.body === undefined ? undefined : Buffer.from(JSON.stringify(options.body));
    const timeout = AbortSignal.timeout(this.settings.callTimeoutMs);
    const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
    const { status, text } = await this.exchange(call, path, options.query, method, body, options.contentType ?? 'application/json', signal, (chunk, total) => {
      if (total > MAX_JSON_BYTES) throw new Error(`answer larger than ${MAX_JSON_BYTES} bytes`);
      return chunk;
    });
    let parsed: Json = {};
    try {
      parsed = JSON.parse(text) as Json;
    } catch {
      if (status < 300) throw new KubeUnreachableError(call, new Error(`an answer that is not JSON (status ${status})`));
    }
    if (status >= 300) {
      const message = typeof parsed.message === 'string' ? parsed.message : text.slice(0, 300);
      throw new KubeApiError(call, status, typeof parsed.reason === 'string' ? parsed.reason : '', message);
    }
    return parsed;
  }

  /**
   * A container's log, followed until the container ends (or `signal`): each chunk handed to `write`,
   * at most `limitBytes` (asked of the server with limitBytes, and held to here too).
   * Resolves with the bytes written.
   */
  async followLog(namespace: string, pod: string, container: string, limitBytes: number, write: (chunk: Buffer) => void, signal: AbortSignal): Promise<number> {
    const call: CallTarget = { verb: 'get', resource: 'pods/log', namespace, name: `${pod} (${container})` };
    let written = 0;
    const query = { container, follow: 'true', limitBytes: String(Math.max(1, limitBytes)) };
    const path = `/api/v1/namespaces/${namespace}/pods/${pod}/log`;
    const { status, text } = await this.exchange(call, path, query, 'GET', undefined, 'application/json', signal, (chunk) => {
      if (written >= limitBytes) return undefined;
      const part = chunk.subarray(0, limitBytes - written);
      written += part.length;
      write(part);
      return undefined;
    });
    if (status >= 300) {
      let parsed: Json = {};
      try {
        parsed = JSON.parse(text) as Json;
      } catch {
        // plain text
      }
      throw new KubeApiError(call, status, typeof parsed.reason === 'string' ? parsed.reason : '', typeof parsed.message === 'string' ? parsed.message : text.slice(0, 300));
    }
    return written;
  }

  private token(): string {
    const token = readFileSync(this.settings.tokenFile);
    if (token.length > MAX_TOKEN_BYTES) throw new Error(`${this.settings.tokenFile} is larger than a token`);
    return token.toString('utf8').trim();
  }

  /**
   * One request. Successful bodies go through `onChunk` (a log: copied on and dropped; JSON: kept);
   * error bodies are kept (capped) for their Status message.
   */
  private exchange(
    call: CallTarget,
    path: string,
    query: Record<string, string> | undefined,
    method: string,
    body: Buffer | undefined,
    contentType: string,
    signal: AbortSignal,
    onChunk: (chunk: Buffer, total: number) => Buffer | undefined,
  ): Promise<{ status: number; text: string }> {
    const url = new URL(path, this.settings.url);
    for (const [k, v] of Object.entries(query ?? {})) url.searchParams.set(k, v);
    let token: string;
    try {
      token = this.token();
    } catch (error) {
      return Promise.reject(new KubeUnreachableError(call, new Error(`cannot read the service-account token: ${(error as Error).message}`)));
    }
    const options: RequestOptions = {
      method,
      ca: this.settings.ca,
      headers: {
        authorization: `Bearer ${token}`,
        accept: 'application/json',
        'user-agent': 'geodata-k8s-deploy',
        ...(body ? { 'content-type': contentType, 'content-length': String(body.length) } : {}),
      },
      signal,
    };
    return new Promise((resolve, reject) => {
      const req = httpsRequest(url, options, (res) => {
        const status = res.statusCode ?? 0;
        const kept: Buffer[] = [];
        let total = 0;
        res.on('data', (chunk: Buffer) => {
          total += chunk.length;
          try {
            if (status >= 300) {
              if (total <= 64 * 1024) kept.push(chunk);
            } else {
              const keep = onChunk(chunk, total);
              if (keep) kept.push(keep);
            }
          } catch (error) {
            res.destroy(error as Error);
          }
        });
        res.once('end', () => resolve({ status, text: Buffer.concat(kept).toString('utf8') }));
        res.once('error', (error) => reject(new KubeUnreachableError(call, error)));
        // An aborted log stream (its container ended long ago, or the deploy is stopping) ends quietly.
        res.once('aborted', () => resolve({ status, text: Buffer.concat(kept).toString('utf8') }));
      });
      req.once('error', (error) => {
        const reason = signal.aborted && signal.reason instanceof Error && signal.reason.name === 'TimeoutError' ? new Error(`no answer within ${this.settings.callTimeoutMs} ms`) : error;
        reject(new KubeUnreachableError(call, reason));
      });
      req.end(body);
    });
  }
}

/** The API's address in a pod (or K8S_API_URL): IPv6 hosts in brackets. */
export function apiUrlFrom(env: NodeJS.ProcessEnv): URL {
  if (env.K8S_API_URL) return new URL(env.K8S_API_URL);
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT ?? '443';
  if (!host) return new URL('https://kubernetes.default.svc');
  return new URL(`https://${host.includes(':') ? `[${host}]` : host}:${port}`);
}
