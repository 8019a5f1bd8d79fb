import type { Bbox } from '../../../../shared/features/schema.js';
import type { Feature } from '../types.js';
import { offlineDb, type OutboxEntry, type StoredFeature } from './db.js';

/** A quota (or other storage) failure, raised to the page so the user is told; nothing is dropped. */
export class StorageFailure extends Error {}

async function guarded<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    const name = (error as { name?: string; inner?: { name?: string } }).inner?.name ?? (error as { name?: string }).name;
    throw new StorageFailure(name === 'QuotaExceededError' ? 'quota' : String((error as Error).message), { cause: error });
  }
}

function extentOf(feature: Feature): Pick<StoredFeature, 'minLon' | 'minLat' | 'maxLon' | 'maxLat'> {
  const xs: number[] = [];
  const ys: number[] = [];
  const walk = (value: unknown): void => {
    if (Array.isArray(value) && typeof value[0] === 'number') {
      xs.push(value[0]);
      ys.push(value[1] as number);
    } else if (Array.isArray(value)) value.forEach(walk);
  };
  walk(feature.geometry.coordinates);
  return { minLon: Math.min(...xs), minLat: Math.min(...ys), maxLon: Math.max(...xs), maxLat: Math.max(...ys) };
}

const etagOfVersion = (feature: Feature) => (feature.properties.version !== undefined ? `"${feature.properties.version}"` : null);

/** Server copies seen online; a quota failure here only costs offline coverage, never an edit. */
export async function keepFeatures(features: Feature[]): Promise<void> {
  const now = Date.now();
  await offlineDb()
    .features.bulkPut(features.map((feature) => ({ id: feature.id, feature, etag: etagOfVersion(feature), storedAt: now, ...extentOf(feature) })))
    .catch(() => undefined);
}

export async function storedFeaturesIn(bbox: Bbox | number[]): Promise<Feature[]> {
  const [minLon, minLat, maxLon, maxLat] = bbox as number[];
  const rows = await offlineDb().features.where('minLon').belowOrEqual(maxLon!).toArray();
  return rows.filter((row) => row.maxLon >= minLon! && row.minLat <= maxLat! && row.maxLat >= minLat!).map((row) => row.feature);
}

export async function allStoredFeatures(): Promise<StoredFeature[]> {
  return offlineDb().features.toArray();
}

export async function storedFeature(id: string): Promise<StoredFeature | undefined> {
  return offlineDb().features.get(id);
}

export async function pendingEntries(): Promise<OutboxEntry[]> {
  return offlineDb().outbox.orderBy('seq').toArray();
}

function blankEntry(kind: OutboxEntry['kind'], featureId: string): OutboxEntry {
  const now = Date.now();
  return { kind, featureId, body: null, base: null, baseEtag: null, idempotencyKey: null, createdAt: now, updatedAt: now, state: 'pending', theirs: null, theirsEtag: null, lastError: null };
}

/**
 * Records a create or an edit (any geometry: the editor's drawings offline come here too). Edits coalesce per feature: an edit of a feature created here and not
 * yet synced changes the create itself (one create is sent); a second edit replaces the first but
 * keeps its base, so the merge still compares with what the user started from.
 */
export async function recordSave(feature: Feature, isNew: boolean, startedFrom?: { feature: Feature; etag: string | null }): Promise<void> {
  const db = offlineDb();
  await guarded(() =>
    db.transaction('rw', db.outbox, db.features, async () => {
      const earlier = await db.outbox.where('featureId').equals(feature.id).first();
      const now = Date.now();
      if (earlier && earlier.kind !== 'delete') {
        await db.outbox.update(earlier.seq!, { body: feature, updatedAt: now });
      } else if (isNew) {
        await db.outbox.add({ ...blankEntry('create', feature.id), body: feature, idempotencyKey: crypto.randomUUID() });
      } else {
        // The version the edit started from: the editor knows it (the page it was opened with); else the kept copy.
        const stored = startedFrom ? undefined : await db.features.get(feature.id);
        const base = startedFrom ?? (stored ? { feature: stored.feature, etag: stored.etag } : undefined);
        await db.outbox.add({ ...blankEntry('update', feature.id), body: feature, base: base?.feature ?? null, baseEtag: base?.etag ?? null });
      }
      // The local copy shows the edit on the map and in the list offline.
      const stored = await db.features.get(feature.id);
      await db.features.put({ id: feature.id, feature, etag: stored?.etag ?? null, storedAt: now, ...extentOf(feature) });
    }),
  );
}

/** Records a delete; deleting a feature created here and never synced just forgets it. */
export async function recordDelete(featureId: string): Promise<void> {
  const db = offlineDb();
  await guarded(() =>
    db.transaction('rw', db.outbox, db.features, async () => {
      const earlier = await db.outbox.where('featureId').equals(featureId).toArray();
      const stored = await db.features.get(featureId);
      const created = earlier.find((entry) => entry.kind === 'create');
      await db.outbox.bulkDelete(earlier.map((entry) => entry.seq!));
      if (!created) {
        const base = earlier.find((entry) => entry.base)?.base ?? stored?.feature ?? null;
        const baseEtag = earlier.find((entry) => entry.baseEtag)?.baseEtag ?? stored?.etag ?? null;
        await db.outbox.add({ ...blankEntry('delete', featureId), base, baseEtag });
      }
      await db.features.delete(featureId);
    }),
  );
}

/** Discards one pending edit; the local copy returns to the server's (its base), if there was one. */
export async function discardEntry(seq: number): Promise<void> {
  const db = offlineDb();
  await guarded(() =>
    db.transaction('rw', db.outbox, db.features, async () => {
      const entry = await db.outbox.get(seq);
      if (!entry) return;
      await db.outbox.delete(seq);
      if (entry.kind === 'create') await db.features.delete(entry.featureId);
      else if (entry.base) await db.features.put({ id: entry.featureId, feature: entry.base, etag: entry.baseEtag, storedAt: Date.now(), ...extentOf(entry.base) });
    }),
  );
}

export async function updateEntry(seq: number, changes: Partial<OutboxEntry>): Promise<void> {
  await guarded(() => offlineDb().outbox.update(seq, { ...changes, updatedAt: Date.now() }).then(() => undefined));
}

export async function removeEntry(seq: number): Promise<void> {
  await offlineDb().outbox.delete(seq);
}

export { extentOf };
