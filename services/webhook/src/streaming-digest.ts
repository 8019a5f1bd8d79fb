/**
 * HMACs computed while the body streams in, so a signed GitHub-style delivery is hashed in the
 * same pass that reads it (while each chunk is still in the CPU cache) instead of in a second pass
 * over the whole buffer after it has arrived.
 *
 * The key must be known before the first byte is hashed, but which target (and so which secret)
 * a push is for is only known from the body. GitHub, Gitea and Forgejo put `ref` first in a push
 * payload, so the first chunk names the branch: the target it matches is a guess, and its secrets
 * are hashed along. This changes nothing about authentication: the handler still resolves the
 * target from the whole body and checks the signature against that target's secrets only; a
 * digest computed here is used only when it is of exactly one of those secrets over exactly the
 * bytes received (every chunk, in order, nothing dropped). A wrong or missing guess (another
 * member first, a repeated `ref`, a form body, a compressed one) only means the handler hashes
 * the buffer afterwards, as it would without this.
 */
import { createHmac, type Hmac } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { ResolvedTarget } from '../../shared/targets.js';
import { hasWellFormedSignature } from './providers.js';
import { branchOfRef, matchTarget } from './routing.js';
import type { SecretBook } from './secret-book.js';

/** Digests of the body being read, by secret. */
export interface BodyDigests {
  update(chunk: Buffer): void;
  /** Hex digests by secret; call once, after the last chunk. */
  finish(): ReadonlyMap<string, string>;
}

/** Only the opening of a body is looked at: `{"ref":"refs/heads/<branch>"` within this many bytes. */
const HEAD_BYTES = 1024;
const LEADING_REF = /^\s*\{\s*"ref"\s*:\s*"([^"\\]{1,1000})"/;

/**
 * A function for the body reader: given the request and the first chunk of a JSON body, the
 * digests to keep up to date while reading, or null when no guess can be made.
 */
export function speculativeDigests(targets: readonly ResolvedTarget[], secrets: SecretBook) {
  const githubTargets = targets.filter((t) => t.provider === 'github');
  return (headers: IncomingHttpHeaders, head: Buffer): BodyDigests | null => {
    if (githubTargets.length === 0 || !hasWellFormedSignature(headers)) return null;
    if (!(headers['content-type'] ?? '').toLowerCase().startsWith('application/json')) return null;
    const match = LEADING_REF.exec(head.toString('latin1', 0, Math.min(head.length, HEAD_BYTES)));
    const branch = match ? branchOfRef(match[1]!) : null;
    const target = branch === null ? undefined : matchTarget(githubTargets, branch);
    if (!target) return null;
    const hmacs: [string, Hmac][] = secrets.secretsOf(target).map((secret) => [secret, createHmac('sha256', secret)]);
    if (hmacs.length === 0) return null;
    return {
      update(chunk) {
        for (const [, hmac] of hmacs) hmac.update(chunk);
      },
      finish() {
        return new Map(hmacs.map(([secret, hmac]) => [secret, hmac.digest('hex')]));
      },
    };
  };
}
