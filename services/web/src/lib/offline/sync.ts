import { EDITABLE_FIELDS, type ClientConfig, type Feature } from '../types.js';
import { offlineDb, type OutboxEntry } from './db.js';
import { mergeNote, threeWayMerge, type MergeInput } from './merge.js';
import { extentOf, updateEntry } from './outbox.js';
import { readProblem, type Problem } from '../problems.js';

/**
 * Sync: the outbox goes to the API in the order the edits were made per feature; the edits of
 * different features are independent, so up to SYNC_POOL features are sent at once.
 * - create: POST with its Idempotency-Key, so a retry after a lost answer replays the first 201;
 * - update: PUT with If-Match of the version the edit started from; a 412 fetches theirs and merges
 *   three-way — one-sided changes merge by themselves and are saved at once (a new version, so the
 *   history shows the merge), fields both changed wait for the user (state "conflict");
 *   a 404 means deleted on the server meanwhile (state "gone": the user may restore it as new);
 * - delete: DELETE with If-Match; already gone counts as done.
 * An entry leaves the outbox in the same IndexedDB transaction that keeps the server's answer, right
 * after that answer arrived: what the API acknowledged is never sent again, whatever happens next.
 * A network failure stops the run and leaves everything in place; the next run starts where it stopped.
 * One tab syncs at a time (Web Locks), since all tabs share the outbox.
 */
export interface SyncResult {
  sent: number;
  waiting: number;
  offline: boolean;
}

export class NetworkFailure extends Error {}

export function requestBody(feature: Feature, withId: boolean): Record<string, unknown> {
  const properties: Record<string, unknown> = {};
  for (const field of EDITABLE_FIELDS) properties[field] = feature.properties[field] ?? null;
  return { type: 'Feature', ...(withId ? { id: feature.id } : {}), geometry: feature.geometry, properties };
}

export function mergeInput(feature: Feature): MergeInput {
  const properties = {} as MergeInput['properties'];
  for (const field of EDITABLE_FIELDS) properties[field] = (feature.properties[field] as string | null | undefined) ?? null;
  return { properties, geometry: feature.geometry };
}

export function fromMergeInput(id: string, input: MergeInput): Feature {
  return { type: 'Feature', id, geometry: input.geometry, properties: { ...input.properties, name: input.properties.name ?? '', kategorie: input.properties.kategorie ?? '' } };
}

export interface Transport {
  config: ClientConfig;
  headers(extra?: Record<string, string>): Record<string, string>;
}

async function call(transport: Transport, method: string, path: string, headers: Record<string, string>, body?: unknown): Promise<Response> {
  let response: Response;
  try {
    response = await fetch(`${transport.config.apiUrl}${path}`, {
      method,
      headers: transport.headers({ accept: 'application/geo+json', ...(body ? { 'content-type': 'application/geo+json' } : {}), ...headers }),
      ...(body ? { body: JSON.stringify(body) } : {}),
      credentials: 'include',
    });
  } catch (error) {
    throw new NetworkFailure(String(error), { cause: error });
  }
  // A session that expired while offline: stop like a network failure, the outbox waits for a sign-in.
  if (response.status === 401) throw new NetworkFailure('not signed in');
  return response;
}

/** Independent features synced at once: a small pool keeps the API busy without flooding it. */
export const SYNC_POOL = 4;

async function keepServerCopy(response: Response): Promise<Feature> {
  const feature = (await response.json()) as Feature;
  await offlineDb().features.put({ id: feature.id, feature, etag: response.headers.get('etag'), storedAt: Date.now(), ...extentOf(feature) });
  return feature;
}

/** The acknowledged answer kept and its entry removed in one transaction (one commit, not two). */
async function acknowledge(response: Response | undefined, seq: number): Promise<void> {
  const db = offlineDb();
  const feature = response ? ((await response.json()) as Feature) : undefined;
  const etag = response?.headers.get('etag') ?? null;
  await db.transaction('rw', db.outbox, db.features, async () => {
    if (feature) await db.features.put({ id: feature.id, feature, etag, storedAt: Date.now(), ...extentOf(feature) });
    await db.outbox.delete(seq);
  });
}

const featurePath = (id: string) => `/api/features/${encodeURIComponent(id)}`;

/** The refusal for the outbox entry: the API's text (for logs and support) and its problem (for the page's wording). */
async function refusal(response: Response): Promise<{ lastError: string; lastProblem: Problem }> {
  const problem = await readProblem(response);
  return { lastError: problem.detail ?? problem.title ?? `HTTP ${response.status}`, lastProblem: problem };
}

/**
 * A refusal that sending again cannot change (4xx: forbidden, invalid, in review): the entry becomes
 * "failed", waits for the user to change or discard it and is not sent again. 5xx and 429 are passing
 * trouble: the entry stays pending and the next sync tries again.
 */
const isFinal = (status: number) => status >= 400 && status < 500 && status !== 429 && status !== 408;

/**
 * Saves a merge result over theirs. The new version is the history's line for the resolved conflict,
 * with a note (X-Edit-Note) naming the fields taken from each side.
 */
