/**
 * The QC desk in headless Chromium (`npm run bench -- qc-desk-web`): the time from a reviewer's
 * decision to the next item shown, at a queue of 1 000 items, as a person experiences it.
 *
 * - decide + next: on /qc/{item}, once the page is quiet (the desk has fetched the next item's review
 *   view meanwhile, as it does while a reviewer reads), press `a`; once "Freigegeben." shows, press
 *   `n`; stop when the next item shows its claim ("Sie prüfen dieses Objekt") — shown in place, no
 *   navigation: the claim request and the swap of the page's main content.
 * - baseline: the decision alone on the same desk: press `a` on another item's page (opened untimed)
 *   and stop when "Freigegeben." shows.
 * Interleaved, the order alternating, in one run; p50 and p99 and the ratios. The queue holds at least
 * 1 000 items throughout. Needs Chromium (skips with one line without it); database as in support.ts.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { Browser, Page } from 'playwright-core';
import { migrate } from '../services/api/src/db/migrate.js';
import { ensureWebBuild, startWebServer } from '../services/web/launch.js';
import { CHROMIUM, launchChromium, startTileServer } from '../services/web/test/harness.js';
import { freePort } from '../services/shared/testing/ports.js';
import { openBenchDatabase, startApiProcess } from './support.js';
import { reportDecisionToNext, seedQueue } from './qc-queue.js';

const QUEUE = 1_000;
const ROUNDS = process.env.BENCH_QUICK === '1' ? 6 : 30;

async function main(): Promise<void> {
  if (!existsSync(CHROMIUM)) {
    console.log(`skipping the QC desk browser benchmark: no Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`);
    return;
  }
  ensureWebBuild((message) => console.log(message));
  const database = await openBenchDatabase('qcdeskweb');
  const pool = new pg.Pool({ connectionString: database.url, max: 2 });
  // Dropping the scratch database at the end ends idle connections; that is expected, not a crash.
  pool.on('error', () => undefined);
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-qc-desk-web-'));
  const tiles = await startTileServer();
  const webPort = await freePort();
  const webOrigin = `http://127.0.0.1:${webPort}`;
  let browser: Browser | undefined;
  let api: Awaited<ReturnType<typeof startApiProcess>> | undefined;
  let web: Awaited<ReturnType<typeof startWebServer>> | undefined;
  try {
    await migrate(pool);
    const ids = await seedQueue(pool, QUEUE + 2 * ROUNDS + 2);
    console.log(`database: ${database.kind}; queue of ${ids.length} items seeded`);
    api = await startApiProcess({ DATABASE_URL: database.url, DATA_DIR: dataDir, CORS_ORIGINS: webOrigin, WORKER_ENABLED: 'false', NODE_ENV: 'development' });
    web = await startWebServer({ port: webPort, env: { API_PUBLIC_URL: api.base, PUBLIC_BASE_URL: webOrigin, BASEMAP_URL: tiles.url, NODE_ENV: 'development' } });
    const webUrl = web.url;
    browser = await launchChromium();
    const context = await browser.newContext({ locale: 'de-DE', viewport: { width: 1100, height: 900 } });
    const page = await context.newPage();
    await page.goto(`${web.url}/login?as=reviewer&sub=bench-reviewer`);
    await page.waitForURL(`${web.url}/`);

    const claimShown = (p: Page) => p.getByRole('status').filter({ hasText: 'Sie prüfen dieses Objekt' }).waitFor({ timeout: 60_000 });
    const approvedShown = (p: Page) => p.getByRole('status').filter({ hasText: 'Freigegeben.' }).waitFor({ timeout: 60_000 });
    // A reviewer reads before deciding; meanwhile the desk prefetches. Both runs wait the same way.
    const focusPage = async (p: Page) => {
      await p.waitForLoadState('networkidle');
      await p.getByRole('heading', { level: 1 }).click();
    };

    const tail = ids.slice().reverse();
    const withNext: number[] = [];
    const alone: number[] = [];
    // The desk path starts at the head of the queue; the baseline decides items from its tail.
    await page.goto(`${webUrl}/qc/${ids[0]}`);
    await claimShown(page);
    let current = ids[0]!;
    const deskRun = async () => {
      await page.goto(`${webUrl}/qc/${current}`);
      await claimShown(page);
      await focusPage(page);
      const started = performance.now();
      await page.keyboard.press('a');
      await approvedShown(page);
      await page.keyboard.press('n');
      await page.waitForURL((url) => url.pathname.startsWith('/qc/') && url.pathname !== `/qc/${current}`);
      await claimShown(page);
      withNext.push(performance.now() - started);
      current = decodeURIComponent(new URL(page.url()).pathname.split('/').pop()!);
    };
    const aloneRun = async () => {
      const id = tail.shift()!;
      await page.goto(`${webUrl}/qc/${id}`);
      await claimShown(page);
      await focusPage(page);
      const started = performance.now();
      await page.keyboard.press('a');
      await approvedShown(page);
      alone.push(performance.now() - started);
    };
    for (let i = 0; i < ROUNDS; i++) {
      if (i % 2 === 0) {
        await deskRun();
        await aloneRun();
      } else {
        await aloneRun();
        await deskRun();
      }
    }
    await reportDecisionToNext(pool, { title: 'QC desk in Chromium: decision → next item shown', queue: QUEUE, rounds: ROUNDS, withNext, alone });
  } finally {
    await browser?.close();
    await web?.close();
    await api?.stop();
    tiles.server.close();
    await pool.end();
    await database.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
