/**
 * Reads the raw webhook body into one Buffer, with fewer copies than express.raw: with a
 * Content-Length (what GitHub, GitLab, Gitea and Forgejo send) of up to 4 MiB the buffer is
 * allocated once at its final size and every chunk is copied into it as it arrives, so nothing is
 * concatenated at the end. Bodies without a length (chunked) or larger ones are collected and
 * joined once. Over the limit → 413 (before reading, when the announced length says so); a body
 * shorter or longer than announced, or an aborted upload → 400.
 *
 * Content-Encoding: gzip (x-gzip), deflate and br are inflated while streaming, before any
 * signature is checked, and the inflated size is capped at the same limit as it grows (a 24 KiB
 * bomb stops at the limit, not at 24 MiB). Inflated bytes held by all requests together are capped
 * too (InflateBudget): beyond it a compressed request gets 429 with Retry-After, so memory stays
 * bounded under many concurrent hostile bodies. Any other encoding → 415, unread.
 *
 * Only Node's request and response API is used: the acknowledgement answers without Express
 * (fast-path.ts) and through it alike.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Transform } from 'node:stream';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import { AppError } from '../../shared/errors.js';
import type { BodyDigests } from './streaming-digest.js';

/** Digests to compute while an uncompressed body streams in (streaming-digest.ts), or null. */
export type DigestWhileReading = (headers: IncomingHttpHeaders, head: Buffer) => BodyDigests | null;

/** A body that has been read whole. */
export interface ReadBody {
  bytes: Buffer;
  /** HMACs computed while reading, by secret (empty when none were). */
  digests: ReadonlyMap<string, string>;
  /**
   * The reader is done with the body: return a pooled buffer now rather than when the response
   * closes, so fewer buffers are held at once. `bytes` must not be read after this (the buffer may
   * already hold another request's body).
   */
  release(): void;
}

const NO_DIGESTS: ReadonlyMap<string, string> = new Map();
const noBody = (): ReadBody => ({ bytes: Buffer.alloc(0), digests: NO_DIGESTS, release: () => undefined });

/** Inflated bytes that compressed requests may hold at once, over all requests. */
export class InflateBudget {
  private used = 0;

  constructor(readonly capacity: number) {}

  take(bytes: number): boolean {
    if (this.used + bytes > this.capacity) return false;
    this.used += bytes;
    return true;
  }

  give(bytes: number): void {
    this.used = Math.max(0, this.used - bytes);
  }

  get inUse(): number {
    return this.used;
  }
}

const INFLATERS: Record<string, () => Transform> = {
  gzip: createGunzip,
  'x-gzip': createGunzip,
  deflate: createInflate,
  br: createBrotliDecompress,
};

/** Reads request bodies under the webhook's limits; one per server (the inflate budget is shared). */
export class BodyReader {
  constructor(
    private readonly limit: number,
    private readonly budget: InflateBudget,
    private readonly digestWhileReading?: DigestWhileReading,
  ) {}

