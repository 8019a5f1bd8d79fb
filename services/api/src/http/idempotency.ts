import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest, onResponseAsyncHookHandler, onSendAsyncHookHandler } from 'fastify';
import type { Logger } from 'pino';
import { principalOf } from '../auth/middleware.js';
import { AppError } from '../../../shared/errors.js';
import { query as run, type Db, type Query } from '../db/pool.js';
import { getFeature } from '../features/queries.js';
import { etagOf } from '../features/service.js';
import type { Hook } from './fastify.js';

/**
 * Idempotency-Key for POST /api/features (docs/api.md "Idempotency-Key"), so an offline client that
 * retries a create after a lost answer makes one feature, not two.
 *
 * - Same caller, same key, same body → the first request's 201 is replayed (Idempotent-Replayed: true).
 *   Same key with another body (or path) → 422. Keys are scoped per caller and kept 24 h.
 * - The first request reserves the key (a pending row). A duplicate arriving meanwhile waits for it
 *   and then replays its answer; one still pending after `waitMs` gets 409 with Retry-After.
 * - A request that failed (4xx/5xx) releases its key: nothing was created, so a retry may proceed.
 * - A create without an id in the body gets one derived from (caller, key, reservation): should the
 *   process die after the insert committed but before the answer was recorded, the request that
 *   takes over the stale reservation finds that feature and answers with it instead of creating a
 *   second one; with an id in the body, the primary key does the same job.
 */
export const IDEMPOTENCY_HEADER = 'Idempotency-Key';
export const KEY_RETENTION_HOURS = 24;
const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

export interface IdempotencyOptions {
  logger?: Logger;
  /** How long a duplicate waits for the first request before 409 (default 10 s). */
  waitMs?: number;
  /** A pending reservation older than this is taken to be abandoned by a crashed process (default 60 s). */
  leaseSeconds?: number;
}

interface StoredResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

interface KeyRow {
  id: string;
  requestTarget: string;
  requestHash: string;
  responseStatus: number | null;
  responseHeaders: Record<string, string> | null;
  responseBody: string | null;
  locked: boolean;
}

/** Headers of the first answer that a replay repeats. */
const REPLAYED_HEADERS = ['location', 'etag', 'content-type'];

/**
 * The three steps of a create with Idempotency-Key, spread into the route's options: preHandler
 * (after the body is validated: reserve the key, or replay/refuse), onSend (record a 201 before it
 * leaves) and onResponse (an error answer releases the key).
 */
export interface IdempotencySteps {
  preHandler: Hook;
  onSend: onSendAsyncHookHandler;
  onResponse: onResponseAsyncHookHandler;
}

