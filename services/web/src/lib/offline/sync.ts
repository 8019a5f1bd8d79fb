import { EDITABLE_FIELDS, type ClientConfig, type Feature } from '../types.js';
import { offlineDb, type OutboxEntry } from './db.js';
import { threeWayMerge, type MergeInput } from './merge.js';
import { extentOf, removeEntry, updateEntry } from './outbox.js';

/**
 * Sync: the outbox goes to the API in the order the edits were made, one request at a time.
 * - create: POST with its Idempotency-Key, so a retry after a lost answer replays the first 201;
 * - update: PUT with If-Match of the version the edit started from; a 412 fetches theirs and merges
 *   three-way — one-sided changes merge by themselves and are saved at once (a new version, so the
 *   history shows the merge), fields both changed wait for the user (state "conflict");
 *   a 404 means deleted on the server meanwhile (state "gone": the user may restore it as new);
 * - delete: DELETE with If-Match; already gone counts as done.
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

async function keepServerCopy(response: Response): Promise<Feature> {
  const feature = (await response.json()) as Feature;
  await offlineDb().features.put({ id: feature.id, feature, etag: response.headers.get('etag'), storedAt: Date.now(), ...extentOf(feature) });
  return feature;
}

const featurePath = (id: string) => `/api/features/${encodeURIComponent(id)}`;

async function problemText(response: Response): Promise<string> {
  const problem = (await response.json().catch(() => ({}))) as { detail?: string; title?: string };
  return problem.detail ?? problem.title ?? `HTTP ${response.status}`;
}

/** Saves a merge result over theirs; the new version is the history's line for the resolved conflict. */
export async function saveMerged(transport: Transport, entry: OutboxEntry, merged: Feature): Promise<boolean> {
  const response = await call(transport, 'PUT', featurePath(entry.featureId), entry.theirsEtag ? { 'if-match': entry.theirsEtag } : {}, requestBody(merged, true));
  if (response.ok) {
    await keepServerCopy(response);
    await removeEntry(entry.seq!);
    return true;
  }
  if (response.status === 412) {
    // Theirs moved again while the user decided: merge anew against the newest.
    await handleConflict(transport, { ...entry, body: merged });
    return false;
  }
  await updateEntry(entry.seq!, { lastError: await problemText(response) });
  return false;
}

async function handleConflict(transport: Transport, entry: OutboxEntry): Promise<void> {
  const current = await call(transport, 'GET', featurePath(entry.featureId), {});
  if (current.status === 404) {
    await updateEntry(entry.seq!, { state: 'gone', body: entry.body });
    return;
  }
  if (!current.ok) {
    await updateEntry(entry.seq!, { lastError: await problemText(current) });
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
      await keepServerCopy(response);
      await removeEntry(entry.seq!);
      return true;
    }
    await updateEntry(entry.seq!, { state: 'failed', lastError: await problemText(response) });
    return false;
  }
  const ifMatch: Record<string, string> = entry.baseEtag ? { 'if-match': entry.baseEtag } : {};
  if (entry.kind === 'delete') {
    const response = await call(transport, 'DELETE', featurePath(entry.featureId), ifMatch);
    if (response.ok || response.status === 404) {
      await removeEntry(entry.seq!);
      return true;
    }
    if (response.status === 412) await handleConflict(transport, entry);
    else await updateEntry(entry.seq!, { lastError: await problemText(response) });
    return false;
  }
  const response = await call(transport, 'PUT', featurePath(entry.featureId), ifMatch, requestBody(entry.body!, true));
  if (response.ok) {
    await keepServerCopy(response);
    await removeEntry(entry.seq!);
    return true;
  }
  if (response.status === 412) await handleConflict(transport, entry);
  else if (response.status === 404) await updateEntry(entry.seq!, { state: 'gone' });
  else await updateEntry(entry.seq!, { state: 'failed', lastError: await problemText(response) });
  return false;
}

async function runOnce(transport: Transport): Promise<SyncResult> {
  let sent = 0;
  const blocked = new Set<string>();
  // Read once per pass, not once per edit (an outbox of 500 would be read 500 times); a second pass
  // picks up edits made while the first ran.
  for (;;) {
    const entries = await offlineDb().outbox.orderBy('seq').toArray();
    for (const entry of entries) if (entry.state !== 'pending') blocked.add(entry.featureId);
    let sentThisPass = 0;
    for (const [index, entry] of entries.entries()) {
      // In order; a feature waiting for the user holds back its own later edits, not the others'.
      if (entry.state !== 'pending' || blocked.has(entry.featureId)) continue;
      try {
        if (await sendOne(transport, entry)) sentThisPass++;
        else blocked.add(entry.featureId);
      } catch (error) {
        if (error instanceof NetworkFailure) return { sent: sent + sentThisPass, waiting: entries.length - index, offline: true };
        throw error;
      }
    }
    sent += sentThisPass;
    const remaining = await offlineDb().outbox.toArray();
    if (!remaining.some((entry) => entry.state === 'pending' && !blocked.has(entry.featureId))) return { sent, waiting: remaining.length, offline: false };
  }
}

export async function syncOutbox(transport: Transport): Promise<SyncResult> {
  if (typeof navigator !== 'undefined' && navigator.locks) {
    return navigator.locks.request('fp-outbox-sync', () => runOnce(transport));
  }
  return runOnce(transport);
}
