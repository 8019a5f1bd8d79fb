/**
 * The two webhook dialects.
 * - gitlab: `X-Gitlab-Token` carries the shared secret itself; `X-Gitlab-Event` names the event;
 *   `Idempotency-Key` stays the same across GitLab's retries of one event.
 * - github (also Gitea and Forgejo): `X-Hub-Signature-256: sha256=<hex>` is HMAC-SHA256 of the raw
 *   body under the secret; `X-GitHub-Event` / `X-Gitea-Event` / `X-Forgejo-Event` name the event and
 *   the matching `…-Delivery` header identifies a delivery (kept on redelivery).
 * A target only ever looks at its own provider's header: a valid GitLab token does not count for
 * a GitHub-style target and vice versa. Every comparison is constant-time.
 */
import { createHash, createHmac, timingSafeEqual, webcrypto } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { Target } from '../../shared/targets.js';

export type Provider = Target['provider'];

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? undefined : value; // a repeated auth header is never valid
}

/** True when the request carries any credential header at all (cheap first filter). */
export function hasCredentials(headers: IncomingHttpHeaders): boolean {
  return headers['x-gitlab-token'] !== undefined || headers['x-hub-signature-256'] !== undefined;
}

const SIGNATURE_PATTERN = /^sha256=([0-9a-f]{64})$/i;

/** True when the request carries a GitHub-style signature header of the right shape. */
export function hasWellFormedSignature(headers: IncomingHttpHeaders): boolean {
  return SIGNATURE_PATTERN.test(header(headers, 'x-hub-signature-256') ?? '');
}

/**
 * Checks one request against sets of secrets. HMACs are cached per secret, so asking about several
 * targets (to tell "unknown branch" from "forged") costs one HMAC per distinct secret. Digests
 * already computed over exactly this body while it was read (streaming-digest.ts) are taken as
 * they are.
 */
export class RequestAuthenticator {
  private readonly hmacs: Map<string, Promise<string>>;
  private tokenDigest: Buffer | undefined;

  constructor(
    private readonly headers: IncomingHttpHeaders,
    private readonly rawBody: Buffer,
    computedWhileReading: ReadonlyMap<string, string> = new Map(),
  ) {
    this.hmacs = new Map([...computedWhileReading].map(([secret, digest]) => [secret, Promise.resolve(digest)]));
  }

  /** Does the request authenticate for a target of `provider` holding one of `secrets`? */
  async authenticates(provider: Provider, secrets: readonly string[]): Promise<boolean> {
    let ok = false;
    if (provider === 'gitlab') {
      const token = header(this.headers, 'x-gitlab-token');
      if (token === undefined) return false;
      // Compared as SHA-256 digests (equal length whatever the token's), the token hashed once.
      this.tokenDigest ??= sha256(token);
      for (const secret of secrets) ok = timingSafeEqual(this.tokenDigest, secretDigest(secret)) || ok; // no early exit: same work for every secret
      return ok;
    }
    const signature = SIGNATURE_PATTERN.exec(header(this.headers, 'x-hub-signature-256') ?? '');
    if (!signature) return false;
    // 64 hex digits on both sides: compared as they are, in constant time.
    const presented = Buffer.from(signature[1]!.toLowerCase(), 'latin1');
    for (const secret of secrets) ok = timingSafeEqual(presented, Buffer.from(await this.hmacOf(secret), 'latin1')) || ok;
    return ok;
  }

  /**
   * The body's HMAC-SHA256 under `secret`, once per secret. A large body's is computed by WebCrypto,
   * which runs it on libuv's thread pool: an HMAC of a body at the 25 MiB limit takes tens of
   * milliseconds, which the event loop does not wait for. A small body's is computed at once.
   */
  private hmacOf(secret: string): Promise<string> {
    let digest = this.hmacs.get(secret);
    if (!digest) {
      digest = this.rawBody.length <= OFF_THREAD_HMAC_OVER_BYTES ? Promise.resolve(createHmac('sha256', secret).update(this.rawBody).digest('hex')) : hmacOffThread(secret, this.rawBody);
      this.hmacs.set(secret, digest);
    }
    return digest;
  }
}

const OFF_THREAD_HMAC_OVER_BYTES = 256 * 1024;

const sha256 = (text: string): Buffer => createHash('sha256').update(text, 'utf8').digest();

/**
 * The SHA-256 of each secret, computed once rather than for every delivery. Secrets are few (two a
 * target at most during a rotation); a reload that replaces them all starts the memo afresh.
 */
const secretDigests = new Map<string, Buffer>();
const MAX_REMEMBERED_SECRETS = 1024;

function secretDigest(secret: string): Buffer {
  let digest = secretDigests.get(secret);
  if (!digest) {
    if (secretDigests.size >= MAX_REMEMBERED_SECRETS) secretDigests.clear();
    digest = sha256(secret);
    secretDigests.set(secret, digest);
  }
  return digest;
}

async function hmacOffThread(secret: string, body: Buffer): Promise<string> {
  const key = await webcrypto.subtle.importKey('raw', Buffer.from(secret, 'utf8'), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return Buffer.from(await webcrypto.subtle.sign('HMAC', key, body)).toString('hex');
}

export type EventKind = 'push' | 'ping' | 'other' | 'unknown';

/** The event a request announces, from whichever provider header is present. */
export function eventOf(headers: IncomingHttpHeaders): { kind: EventKind; name: string | null } {
  const gitlab = header(headers, 'x-gitlab-event');
  if (gitlab !== undefined) return { kind: gitlab === 'Push Hook' ? 'push' : 'other', name: gitlab };
  const github = header(headers, 'x-github-event') ?? header(headers, 'x-gitea-event') ?? header(headers, 'x-forgejo-event');
  if (github !== undefined) {
    return { kind: github === 'push' ? 'push' : github === 'ping' ? 'ping' : 'other', name: github };
  }
  return { kind: 'unknown', name: null };
}

/** The provider's delivery id, stable across redeliveries of one event, if it sent one. */
export function deliveryIdOf(headers: IncomingHttpHeaders): string | null {
  const id =
    header(headers, 'x-github-delivery') ??
    header(headers, 'x-gitea-delivery') ??
    header(headers, 'x-forgejo-delivery') ??
    header(headers, 'idempotency-key');
  return id && /^[\w.:-]{1,128}$/.test(id) ? id : null;
}