export function idempotentCreate(db: Db, options: IdempotencyOptions = {}): IdempotencySteps {
  const waitMs = options.waitMs ?? 10_000;
  const leaseSeconds = options.leaseSeconds ?? 60;
  /** The reservation each request holds, and whether its answer was recorded. */
  const held = new WeakMap<FastifyRequest, { id: string; recorded: boolean }>();

  const preHandler: Hook = async (request, reply) => {
    const header = request.headers['idempotency-key'];
    const key = Array.isArray(header) ? header[0] : header;
    if (key === undefined) return;
    if (!KEY_PATTERN.test(key)) {
      throw new AppError('VALIDATION_FAILED', `invalid ${IDEMPOTENCY_HEADER}: must be 1 to 255 visible ASCII characters`, {
        fields: [{ field: IDEMPOTENCY_HEADER, message: 'must be 1 to 255 visible ASCII characters' }],
      });
    }
    const caller = principalOf(request).id;
    if (caller === null) return; // only authenticated callers create; the route refuses the rest
    const path = pathOf(request);
    // As recorded since the first version (Express' baseUrl + path): the collection with one trailing slash.
    const target = `${request.method} ${withoutTrailingSlashes(path)}/`;
    const hash = createHash('sha256').update(canonicalJson(request.body)).digest('hex');

    let reservation: { id: string; tookOver: boolean } | undefined;
    const deadline = Date.now() + waitMs;
    for (;;) {
      reservation = await reserve(db, caller, key, target, hash, leaseSeconds);
      if (reservation) break;
      const row = await readKey(db, caller, key);
      if (!row) continue; // released or expired just now: try to reserve again
      if (row.requestHash !== hash || row.requestTarget !== target) {
        throw new AppError('IDEMPOTENCY_KEY_REUSED', `this ${IDEMPOTENCY_HEADER} was used for a different request; use a new key for a new request`, { statusCode: 422 });
      }
      if (row.responseStatus !== null) return replay(reply, { status: row.responseStatus, headers: row.responseHeaders ?? {}, body: row.responseBody ?? '' });
      if (!row.locked) {
        reservation = await takeOver(db, caller, key, leaseSeconds);
        if (reservation) break;
        continue;
      }
      if (Date.now() >= deadline) {
        throw new AppError('CONFLICT', `a request with this ${IDEMPOTENCY_HEADER} is still in progress; retry shortly`, { headers: { 'Retry-After': '1' } });
      }
      await new Promise((resolve) => setTimeout(resolve, 25));
    }

    const body = request.body as Record<string, unknown> | null;
    const isObject = body !== null && typeof body === 'object' && !Array.isArray(body);
    if (isObject && body.id === undefined) body.id = derivedId(caller, key, reservation.id);
    if (reservation.tookOver && isObject && typeof body.id === 'string') {
      // The previous holder may have created the feature and died before recording the answer.
      const existing = await createdEarlier(db, body.id, caller, path);
      if (existing) {
        await store(db, reservation.id, existing).catch((error: unknown) => options.logger?.warn({ err: error }, 'could not record an idempotent answer'));
        return replay(reply, existing, false);
      }
    }
    held.set(request, { id: reservation.id, recorded: false });
  };

  // A 201 is recorded before it leaves; a failure to record is logged (a retry finds the feature by its id).
  const onSend: onSendAsyncHookHandler = async (request, reply, payload) => {
    const reservation = held.get(request);
    if (!reservation || reservation.recorded || reply.statusCode !== 201) return payload;
    reservation.recorded = true;
    const headers: Record<string, string> = {};
    for (const name of REPLAYED_HEADERS) {
      const value = reply.getHeader(name);
      if (value !== undefined) headers[name] = String(value);
    }
    const text = Buffer.isBuffer(payload) ? payload.toString('utf8') : String(payload);
    await store(db, reservation.id, { status: 201, headers, body: text }).catch((error: unknown) =>
      options.logger?.warn({ err: error }, 'could not record an idempotent answer; a retry will find the feature by its id'),
    );
    return payload;
  };

  // Any error answer releases the key: nothing was created, so a retry may proceed.
  const onResponse: onResponseAsyncHookHandler = async (request, reply) => {
    const reservation = held.get(request);
    if (!reservation || reservation.recorded || reply.statusCode < 400) return;
    await run(db, releaseKey(reservation.id)).catch((error: unknown) => options.logger?.warn({ err: error }, 'could not release an idempotency key'));
  };

  return { preHandler, onSend, onResponse };
}

/** The request's path without its query (the target a key is bound to, and the base of Location). */
function pathOf(request: FastifyRequest): string {
  const end = request.url.indexOf('?');
  return end === -1 ? request.url : request.url.slice(0, end);
}

function withoutTrailingSlashes(path: string): string {
  let end = path.length;
  while (end > 0 && path.charCodeAt(end - 1) === 0x2f) end--;
  return path.slice(0, end);
}

function replay(reply: FastifyReply, stored: StoredResponse, replayed = true): FastifyReply {
  for (const [name, value] of Object.entries(stored.headers)) reply.header(name, value);
  if (replayed) reply.header('Idempotent-Replayed', 'true');
  return reply.code(stored.status).send(stored.body);
}

async function reserve(db: Db, caller: string, key: string, target: string, hash: string, leaseSeconds: number): Promise<{ id: string; tookOver: boolean } | undefined> {
  // Expired keys go first (this caller's, so the key is free again, and a few others' as upkeep).
  await run(db, purgeExpired(caller, key));
  const { rows } = await run(db, insertKey(caller, key, target, hash, leaseSeconds));
  const id = (rows[0] as { id: string } | undefined)?.id;
  return id === undefined ? undefined : { id, tookOver: false };
}

async function takeOver(db: Db, caller: string, key: string, leaseSeconds: number): Promise<{ id: string; tookOver: boolean } | undefined> {
  const { rows } = await run(db, takeOverKey(caller, key, leaseSeconds));
  const id = (rows[0] as { id: string } | undefined)?.id;
  return id === undefined ? undefined : { id, tookOver: true };
}

