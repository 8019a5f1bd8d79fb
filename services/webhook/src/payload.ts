/**
 * The push payload: JSON, or form-encoded with the JSON in a `payload` field (GitHub's and Gitea's
 * "application/x-www-form-urlencoded" content type). Only the fields routing needs are validated.
 */
import { isAscii } from 'node:buffer';
import { z } from 'zod';

/** `after` of a deleted branch: forty zeros (or sixty-four in SHA-256 repositories). */
export const isDeletionCommit = (sha: string): boolean => /^0+$/.test(sha);

const PushSchema = z.looseObject({
  ref: z.string().min(1).max(1024),
  after: z.string().regex(/^([0-9a-f]{40}|[0-9a-f]{64})$/i, 'a 40 or 64 character commit id'),
});

export type PushPayload = z.infer<typeof PushSchema>;

export class MalformedPayload extends Error {
  override readonly name = 'MalformedPayload';
}

/** Decode the body into a JSON value; throws MalformedPayload on anything that is not. */
export function decodeBody(rawBody: Buffer, contentType: string | undefined): unknown {
  // Pushes are nearly always pure ASCII; for ASCII, latin1 decoding gives the very same string
  // as UTF-8 at a quarter of the cost (a copy instead of a validating decode).
  const text = isAscii(rawBody) ? rawBody.toString('latin1') : rawBody.toString('utf8');
  let json = text;
  if ((contentType ?? '').toLowerCase().startsWith('application/x-www-form-urlencoded')) {
    const payload = new URLSearchParams(text).get('payload');
    if (payload === null) throw new MalformedPayload('form body without a payload field');
    json = payload;
  }
  try {
    return JSON.parse(json) as unknown;
  } catch {
    throw new MalformedPayload('body is not valid JSON');
  }
}

/** Validate a decoded body as a push; throws MalformedPayload naming the bad field. */
export function parsePush(body: unknown): PushPayload {
  const result = PushSchema.safeParse(body);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new MalformedPayload(`push payload: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  return result.data;
}
