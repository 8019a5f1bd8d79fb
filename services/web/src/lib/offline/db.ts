import Dexie, { type EntityTable } from 'dexie';
import type { Feature } from '../types.js';
import type { Problem } from '../problems.js';

/**
 * The browser's offline store (IndexedDB through Dexie), one per origin and so shared by every tab:
 * - features: the last known server copy of every feature the user has seen (map areas, list, pages),
 *   with its ETag, so the map and the list work without network;
 * - outbox: the edits made here and not yet confirmed by the API, in the order they were made (seq).
 *   An entry leaves the outbox only when the API has answered it (or the user discards it).
 */
export interface StoredFeature {
  id: string;
  feature: Feature;
  etag: string | null;
  /** The bounding box, for "which features are in this map view" offline. */
  minLon: number;
  minLat: number;
  maxLon: number;
  maxLat: number;
  storedAt: number;
}

export type OutboxKind = 'create' | 'update' | 'delete';
/** pending: waits for sync; conflict: a 412 awaits the merge; gone: deleted on the server meanwhile; failed: refused (4xx), to change or discard. */
export type OutboxState = 'pending' | 'conflict' | 'gone' | 'failed';

export interface OutboxEntry {
  seq?: number;
  kind: OutboxKind;
  featureId: string;
  /** The feature to send (create, update); the merged result after a conflict. */
  body: Feature | null;
  /** The server copy the edit started from (update, delete): the merge base and the If-Match. */
  base: Feature | null;
  baseEtag: string | null;
  /** Sent as Idempotency-Key with a create, so a retry after a lost answer creates nothing twice. */
  idempotencyKey: string | null;
  createdAt: number;
  updatedAt: number;
  state: OutboxState;
  /** The server's version met by a 412 (the third side of the merge), with its ETag. */
  theirs: Feature | null;
  theirsEtag: string | null;
  lastError: string | null;
  /** The API's refusal behind lastError (its code), so the page words it in the reader's language. */
  lastProblem?: Problem | null;
}

export class OfflineDatabase extends Dexie {
  features!: EntityTable<StoredFeature, 'id'>;
  outbox!: EntityTable<OutboxEntry, 'seq'>;
  constructor(name = 'fp-offline') {
    super(name);
    this.version(1).stores({ features: 'id, minLon, maxLon', outbox: '++seq, featureId, state' });
  }
}

let shared: OfflineDatabase | undefined;
export function offlineDb(): OfflineDatabase {
  shared ??= new OfflineDatabase();
  return shared;
}
