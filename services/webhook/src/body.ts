/**
 * Reads the raw webhook body into one Buffer, with as few copies as it can: with a
 * Content-Length (what GitHub, GitLab, Gitea and Forgejo send) the buffer is allocated once at its
 * final size and every chunk is copied into it as it arrives, so nothing is concatenated at the end.
 * Bodies without a length (chunked) are collected and joined once. Over the limit → 413 (before
 * reading, when the announced length says so); a body shorter or longer than announced, or an
 * aborted upload → 400.
 *
 * All bodies in memory at once, over all requests, compressed or not, are paid for from one budget
 * (BodyBudget, WEBHOOK_BODY_BUDGET_BYTES): a body with a Content-Length reserves its whole length
 * before its first byte is read, a chunked one pays chunk by chunk. A request that does not fit is
 * answered 503 with Retry-After and its connection closed, without reading (or, for a chunked one,
 * without reading further): the budget is never exceeded, whatever the number of slow senders.
 *
 * Content-Encoding: gzip (x-gzip), deflate and br are inflated while streaming, before any
 * signature is checked, and the inflated size is capped at the same limit as it grows (a 24 KiB
 * bomb stops at the limit, not at 24 MiB). Inflated bytes held by all requests together are capped
 * too (InflateBudget): beyond it a compressed request gets 429 with Retry-After, so memory stays
 * bounded under many concurrent hostile bodies. Inflated bytes are paid from the body budget as
 * well. Any other encoding → 415, unread.
 *
 * Only Node's request and response are used (Fastify's `request.raw` and `reply.raw`): no
 * framework reads the body before it, so the bytes hashed are the bytes sent.
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
   * The reader is done with the body: return a pooled buffer and the body's share of the budgets now
   * rather than when the response closes, so fewer buffers are held at once. `bytes` must not be
   * read after this (the buffer may already hold another request's body).
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

/** Bodies of at most this many bytes (announced by their Content-Length) count as small. */
export const SMALL_BODY_BYTES = 1024 * 1024;

/** What bodies that are not small may hold of a budget: three quarters; the rest is kept for small ones. */
export const largeBodyShare = (capacity: number): number => Math.floor((capacity * 3) / 4);

/**
 * Bytes of request bodies held in memory at once, over all requests: what a flood of slow bodies
 * can make the server hold is this, not their number times their size.
 *
 * A push is nearly always a few KiB, and an attacker's slow body is as large as it may be: so only
 * bodies that announce at most SMALL_BODY_BYTES may use the whole budget, every other one (larger,
 * chunked or compressed) only largeBodyShare of it. Large slow bodies that fill their share leave a
 * quarter of the budget to the pushes.
 */
export class BodyBudget {
  private used = 0;
  private readonly largeCapacity: number;

  constructor(readonly capacity: number) {
    this.largeCapacity = largeBodyShare(capacity);
  }

  /** Room for a body that announced `bytes`; false (and nothing taken) when it does not fit. */
  reserve(bytes: number): boolean {
    return this.takeUpTo(bytes, bytes <= SMALL_BODY_BYTES ? this.capacity : this.largeCapacity);
  }

  /** Room for a piece of a body whose size was not announced (chunked, or being inflated). */
  take(bytes: number): boolean {
    return this.takeUpTo(bytes, this.largeCapacity);
  }

  give(bytes: number): void {
    this.used = Math.max(0, this.used - bytes);
  }

  get inUse(): number {
    return this.used;
  }

  private takeUpTo(bytes: number, capacity: number): boolean {
    if (this.used + bytes > capacity) return false;
    this.used += bytes;
    return true;
  }
}

/** How long a sender refused for lack of budget is asked to wait before it tries again. */
const BUDGET_RETRY_AFTER_SECONDS = '5';

/**
 * The body budget is spent: 503 with Retry-After, and the connection is closed after the answer so
 * the rest of the body is not read either (keeping the connection would mean reading it to the end).
 */
const budgetExhausted = (): AppError =>
  new AppError('SERVICE_UNAVAILABLE', 'too many request bodies in flight; retry later', { headers: { 'Retry-After': BUDGET_RETRY_AFTER_SECONDS, Connection: 'close' } });

const INFLATERS: Record<string, () => Transform> = {
  gzip: createGunzip,
  'x-gzip': createGunzip,
  deflate: createInflate,
  br: createBrotliDecompress,
};

/** Reads request bodies under the webhook's limits; one per server (the budgets are shared). */
export class BodyReader {
  constructor(
    private readonly limit: number,
    private readonly budget: InflateBudget,
    private readonly digestWhileReading?: DigestWhileReading,
    /** All bodies in memory at once; without one, only each body's own limit bounds them. */
    private readonly bodies: BodyBudget = new BodyBudget(Number.POSITIVE_INFINITY),
  ) {}

