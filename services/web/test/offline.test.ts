/**
 * Offline editing in a real headless Chromium against the real API on PostGIS: the service worker
 * opens the site without network, edits go to the durable outbox (surviving a reload and closing the
 * browser), a second browser edits the same feature online meanwhile, and back online the sync sends
 * everything once — even when the first create's answer is lost — and the conflict is merged field
 * by field, each step in the feature's history.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { threeWayMerge } from '../src/lib/offline/merge.js';
import { CHROMIUM, launchChromium, missingForBrowserTests, repoRoot, seriousViolations, startWebStack, type WebStack } from './harness.js';

const missing = missingForBrowserTests();
if (missing) console.log(`skipping the offline editing browser test: ${missing}`);

const SCREENSHOTS = join(repoRoot, 'docs/web');

interface FeatureBody {
  id: string;
  geometry: { type: string; coordinates: unknown };
  properties: Record<string, unknown>;
}
interface HistoryBody {
  version: number;
  operation: string;
  actor: string;
  note: string | null;
  feature: FeatureBody;
}

describe.skipIf(missing !== undefined)('offline editing in a browser', () => {
  let stack: WebStack;
  let browser: Browser;
  let userDataDir: string;
  let context: BrowserContext | undefined;
  const violations: string[] = [];

  beforeAll(async () => {
    stack = await startWebStack();
    browser = await launchChromium();
    userDataDir = mkdtempSync(join(tmpdir(), 'web-offline-profile-'));
    mkdirSync(SCREENSHOTS, { recursive: true });
  }, 300_000);
  afterAll(async () => {
    await context?.close().catch(() => undefined);
    await browser?.close();
    await stack?.close();
    if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
  });

  /** The same profile directory each time: IndexedDB, the service worker and cookies persist like a real browser's. */
  async function openProfile(): Promise<Page> {
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      locale: 'de-DE',
      viewport: { width: 1100, height: 900 },
    });
    return context.pages()[0] ?? (await context.newPage());
  }

  const visible = (locator: Locator, timeout = 15_000) => locator.first().waitFor({ state: 'visible', timeout });
  const hasText = (locator: Locator, text: string, timeout = 15_000) => expect.poll(() => locator.textContent(), { timeout }).toBe(text);
  const badge = (page: Page) => page.getByRole('link', { name: /^Ausstehende Änderungen: \d+$/ });

  it('edits made offline survive a reload and a browser restart, and sync once each with the conflict merged field by field', async () => {
    const adminToken = await stack.token('admin', 'ada');
    const seed = async (name: string, lon: number, adresse: string, telefon: string) => {
      const { status, body } = await stack.api<FeatureBody>('POST', '/api/features', {
        token: adminToken,
        body: { type: 'Feature', geometry: { type: 'Point', coordinates: [lon, 52.52] }, properties: { name, kategorie: 'denkmal', adresse, telefon } },
      });
      expect(status).toBe(201);
      return body.id;
    };
    const editedId = await seed('Denkmal am Markt', 13.401, 'Markt 1', '030 111');
    await seed('Denkmal am Park', 13.402, 'Park 2', '030 222');
    const deletedId = await seed('Denkmal am Tor', 13.403, 'Tor 3', '030 333');
    const goneId = await seed('Denkmal am Weg', 13.4035, 'Weg 4', '030 444');

    // Online: the map shows the area (kept in IndexedDB), the service worker takes over.
    let page = await openProfile();
    await page.goto(`${stack.webUrl}/login?as=admin&sub=ada`);
    await page.waitForURL(`${stack.webUrl}/`);
    await page.evaluate(() => navigator.serviceWorker.ready.then(() => undefined));
    await page.goto(`${stack.webUrl}/?center=13.402,52.52&zoom=15`);
    await expect.poll(() => page.getByRole('status').filter({ hasText: 'Objekte geladen' }).textContent(), { timeout: 20_000 }).toBe('4 Objekte geladen');
    await page.goto(`${stack.webUrl}/offline`);
    await hasText(page.getByRole('status').filter({ hasText: 'offline verfügbar' }), '4 Objekte offline verfügbar');
    await expect.poll(() => page.evaluate(() => navigator.serviceWorker.controller !== null)).toBe(true);

    // Offline: the site still opens (from the service worker), the map shows the kept features.
    await context!.setOffline(true);
    await page.goto(`${stack.webUrl}/?center=13.402,52.52&zoom=15`);
    await expect.poll(() => page.getByRole('status').filter({ hasText: 'Objekte geladen' }).textContent(), { timeout: 20_000 }).toBe('4 Objekte geladen');
    await page.getByRole('link', { name: 'Ausstehende Änderungen: 0' }).click();
    await page.waitForURL(`${stack.webUrl}/offline`);
    await visible(page.getByRole('status').filter({ hasText: 'Keine Verbindung' }));

    for (const [name, lon] of [['Neues Grabfeld Ost', '13.404'], ['Neues Beet West', '13.405']] as const) {
      await page.getByRole('button', { name: 'Neues Objekt' }).click();
      await page.getByLabel('Name', { exact: true }).fill(name);
      await page.getByLabel('Kategorie', { exact: true }).selectOption(name.includes('Beet') ? 'blumenbeet' : 'friedhof');
      await page.getByLabel('Längengrad').fill(lon);
      await page.getByLabel('Breitengrad').fill('52.52');
      await page.getByRole('button', { name: 'Speichern' }).click();
      await visible(page.getByRole('button', { name: `Bearbeiten: ${name}` }));
    }
    // A feature created offline and then changed offline stays one create.
    await page.getByRole('button', { name: 'Bearbeiten: Neues Beet West' }).click();
    await page.getByLabel('Telefon').fill('030 555');
    await page.getByRole('button', { name: 'Speichern' }).click();

    await page.getByRole('button', { name: 'Bearbeiten: Denkmal am Markt' }).click();
    await page.getByLabel('Name', { exact: true }).fill('Denkmal am Markt (saniert)');
    await page.getByLabel('Adresse').fill('Marktplatz 1');
    await page.getByRole('button', { name: 'Speichern' }).click();
    await page.getByRole('button', { name: 'Bearbeiten: Denkmal am Weg' }).click();
    await page.getByLabel('Name', { exact: true }).fill('Denkmal am Weg (vermessen)');
    await page.getByRole('button', { name: 'Speichern' }).click();
    await page.getByRole('button', { name: 'Löschen: Denkmal am Tor' }).click();
    await hasText(badge(page), 'Ausstehende Änderungen: 5');
    violations.push(...(await seriousViolations(page)));
    await page.getByRole('navigation', { name: 'Hauptnavigation' }).screenshot({ path: join(SCREENSHOTS, 'offline-badge.png') });
    await page.screenshot({ path: join(SCREENSHOTS, 'offline.png') });

    // A reload, then closing the browser and opening it again on the same profile, still offline.
    await page.reload();
    await hasText(badge(page), 'Ausstehende Änderungen: 5');
    await context!.close();
    page = await openProfile();
    await context!.setOffline(true);
    await page.goto(`${stack.webUrl}/offline`);
    await hasText(badge(page), 'Ausstehende Änderungen: 5');
    const outbox = page.getByRole('list').filter({ hasText: 'Neu:' });
    await visible(outbox);
    const items = (await outbox.getByRole('listitem').allTextContents()).map((text) => text.split(' (')[0] ?? text);
    expect(items.map((text) => text.replace(/(Öffnen|Verwerfen):.*$/, '').trim())).toEqual(['Neu: Neues Grabfeld Ost', 'Neu: Neues Beet West', 'Geändert: Denkmal am Markt', 'Geändert: Denkmal am Weg', 'Gelöscht: Denkmal am Tor']);

    // Meanwhile a second browser edits the same feature online: the address and the phone.
    const other = await browser.newContext({ locale: 'de-DE', viewport: { width: 1100, height: 800 } });
    const otherPage = await other.newPage();
    await otherPage.goto(`${stack.webUrl}/login?as=admin&sub=bob`);
    await otherPage.waitForURL(`${stack.webUrl}/`);
    await otherPage.goto(`${stack.webUrl}/features/${encodeURIComponent(editedId)}/edit`);
    await otherPage.getByLabel('Adresse').fill('Am Markt 1a');
    await otherPage.getByLabel('Telefon').fill('030 999');
    await otherPage.getByRole('button', { name: 'Speichern' }).click();
    await otherPage.waitForURL(`${stack.webUrl}/features/${encodeURIComponent(editedId)}`);
    await other.close();
    // … and another user deletes a feature edited here offline.
    expect((await stack.api('DELETE', `/api/features/${encodeURIComponent(goneId)}`, { token: await stack.token('admin', 'bob') })).status).toBe(204);

    // Back online; the first create's answer is lost after the API made the feature.
    let droppedCreates = 0;
    await page.route(`${stack.apiUrl}/api/features`, async (route) => {
      if (route.request().method() === 'POST' && droppedCreates === 0) {
        droppedCreates++;
        const answered = await route.fetch();
        expect(answered.status()).toBe(201);
        await route.abort('connectionreset');
        return;
      }
      await route.continue();
    });
    await context!.setOffline(false);

    // Sync meets the conflict: name changed here only, phone there only, the address on both sides.
    await visible(page.getByRole('heading', { name: 'Zusammenführen: Denkmal am Markt (saniert)' }), 30_000);
    expect(droppedCreates).toBe(1);
    await hasText(badge(page), 'Ausstehende Änderungen: 2');
    const merge = page.getByRole('region', { name: /^Zusammenführen/ });
    expect(await merge.getByRole('row', { name: /^Name/ }).textContent()).toContain('automatisch: Meine Änderung');
    expect(await merge.getByRole('row', { name: /^Telefon/ }).textContent()).toContain('automatisch: Server');
    expect(await merge.getByRole('radio').count()).toBe(2); // only the address is for the user to decide
    violations.push(...(await seriousViolations(page)));
    await merge.screenshot({ path: join(SCREENSHOTS, 'offline-merge.png') });
    await merge.getByRole('radio', { name: 'Adresse: Server' }).check();
    await merge.getByRole('button', { name: 'Zusammenführung speichern' }).click();
    // Next, the feature deleted on the server while edited here: offered to restore as new.
    await visible(page.getByRole('heading', { name: 'Zusammenführen: Denkmal am Weg (vermessen)' }));
    expect(await merge.textContent()).toContain('auf dem Server gelöscht');
    await merge.getByRole('button', { name: 'Als neues Objekt wiederherstellen' }).click();
    await hasText(badge(page), 'Ausstehende Änderungen: 0');

    // The server: each create once, the delete done, the merge as asserted.
    const { body: all } = await stack.api<{ features: FeatureBody[] }>('GET', '/api/features?limit=1000', { token: adminToken });
    const names = all.features.map((f) => f.properties.name).sort();
    expect(names).toEqual(['Denkmal am Markt (saniert)', 'Denkmal am Park', 'Denkmal am Weg (vermessen)', 'Neues Beet West', 'Neues Grabfeld Ost']);
    const restored = all.features.find((f) => f.properties.name === 'Denkmal am Weg (vermessen)')!;
    expect(restored.id).not.toBe(goneId);
    expect(restored.properties).toMatchObject({ adresse: 'Weg 4', telefon: '030 444', version: 1 });
    expect(all.features.find((f) => f.properties.name === 'Neues Beet West')!.properties.telefon).toBe('030 555');
    expect((await stack.api('GET', `/api/features/${encodeURIComponent(deletedId)}`, { token: adminToken })).status).toBe(404);
    const merged = (await stack.api<FeatureBody>('GET', `/api/features/${encodeURIComponent(editedId)}`, { token: adminToken })).body;
    expect(merged.properties).toMatchObject({ name: 'Denkmal am Markt (saniert)', adresse: 'Am Markt 1a', telefon: '030 999', version: 3 });

    // Every step in the history: created, the other browser's edit, the merge by the offline user.
    const history = (await stack.api<HistoryBody[] | { versions: HistoryBody[] }>('GET', `/api/features/${encodeURIComponent(editedId)}/history`, { token: adminToken })).body;
    const versions = (Array.isArray(history) ? history : history.versions).map((h) => [h.version, h.operation, h.actor, h.feature.properties.adresse, h.note]);
    const mergeLine = 'merged offline edit: name from mine; adresse, telefon from theirs';
    expect(versions.sort((a, b) => Number(a[0]) - Number(b[0]))).toEqual([
      [1, 'insert', 'ada', 'Markt 1', null],
      [2, 'update', 'bob', 'Am Markt 1a', null],
      [3, 'update', 'ada', 'Am Markt 1a', mergeLine],
    ]);
    // … and the feature's history page shows the merge's line.
    await page.goto(`${stack.webUrl}/features/${encodeURIComponent(editedId)}`);
    const historyTable = page.getByRole('table', { name: 'Alle Versionen, neueste zuerst' });
    expect(await historyTable.getByRole('row').filter({ hasText: mergeLine }).getByRole('cell').first().textContent()).toBe('3');
    const createdHistory = await stack.api<HistoryBody[] | { versions: HistoryBody[] }>('GET', `/api/features/${encodeURIComponent(all.features.find((f) => f.properties.name === 'Neues Beet West')!.id)}/history`, { token: adminToken });
    const createdVersions = Array.isArray(createdHistory.body) ? createdHistory.body : createdHistory.body.versions;
    expect(createdVersions.map((h) => h.operation)).toEqual(['insert']);
    expect(violations).toEqual([]);
  }, 240_000);

  /** Pixel positions relative to the map's top-left corner, clicked one after the other. */
  async function clickOnMap(map: Locator, points: Array<[number, number]>): Promise<void> {
    const box = (await map.boundingBox())!;
    for (const [x, y] of points) {
      await map.page().mouse.click(box.x + x, box.y + y);
      await map.page().waitForTimeout(120);
    }
  }
  const square = (x: number, y: number, size: number): Array<[number, number]> => [[x, y], [x + size, y], [x + size, y + size], [x, y + size], [x, y]];

  it('the editor draws offline: a new Polygon and a hole cut into an existing area go through the outbox and reach the server once back online', async () => {
    const token = await stack.token('admin', 'eve');
    const ring = [[13.39, 52.51], [13.41, 52.51], [13.41, 52.53], [13.39, 52.53], [13.39, 52.51]];
    const { body: area } = await stack.api<FeatureBody>('POST', '/api/features', { token, body: { type: 'Feature', geometry: { type: 'Polygon', coordinates: [ring] }, properties: { name: 'Friedhof Süd', kategorie: 'friedhof' } } });
    const editor = await browser.newContext({ locale: 'de-DE', viewport: { width: 1100, height: 900 } });
    try {
      const page = await editor.newPage();
      await page.goto(`${stack.webUrl}/login?as=admin&sub=eve`);
      await page.waitForURL(`${stack.webUrl}/`);
      await expect.poll(() => page.evaluate(() => navigator.serviceWorker.controller !== null), { timeout: 20_000 }).toBe(true);
      // Online once: the service worker keeps the editor's pages and assets.
      await page.goto(`${stack.webUrl}/features/new`);
      await page.goto(`${stack.webUrl}/features/${encodeURIComponent(area.id)}/edit`);
      await page.goto(`${stack.webUrl}/offline`);

      await editor.setOffline(true);
      await page.goto(`${stack.webUrl}/features/new`);
      const map = page.getByRole('region', { name: 'Karte der Objekte' });
      await page.getByLabel('Geometrietyp').selectOption('Polygon');
      await clickOnMap(map, square(100, 80, 200));
      await expect.poll(() => page.getByText('Fläche mit 1 Teil(en) und 0 Loch/Löchern').count()).toBe(1);
      await page.getByLabel('Name', { exact: true }).fill('Beet offline gezeichnet');
      await page.getByLabel('Kategorie', { exact: true }).selectOption('blumenbeet');
      await page.getByRole('button', { name: 'Speichern' }).click();
      await page.waitForURL(`${stack.webUrl}/offline`);
      await hasText(badge(page), 'Ausstehende Änderungen: 1');

      // The existing area, opened offline from the kept page: a hole drawn in its middle.
      await page.goto(`${stack.webUrl}/features/${encodeURIComponent(area.id)}/edit`);
      const box = (await map.boundingBox())!;
      await page.getByRole('button', { name: 'Loch zeichnen' }).click();
      await clickOnMap(map, square(box.width / 2 - 30, box.height / 2 - 30, 60));
      await expect.poll(() => page.getByText('Fläche mit 1 Teil(en) und 1 Loch/Löchern').count()).toBe(1);
      await page.getByRole('button', { name: 'Speichern' }).click();
      await page.waitForURL(`${stack.webUrl}/offline`);
      await hasText(badge(page), 'Ausstehende Änderungen: 2');
      expect(await stack.api('GET', `/api/features/${encodeURIComponent(area.id)}`).then((r) => (r.body as FeatureBody).geometry.coordinates)).toEqual([ring]);

      // No request routing in this browser: the API's CORS preflight is the real one (routing answers
      // preflights by itself, which once hid that Idempotency-Key was not an allowed header).
      await editor.setOffline(false);
      await hasText(badge(page), 'Ausstehende Änderungen: 0', 30_000);
      const { body: all } = await stack.api<{ features: FeatureBody[] }>('GET', '/api/features?limit=1000', { token });
      const drawn = all.features.filter((f) => f.properties.name === 'Beet offline gezeichnet');
      expect(drawn).toHaveLength(1);
      expect(drawn[0]!.geometry.type).toBe('Polygon');
      expect((drawn[0]!.geometry.coordinates as unknown[][])[0]).toHaveLength(5);
      const holed = (await stack.api<FeatureBody>('GET', `/api/features/${encodeURIComponent(area.id)}`)).body;
      expect(holed.geometry.type).toBe('Polygon');
      expect(holed.geometry.coordinates).toHaveLength(2); // the outer ring and the hole drawn offline
      expect(holed.properties).toMatchObject({ name: 'Friedhof Süd', version: 2, updatedBy: 'eve' });
    } finally {
      await editor.close();
    }
  }, 180_000);
});