async function readKey(db: Db, caller: string, key: string): Promise<KeyRow | undefined> {
  const { rows } = await run(db, selectKey(caller, key));
  return rows[0] as KeyRow | undefined;
}

async function store(db: Db, reservationId: string, response: StoredResponse): Promise<void> {
  await run(db, storeResponse(reservationId, response));
}

async function createdEarlier(db: Db, id: string, caller: string, collectionPath: string): Promise<StoredResponse | undefined> {
  const { rows } = await run(db, { text: `SELECT f.created_by AS "createdBy" FROM features.features f WHERE f.id = $1::text`, values: [id] });
  if ((rows[0] as { createdBy: string | null } | undefined)?.createdBy !== caller) return undefined;
  const feature = await run(db, getFeature(id));
  const row = feature.rows[0] as { version: number; featureJson: string } | undefined;
  if (!row) return undefined;
  return { status: 201, headers: { location: `${withoutTrailingSlashes(collectionPath)}/${encodeURIComponent(id)}`, etag: etagOf(row.version), 'content-type': 'application/geo+json; charset=utf-8' }, body: row.featureJson };
}

/** A UUID-shaped (version 8, RFC 9562) id from the caller, the key and the reservation. */
export function derivedId(caller: string, key: string, reservationId: string): string {
  const hex = createHash('sha256').update(`${caller}\u0000${key}\u0000${reservationId}`).digest('hex');
  const variant = ((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/** JSON with object keys sorted, so the same body with its members in another order counts as the same. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) {
    // Arrays keep their order: one of numbers (a position) is JSON.stringify's, without a call per element.
    if (value.every((v) => v === null || typeof v !== 'object')) return JSON.stringify(value);
    return `[${value.map(canonicalJson).join(',')}]`;
  }
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

// --- SQL ----------------------------------------------------------------------------------------------

function purgeExpired(caller: string, key: string): Query {
  return {
    text: `
      DELETE FROM http.idempotency_keys k
      WHERE k.expires_at <= now()
        AND ((k.caller = $1::text AND k.key = $2::text)
             OR k.id IN (SELECT e.id FROM http.idempotency_keys e WHERE e.expires_at <= now() ORDER BY e.expires_at LIMIT 20))`,
    values: [caller, key],
  };
}

function insertKey(caller: string, key: string, target: string, hash: string, leaseSeconds: number): Query {
  return {
    text: `
      INSERT INTO http.idempotency_keys (caller, key, request_target, request_hash, locked_until, expires_at)
      VALUES ($1::text, $2::text, $3::text, $4::text, now() + make_interval(secs => $5::int), now() + make_interval(hours => $6::int))
      ON CONFLICT (caller, key) DO NOTHING
      RETURNING id`,
    values: [caller, key, target, hash, leaseSeconds, KEY_RETENTION_HOURS],
  };
}

function selectKey(caller: string, key: string): Query {
  return {
    text: `
      SELECT k.id, k.request_target AS "requestTarget", k.request_hash AS "requestHash", k.response_status AS "responseStatus",
             k.response_headers AS "responseHeaders", k.response_body AS "responseBody", k.locked_until > now() AS locked
      FROM http.idempotency_keys k WHERE k.caller = $1::text AND k.key = $2::text AND k.expires_at > now()`,
    values: [caller, key],
  };
}

/** A pending reservation whose lease ran out: its request died. Only one taker wins. */
function takeOverKey(caller: string, key: string, leaseSeconds: number): Query {
  return {
    text: `
      UPDATE http.idempotency_keys k SET locked_until = now() + make_interval(secs => $3::int)
      WHERE k.caller = $1::text AND k.key = $2::text AND k.response_status IS NULL AND k.locked_until <= now() AND k.expires_at > now()
      RETURNING k.id`,
    values: [caller, key, leaseSeconds],
  };
}

function storeResponse(reservationId: string, response: StoredResponse): Query {
  return {
    text: `UPDATE http.idempotency_keys SET response_status = $2::int, response_headers = $3::jsonb, response_body = $4::text WHERE id = $1::bigint`,
    values: [reservationId, response.status, JSON.stringify(response.headers), response.body],
  };
}

function releaseKey(reservationId: string): Query {
  return { text: `DELETE FROM http.idempotency_keys WHERE id = $1::bigint AND response_status IS NULL`, values: [reservationId] };
}