export async function saveMerged(transport: Transport, entry: OutboxEntry, merged: Feature): Promise<boolean> {
  const theirs = entry.theirs ? mergeInput(entry.theirs) : mergeInput(merged);
  const note = mergeNote(entry.base ? mergeInput(entry.base) : theirs, entry.body ? mergeInput(entry.body) : mergeInput(merged), theirs, mergeInput(merged));
  const headers: Record<string, string> = { 'x-edit-note': note, ...(entry.theirsEtag ? { 'if-match': entry.theirsEtag } : {}) };
  const response = await call(transport, 'PUT', featurePath(entry.featureId), headers, requestBody(merged, true));
  if (response.ok) {
    await acknowledge(response, entry.seq!);
    return true;
  }
  if (response.status === 412) {
    // Theirs moved again while the user decided: merge anew against the newest.
    await handleConflict(transport, { ...entry, body: merged });
    return false;
  }
  await updateEntry(entry.seq!, await refusal(response));
  return false;
}

async function handleConflict(transport: Transport, entry: OutboxEntry): Promise<void> {
  const current = await call(transport, 'GET', featurePath(entry.featureId), {});
  if (current.status === 404) {
    await updateEntry(entry.seq!, { state: 'gone', body: entry.body });
    return;
  }
  if (!current.ok) {
    await updateEntry(entry.seq!, await refusal(current));
    return;
  }
  const theirsEtag = current.headers.get('etag');
  const theirs = await keepServerCopy(current);
  if (entry.kind === 'delete') {
    await updateEntry(entry.seq!, { state: 'conflict', theirs, theirsEtag });
    return;
  }
  const mine = entry.body!;
  const base = entry.base ?? theirs;
  const outcome = threeWayMerge(mergeInput(base), mergeInput(mine), mergeInput(theirs));
  // The entry keeps mine as it was, so the merge view can show base, mine and theirs side by side.
  await updateEntry(entry.seq!, { state: 'conflict', theirs, theirsEtag });
  if (outcome.conflicts.length === 0) await saveMerged(transport, { ...entry, theirs, theirsEtag }, fromMergeInput(entry.featureId, outcome.merged));
}

async function sendOne(transport: Transport, entry: OutboxEntry): Promise<boolean> {
  if (entry.kind === 'create') {
    const response = await call(transport, 'POST', '/api/features', { 'idempotency-key': entry.idempotencyKey! }, requestBody(entry.body!, true));
    if (response.status === 201 || response.ok) {
      await acknowledge(response, entry.seq!);
      return true;
    }
    await updateEntry(entry.seq!, { state: 'failed', ...(await refusal(response)) });
    return false;
  }
  const ifMatch: Record<string, string> = entry.baseEtag ? { 'if-match': entry.baseEtag } : {};
  if (entry.kind === 'delete') {
    const response = await call(transport, 'DELETE', featurePath(entry.featureId), ifMatch);
    if (response.ok || response.status === 404) {
      await acknowledge(undefined, entry.seq!);
      return true;
    }
    if (response.status === 412) await handleConflict(transport, entry);
    // A refused delete (403 for a non-admin, 409 while in review) used to stay pending: "waiting"
    // for ever and sent again on every sync.
    else await updateEntry(entry.seq!, { ...(isFinal(response.status) ? { state: 'failed' as const } : {}), ...(await refusal(response)) });
    return false;
  }
  const response = await call(transport, 'PUT', featurePath(entry.featureId), ifMatch, requestBody(entry.body!, true));
  if (response.ok) {
    await acknowledge(response, entry.seq!);
    return true;
  }
  if (response.status === 412) await handleConflict(transport, entry);
  else if (response.status === 404) await updateEntry(entry.seq!, { state: 'gone' });
  else await updateEntry(entry.seq!, { ...(isFinal(response.status) ? { state: 'failed' as const } : {}), ...(await refusal(response)) });
  return false;
}

async function runOnce(transport: Transport): Promise<SyncResult> {
  let sent = 0;
  // Features that met a conflict, a refusal or an error in this run: their later edits wait (in
  // order), the other features go on. Kept across passes, so an error that leaves an entry pending
  // is not retried in a loop.
  const blocked = new Set<string>();
  // Read once per pass, not once per edit; a second pass picks up edits made while the first ran.
  for (;;) {
    const entries = await offlineDb().outbox.orderBy('seq').toArray();
    for (const entry of entries) if (entry.state !== 'pending') blocked.add(entry.featureId);
    const perFeature = new Map<string, OutboxEntry[]>();
    for (const entry of entries) {
      if (entry.state !== 'pending' || blocked.has(entry.featureId)) continue;
      const queue = perFeature.get(entry.featureId);
      if (queue) queue.push(entry);
      else perFeature.set(entry.featureId, [entry]);
    }
    if (perFeature.size === 0) return { sent, waiting: entries.length, offline: false };
    // A small pool of workers, each taking one feature's edits at a time and sending them in order.
    const queues = [...perFeature.values()];
    let nextQueue = 0;
    let offline = false;
    const worker = async (): Promise<void> => {
      while (!offline && nextQueue < queues.length) {
        const queue = queues[nextQueue++]!;
        for (const entry of queue) {
          if (offline) return;
          try {
            if (await sendOne(transport, entry)) sent++;
            else {
              blocked.add(entry.featureId);
              break;
            }
          } catch (error) {
            if (!(error instanceof NetworkFailure)) throw error;
            offline = true;
            return;
          }
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(SYNC_POOL, queues.length) }, worker));
    if (offline) return { sent, waiting: await offlineDb().outbox.count(), offline: true };
  }
}

export async function syncOutbox(transport: Transport): Promise<SyncResult> {
  if (typeof navigator !== 'undefined' && navigator.locks) {
    return navigator.locks.request('fp-outbox-sync', () => runOnce(transport));
  }
  return runOnce(transport);
}