describe('the three-way merge of an offline edit', () => {
  const point = (lon: number) => ({ type: 'Point' as const, coordinates: [lon, 52.5] as [number, number] });
  const side = (name: string, adresse: string | null, lon = 13.4) => ({ properties: { name, kategorie: 'denkmal', adresse, telefon: null }, geometry: point(lon) });

  it('takes a field changed on one side only by itself and leaves a field both changed differently to the user', () => {
    const outcome = threeWayMerge(side('A', 'x'), side('A mine', 'y'), side('A', 'z', 13.5));
    expect(outcome.conflicts).toEqual(['adresse']);
    expect(outcome.fromTheirs).toEqual(['geometry']);
    expect(outcome.merged).toEqual(side('A mine', 'y', 13.5));
  });

  it('sees no conflict where both sides made the same change', () => {
    const outcome = threeWayMerge(side('A', 'x'), side('B', 'x', 13.6), side('B', 'x', 13.6));
    expect(outcome.conflicts).toEqual([]);
    expect(outcome.merged).toEqual(side('B', 'x', 13.6));
  });

  it('treats a moved geometry on both sides as a conflict', () => {
    expect(threeWayMerge(side('A', null), side('A', null, 13.41), side('A', null, 13.42)).conflicts).toEqual(['geometry']);
  });
});