  /** The whole body, or an AppError (413, 415, 400, 429) once the upload is drained. */
  read(req: IncomingMessage, res: ServerResponse): Promise<ReadBody> {
    const { limit, budget } = this;
    const encoding = (req.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
    const announced = req.headers['content-length'];
    const hasBody = announced !== undefined || req.headers['transfer-encoding'] !== undefined;
    if (!hasBody) return Promise.resolve(noBody());
    const parsedLength = announced === undefined ? Number.NaN : Number(announced);
    const length = Number.isSafeInteger(parsedLength) && parsedLength >= 0 ? parsedLength : null;
    if (encoding !== 'identity' && !Object.hasOwn(INFLATERS, encoding)) {
      return drainThenFail(req, new AppError('UNSUPPORTED_MEDIA_TYPE', `Content-Encoding ${encoding} is not supported; use gzip, deflate, br or none`));
    }
    if (length !== null && length > limit) {
      // Read nothing into memory; like body-parser, answer once the upload is drained, because
      // clients (fetch, curl) only read an answer after they have sent their whole body.
      return drainThenFail(req, new AppError('PAYLOAD_TOO_LARGE', 'request body is larger than the limit'));
    }
    if (encoding === 'identity') return readInto(req, res, length, limit, this.digestWhileReading);
    return inflateInto(req, res, INFLATERS[encoding]!(), length, limit, budget).then((bytes) => ({ bytes, digests: NO_DIGESTS, release: () => undefined }));
  }
}

function drainThenFail(req: IncomingMessage, error: AppError): Promise<never> {
  return new Promise((_resolve, reject) => drainThen(req, () => reject(error)));
}

function drainThen(req: IncomingMessage, then: () => void): void {
  if (req.complete) return then();
  let done = false;
  const once = (): void => {
    if (done) return;
    done = true;
    then();
  };
  req.on('end', once);
  req.on('close', once);
  req.on('error', once);
  req.resume();
}

/** Bodies up to this size are read into a buffer allocated once from Content-Length. */
const PRESIZE_MAX_BYTES = 4 * 1024 * 1024;

const unreadable = (): AppError => new AppError('VALIDATION_FAILED', 'the request body could not be read');

/** Copy the body into one buffer; on a problem stop keeping data, drain the rest, then reject. */
/**
 * Body buffers are reused: every byte of a Buffer counts towards V8's old-generation allocation
 * limit until a collection frees it, and a body buffer is held from its first chunk to the answer,
 * across young collections, so a fresh one per delivery is promoted and only a full mark-compact
 * frees it. The pool therefore covers the bodies in flight at once (20 concurrent 1 MB bodies in
 * the benchmark; with 16 MiB, four fresh buffers per twenty deliveries were allocated and dropped).
 *
 * A buffer goes back to the pool as soon as the handler has decided the answer (ReadBody.release), or
 * when the response is closed if it never got that far (errors, aborted uploads); the handler
 * keeps no reference (the scanner copies what it decodes). Sizes are powers of two from 64 KiB;
 * the pool holds at most POOL_MAX_BYTES of idle buffers.
 */
const POOL_MAX_BYTES = 32 * 1024 * 1024;
const pool = new Map<number, Buffer[]>();
let pooledBytes = 0;

function release(backing: Buffer): void {
  if (pooledBytes + backing.length > POOL_MAX_BYTES) return;
  let free = pool.get(backing.length);
  if (!free) pool.set(backing.length, (free = []));
  free.push(backing);
  pooledBytes += backing.length;
}

function takeFromPool(size: number): Buffer | undefined {
  const buffer = pool.get(size)?.pop();
  if (buffer) pooledBytes -= size;
  return buffer;
}

function readInto(req: IncomingMessage, res: ServerResponse, length: number | null, limit: number, digestWhileReading?: DigestWhileReading): Promise<ReadBody> {
  return new Promise((resolve, reject) => {
    // Presized only up to PRESIZE_MAX_BYTES: a client announcing 25 MB and sending nothing must
    // not make the server reserve 25 MB up front. Larger bodies (rare) are joined once at the end.
    let sized: Buffer | null = null;
    let giveBack = (): void => undefined;
    if (length !== null && length <= PRESIZE_MAX_BYTES) {
      const size = Math.max(64 * 1024, 2 ** Math.ceil(Math.log2(Math.max(length, 1))));
      const backing = takeFromPool(size) ?? Buffer.allocUnsafeSlow(size);
      sized = backing.subarray(0, length);
      let released = false;
      giveBack = (): void => {
        if (released) return;
        released = true;
        release(backing);
      };
      res.once('close', giveBack);
    }
    const chunks: Buffer[] = [];
    let received = 0;
    let failure: AppError | null = null;
    // Hashed as it arrives: every accepted chunk, in order; after a failure nothing is used.
    let digests: BodyDigests | null = null;
    const onData = (chunk: Buffer): void => {
      if (failure) return;
      const end = received + chunk.length;
      if (end > limit) failure = new AppError('PAYLOAD_TOO_LARGE', 'request body is larger than the limit');
      else if (length !== null && end > length) failure = unreadable();
      else {
        if (received === 0 && digestWhileReading) digests = digestWhileReading(req.headers, chunk);
        digests?.update(chunk);
        if (sized) chunk.copy(sized, received);
        else chunks.push(chunk);
      }
      received = end;
    };
    let finished = false;
    const finish = (): void => {
      if (finished) return;
      finished = true;
      req.off('data', onData);
      drainThen(req, () => {
        if (!failure && (!req.complete || (length !== null && received !== length))) failure = unreadable();
        if (failure) return reject(failure);
        resolve({
          bytes: sized ?? (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, received)),
          digests: digests ? (digests as BodyDigests).finish() : NO_DIGESTS,
          release: giveBack,
        });
      });
    };
    req.on('data', onData);
    req.once('end', finish);
    req.once('close', finish);
    req.once('error', finish);
  });
}

/**
 * Inflate a compressed body as it arrives. The wire bytes and the inflated bytes are both capped
 * at `limit`, and every inflated chunk is paid for from the shared budget (given back when the
 * response is done), so nothing grows beyond the limits whatever the compression ratio.
 */
function inflateInto(req: IncomingMessage, res: ServerResponse, inflater: Transform, length: number | null, limit: number, budget: InflateBudget): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let wire = 0;
    let inflated = 0;
    let held = 0;
    let settled = false;
    res.once('close', () => budget.give(held));
    const fail = (error: AppError): void => {
      if (settled) return;
      settled = true;
      chunks.length = 0;
      budget.give(held);
      held = 0;
      req.unpipe(inflater);
      inflater.destroy();
      drainThen(req, () => reject(error));
    };
    req.on('data', (chunk: Buffer) => {
      wire += chunk.length;
      if (wire > limit) fail(new AppError('PAYLOAD_TOO_LARGE', 'request body is larger than the limit'));
      else if (length !== null && wire > length) fail(unreadable());
    });
    inflater.on('data', (chunk: Buffer) => {
      if (settled) return;
      inflated += chunk.length;
      if (inflated > limit) return fail(new AppError('PAYLOAD_TOO_LARGE', 'the inflated request body is larger than the limit'));
      if (!budget.take(chunk.length)) {
        return fail(new AppError('TOO_MANY_REQUESTS', 'too many compressed deliveries at once; retry later', { headers: { 'Retry-After': '5' } }));
      }
      held += chunk.length;
      chunks.push(chunk);
    });
    inflater.once('error', () => fail(unreadable()));
    inflater.once('end', () => {
      if (settled) return;
      if (!req.complete || (length !== null && wire !== length)) return fail(unreadable());
      settled = true;
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, inflated));
    });
    req.once('aborted', () => fail(unreadable()));
    req.once('error', () => fail(unreadable()));
    req.pipe(inflater);
  });
}
