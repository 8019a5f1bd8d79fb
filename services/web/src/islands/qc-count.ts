import { apiHeaders, readClientConfig } from '../lib/map.js';
import { clientTranslator } from './messages.js';

/** While the page is visible; a hidden tab asks again when it is shown. */
const POLL_MS = 15_000;
const CHANNEL = 'fp-qc-queue';

/**
 * Keeps the review queue's count in the navigation fresh for reviewers: asked again after each
 * decision or submission made in any tab of this browser (a BroadcastChannel message, sent by
 * `queueChanged()`), when the tab is shown again, and every POLL_MS while it is visible — for what
 * others submit and decide. Each poll is GET /api/qc/queue/count, one index count; the browser's
 * cache revalidates it with the ETag, so an unchanged count is a 304 with no body.
 */
export function mountQueueCount(): void {
  const link = document.getElementById('qc-nav');
  if (!link || link.dataset.count !== 'live') return;
  const config = readClientConfig();
  const t = clientTranslator();
  let asking = false;
  const refresh = async (): Promise<void> => {
    if (asking) return;
    asking = true;
    try {
      const response = await fetch(`${config.apiUrl}/api/qc/queue/count`, { credentials: 'include', headers: apiHeaders(config, { accept: 'application/json' }) });
      if (response.ok) link.textContent = t('nav.qcCount', { count: ((await response.json()) as { count: number }).count });
    } catch {
      // Offline or the API away: the last count stays; the next poll tries again.
    } finally {
      asking = false;
    }
  };
  const channel = typeof BroadcastChannel === 'undefined' ? undefined : new BroadcastChannel(CHANNEL);
  channel?.addEventListener('message', () => void refresh());
  addEventListener('fp-qc-queue-changed', () => void refresh());
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible') void refresh();
  });
  setInterval(() => {
    if (document.visibilityState === 'visible') void refresh();
  }, POLL_MS);
}

/** Tells this tab and the others that the queue changed (a decision, a submission). */
export function queueChanged(): void {
  dispatchEvent(new Event('fp-qc-queue-changed'));
  if (typeof BroadcastChannel === 'undefined') return;
  const channel = new BroadcastChannel(CHANNEL);
  channel.postMessage('changed');
  channel.close();
}
