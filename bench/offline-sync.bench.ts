/**
 * Offline sync throughput: an outbox of 500 edits (PUT with If-Match, one after the other, each
 * confirmed in IndexedDB) synced by the web app in headless Chromium against the API on a real
 * database, against the baseline of the same 500 requests sent directly by fetch from the same page.
 * Interleaved rounds; the ratio is outbox time / direct time (1.0 = no overhead).
 *
 * Needs Chromium and TEST_DATABASE_URL (the web test harness); skips with one line without them.
 */
import type { Page } from 'playwright-core';
import { launchChromium, missingForBrowserTests, startWebStack } from '../services/web/test/harness.js';
import { median, printTable, ratio } from './stats.js';

const EDITS = Number(process.env.BENCH_OFFLINE_EDITS ?? 500);
const ROUNDS = Number(process.env.BENCH_OFFLINE_ROUNDS ?? 3);

interface Seeded {
  id: string;
  lon: number;
  version: number;
}
const body = (feature: Seeded, name: string) => ({
  type: 'Feature',
  id: feature.id,
  geometry: { type: 'Point', coordinates: [feature.lon, 52.5] },
  properties: { name, kategorie: 'denkmal', adresse: null, telefon: null },
});

/** Puts the edits into the page's outbox (IndexedDB fp-offline) as the outbox itself would. */
async function fillOutbox(page: Page, features: Seeded[], name: string): Promise<void> {
  const entries = features.map((feature) => {
    const now = Date.now();
    const edited = { ...body(feature, name), properties: { ...body(feature, name).properties, version: feature.version } };
    return { kind: 'update', featureId: feature.id, body: edited, base: edited, baseEtag: `"${feature.version}"`, idempotencyKey: null, createdAt: now, updatedAt: now, state: 'pending', theirs: null, theirsEtag: null, lastError: null };
  });
  await page.evaluate(
    (rows) =>
      new Promise<void>((resolve, reject) => {
        const g = globalThis as unknown as { indexedDB: { open(name: string): { onsuccess: (() => void) | null; onerror: (() => void) | null; result: unknown } } };
        const request = g.indexedDB.open('fp-offline');
        request.onerror = () => reject(new Error('open failed'));
        request.onsuccess = () => {
          const db = request.result as { transaction(store: string, mode: string): { objectStore(n: string): { add(v: unknown): void }; oncomplete: (() => void) | null; onerror: (() => void) | null } };
          const tx = db.transaction('outbox', 'readwrite');
          for (const row of rows) tx.objectStore('outbox').add(row);
          tx.oncomplete = () => resolve();
          tx.onerror = () => reject(new Error('write failed'));
        };
      }),
    entries,
  );
}

async function main(): Promise<void> {
  const missing = missingForBrowserTests();
  if (missing) {
    console.log(`skipping offline-sync.bench.ts: ${missing}`);
    return;
  }
  const stack = await startWebStack();
  const browser = await launchChromium();
  try {
    const token = await stack.token('admin', 'bench');
    const features: Seeded[] = [];
    for (let i = 0; i < EDITS; i++) {
      const lon = 13.3 + i * 0.0001;
      const created = await stack.api<{ id: string }>('POST', '/api/features', { token, body: { type: 'Feature', geometry: { type: 'Point', coordinates: [lon, 52.5] }, properties: { name: `Objekt ${i}`, kategorie: 'denkmal' } } });
      features.push({ id: created.body.id, lon, version: 1 });
    }
    const context = await browser.newContext({ locale: 'de-DE' });
    const page = await context.newPage();
    await page.goto(`${stack.webUrl}/login?as=admin&sub=bench`);
    await page.waitForURL(`${stack.webUrl}/`);
    await page.goto(`${stack.webUrl}/offline`);
    const outboxTimes: number[] = [];
    const directTimes: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      // Outbox: fill, then "Jetzt synchronisieren" until the status reports all sent.
      await fillOutbox(page, features, `Outbox ${round}`);
      await page.evaluate(() => {
        (globalThis as unknown as { document: { getElementById(id: string): { textContent: string } } }).document.getElementById('sync-status').textContent = '';
      });
      const started = performance.now();
      await page.getByRole('button', { name: 'Jetzt synchronisieren' }).click();
      await page.getByText(`${EDITS} Änderung(en) übertragen`).waitFor({ timeout: 600_000 });
      outboxTimes.push(performance.now() - started);
      for (const feature of features) feature.version++;

      // Direct: the same PUTs by fetch from the same page, one after the other.
      const requests = features.map((feature) => ({ url: `${stack.apiUrl}/api/features/${encodeURIComponent(feature.id)}`, etag: `"${feature.version}"`, body: JSON.stringify(body(feature, `Direct ${round}`)) }));
      const direct = await page.evaluate(
        async ({ requests, token }) => {
          const start = performance.now();
          for (const request of requests) {
            const response = await fetch(request.url, { method: 'PUT', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/geo+json', accept: 'application/geo+json', 'if-match': request.etag }, body: request.body });
            if (!response.ok) throw new Error(`direct PUT answered ${response.status}`);
            await response.json();
          }
          return performance.now() - start;
        },
        { requests, token },
      );
      directTimes.push(direct);
      for (const feature of features) feature.version++;
    }
    const outbox = median(outboxTimes);
    const direct = median(directTimes);
    printTable([
      { what: `sync of a ${EDITS}-edit outbox (median of ${ROUNDS})`, ms: outbox.toFixed(0), 'edits/s': ((EDITS / outbox) * 1000).toFixed(0) },
      { what: `the same ${EDITS} PUTs sent directly (baseline)`, ms: direct.toFixed(0), 'edits/s': ((EDITS / direct) * 1000).toFixed(0) },
    ]);
    console.log(`throughput ratio (direct / outbox): ${ratio(direct, outbox)}; outbox time / direct time: ${ratio(outbox, direct)}`);
  } finally {
    await browser.close();
    await stack.close();
  }
}

await main();