  /**
   * The whole body, or an AppError: 413, 415 or 400 once the upload is drained; 429 or 503 (the
   * budgets) at once, with the connection to be closed after the answer.
   */
  read(req: IncomingMessage, res: ServerResponse): Promise<ReadBody> {
    const { limit, budget, bodies } = this;
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
    // Nothing is read before the body has its room: a sender that does not fit is refused unread.
    if (length !== null && encoding === 'identity' && !bodies.reserve(length)) return Promise.reject(budgetExhausted());
    if (encoding === 'identity') return readInto(req, res, length, limit, bodies, this.digestWhileReading);
    return inflateInto(req, res, INFLATERS[encoding]!(), length, limit, budget, bodies);
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

/** Buffers up to this size come from (and go back to) the pool; larger ones are allocated for the body. */
const POOLED_MAX_BYTES = 4 * 1024 * 1024;

const unreadable = (): AppError => new AppError('VALIDATION_FAILED', 'the request body could not be read');

/**
 * Body buffers are reused: every byte of a Buffer counts towards V8's old-generation allocation
 * limit until a collection frees it, and a body buffer is held from its first chunk to the answer,
 * across young collections, so a fresh one per delivery is promoted and only a full mark-compact
 * frees it. The pool therefore covers the bodies in flight at once (20 concurrent 1 MB bodies in
 * the benchmark; with 16 MiB, four fresh buffers per twenty deliveries were allocated and dropped).
 *
 * A buffer goes back to the pool as soon as the handler has decided the answer (ReadBody.release), or
 * when the response is closed if it never got that far (errors, aborted uploads); the handler
 * keeps no reference (the scanner copies what it decodes). Sizes are powers of two from 64 KiB up
 * to POOLED_MAX_BYTES; the pool holds at most POOL_MAX_BYTES of idle buffers.
 */
const POOL_MAX_BYTES = 32 * 1024 * 1024;
const pool = new Map<number, Buffer[]>();
let pooledBytes = 0;

function release(backing: Buffer): void {
  if (backing.length > POOLED_MAX_BYTES || pooledBytes + backing.length > POOL_MAX_BYTES) return;
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

/** A buffer for a body of `length` bytes: pooled when small, else of exactly that size. */
function bufferFor(length: number): Buffer {
  if (length > POOLED_MAX_BYTES) return Buffer.allocUnsafeSlow(length);
  const size = Math.max(64 * 1024, 2 ** Math.ceil(Math.log2(Math.max(length, 1))));
  return takeFromPool(size) ?? Buffer.allocUnsafeSlow(size);
}

/**
 * Copy the body into one buffer; on a problem stop keeping data, drain the rest, then reject (or,
 * when the budget is spent, reject at once: the connection is closed rather than drained).
 *
 * A body with a Content-Length has reserved its length from `bodies` (BodyReader.read) and is read
 * into a buffer of that size, allocated once: the budget has already paid for it, and the pages of
 * a large one only become resident as the body arrives. A chunked body pays chunk by chunk. Either
 * way the budget gets its bytes back when the handler releases the body or the response closes.
 */
function readInto(req: IncomingMessage, res: ServerResponse, length: number | null, limit: number, bodies: BodyBudget, digestWhileReading?: DigestWhileReading): Promise<ReadBody> {
  return new Promise((resolve, reject) => {
    let paid = length ?? 0;
    let sized: Buffer | null = null;
    let backing: Buffer | null = null;
    if (length !== null) {
      backing = bufferFor(length);
      sized = backing.subarray(0, length);
    }
    let released = false;
    const giveBack = (): void => {
      if (released) return;
      released = true;
      bodies.give(paid);
      paid = 0;
      if (backing) release(backing);
    };
    res.once('close', giveBack);
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
      else if (!sized && !bodies.take(chunk.length)) {
        failure = budgetExhausted();
        chunks.length = 0;
        return finish();
      } else {
        if (!sized) paid += chunk.length;
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
      // Out of budget: answer now and close; draining would read the rest of a body refused anyway.
      if (failure?.statusCode === 503) {
        giveBack();
        return reject(failure);
      }
      drainThen(req, () => {
        if (!failure && (!req.complete || (length !== null && received !== length))) failure = unreadable();
        if (failure) {
          giveBack();
          return reject(failure);
        }
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
 * at `limit`, and every inflated chunk is paid for from the shared inflate budget and from the body
 * budget (given back when the handler releases the body or the response is done), so nothing grows
 * beyond the limits whatever the compression ratio.
 */
function inflateInto(req: IncomingMessage, res: ServerResponse, inflater: Transform, length: number | null, limit: number, budget: InflateBudget, bodies: BodyBudget): Promise<ReadBody> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let wire = 0;
    let inflated = 0;
    let held = 0;
    let settled = false;
    const giveBack = (): void => {
      budget.give(held);
      bodies.give(held);
      held = 0;
    };
    res.once('close', giveBack);
    const fail = (error: AppError): void => {
      if (settled) return;
      settled = true;
      chunks.length = 0;
      giveBack();
      req.unpipe(inflater);
      inflater.destroy();
      // Out of body budget: answer now and close (budgetExhausted), rather than read the rest.
      if (error.statusCode === 503) reject(error);
      else drainThen(req, () => reject(error));
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
      if (!bodies.take(chunk.length)) {
        budget.give(chunk.length);
        return fail(budgetExhausted());
      }
      held += chunk.length;
      chunks.push(chunk);
    });
    inflater.once('error', () => fail(unreadable()));
    inflater.once('end', () => {
      if (settled) return;
      if (!req.complete || (length !== null && wire !== length)) return fail(unreadable());
      settled = true;
      resolve({ bytes: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, inflated), digests: NO_DIGESTS, release: giveBack });
    });
    req.once('aborted', () => fail(unreadable()));
    req.once('error', () => fail(unreadable()));
    req.pipe(inflater);
  });
}
