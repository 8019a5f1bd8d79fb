import Dexie from 'dexie';
import { offlineDb } from './db.js';

/**
 * Re-reads a query of the offline store when one of its tables changes — in this tab or another
 * (Dexie announces every committed write to the other tabs) — at most once every `gapMs`, always
 * with the newest data. Why not Dexie's liveQuery: it re-runs its query after every single write, so
 * a sync of 500 edits made the pages read the whole outbox and every kept feature 500 times over
 * (quadratic work on the main thread while the sync was running). The first change after a quiet
 * spell is shown at once, so a single edit still updates the badge without delay. The gap grows with
 * the cost of a reading and its rendering (four times it), so a long outbox or feature list never
 * takes more than about a fifth of the main thread while a sync is writing.
 */
export function watchTables<T>(tables: readonly string[], query: () => Promise<T>, show: (value: T) => void, gapMs = 250): () => void {
  const prefixes = tables.map((table) => `idb://${offlineDb().name}/${table}/`);
  let running = false;
  let dirty = false;
  let lastRun = 0;
  let gap = gapMs;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;

  const run = async (): Promise<void> => {
    timer = undefined;
    if (running) {
      dirty = true;
      return;
    }
    running = true;
    dirty = false;
    lastRun = Date.now();
    try {
      const value = await query();
      if (!stopped) show(value);
      gap = Math.max(gapMs, 4 * (Date.now() - lastRun));
    } catch {
      // A failed read (storage closed, quota) leaves the last rendering in place; the next change retries.
    } finally {
      running = false;
      if (dirty && !stopped) schedule();
    }
  };
  const schedule = (): void => {
    if (timer !== undefined || stopped) return;
    timer = setTimeout(() => void run(), Math.max(0, lastRun + gap - Date.now()));
  };
  const onChange = (parts: Record<string, unknown>): void => {
    if (Object.keys(parts).some((part) => prefixes.some((prefix) => part.startsWith(prefix)))) schedule();
  };
  Dexie.on('storagemutated', onChange);
  void run();
  return () => {
    stopped = true;
    clearTimeout(timer);
    Dexie.on('storagemutated').unsubscribe(onChange);
  };
}
