import { apiHeaders, readClientConfig } from '../lib/map.js';
import { offlineDb } from '../lib/offline/db.js';
import { syncOutbox, type SyncResult, type Transport } from '../lib/offline/sync.js';
import { watchTables } from '../lib/offline/watch.js';
import { clientTranslator } from './messages.js';

const DAY_MS = 24 * 3600 * 1000;

/** The transport of the signed-in visitor (its development token, or the session cookie). */
export function transport(): Transport {
  const config = readClientConfig();
  return { config, headers: (extra = {}) => apiHeaders(config, extra) };
}

let running: Promise<SyncResult> | undefined;
let retryTimer: ReturnType<typeof setTimeout> | undefined;
let retryDelay = 2_000;
const listeners = new Set<(result: SyncResult) => void>();

/** Whether this tab is running a sync now. */
export function syncRunning(): boolean {
  return running !== undefined;
}

export function onSynced(listener: (result: SyncResult) => void): void {
  listeners.add(listener);
}

/**
 * Runs a sync now (one at a time per tab; Web Locks make it one at a time across tabs). A network
 * failure retries with a growing delay while the browser says it is online.
 */
export function syncNow(): Promise<SyncResult> {
  if (!readClientConfig().user) return Promise.resolve({ sent: 0, waiting: 0, offline: false });
  running ??= syncOutbox(transport())
    .then((result) => {
      clearTimeout(retryTimer);
      if (result.offline && navigator.onLine) {
        retryTimer = setTimeout(() => void syncNow(), retryDelay);
        retryDelay = Math.min(retryDelay * 2, 60_000);
      } else retryDelay = 2_000;
      for (const listener of listeners) listener(result);
      return result;
    })
    .finally(() => (running = undefined));
  return running;
}

/**
 * On every page: the service worker, persistent storage, the pending-edits badge (live across tabs:
 * Dexie announces every write to the other tabs), the warning about old pending edits, and sync when the network returns.
 */
export function mountOfflineShell(): void {
  const t = clientTranslator();
  if ('serviceWorker' in navigator) void navigator.serviceWorker.register('/sw.js').catch(() => undefined);
  const warnings = document.getElementById('pending-warning');
  void navigator.storage?.persist?.().then((granted) => {
    if (!granted && warnings) warnings.dataset.persist = t('offline.notPersisted');
  });
  const badge = document.getElementById('pending-badge');
  // A count and the oldest entry, not the whole outbox: this runs after every change, also during sync.
  watchTables(
    ['outbox'],
    async () => ({ count: await offlineDb().outbox.count(), oldest: (await offlineDb().outbox.orderBy('seq').first())?.createdAt }),
    ({ count, oldest }) => {
      if (badge) {
        badge.textContent = t('offline.badge', { count });
        badge.dataset.count = String(count);
      }
      if (warnings) warnings.textContent = count > 0 && oldest !== undefined && Date.now() - oldest > DAY_MS ? t('offline.old') : '';
    },
  );
  window.addEventListener('online', () => void syncNow());
  if (navigator.onLine) void syncNow();
}
