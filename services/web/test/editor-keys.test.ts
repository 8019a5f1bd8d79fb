/**
 * The editor's history and keyboard in a real Chromium against the real API: undo and redo of a vertex
 * move (buttons and Ctrl+Z / Ctrl+Shift+Z), Esc dropping a shape being drawn, Delete removing the
 * selected vertex, a polygon drawn with the keyboard alone (Space at the map centre, arrows to pan,
 * Enter to finish) and saved, and the shortcuts' help panel.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Locator, Page } from 'playwright-core';
import { launchChromium, missingForBrowserTests, openPage, repoRoot, seriousViolations, startWebStack, type WebStack } from './harness.js';

const missing = missingForBrowserTests();
if (missing) console.log(`skipping the editor keyboard tests: ${missing}`);

type Coordinates = number[][][];

describe.skipIf(missing !== undefined)('the editor’s undo, redo and keyboard, in a browser', () => {
  let stack: WebStack;
  let browser: Browser;
  const contexts: BrowserContext[] = [];
  const violations: string[] = [];

  beforeAll(async () => {
    stack = await startWebStack();
    browser = await launchChromium();
  }, 300_000);
  afterAll(async () => {
    for (const context of contexts) await context.close().catch(() => undefined);
    await browser?.close();
    await stack?.close();
  });

  const contributor = () => openPage(browser, stack.webUrl, contexts, { role: 'contributor', sub: 'kim' });
  /** The geometry the editor holds now (what Save would send). */
  const drawn = (page: Page) => page.evaluate(() => (window as unknown as { fpEditor: { geometry(): { type: string; coordinates: unknown } | undefined } }).fpEditor.geometry() ?? null);
  const ring = async (page: Page) => ((await drawn(page))?.coordinates as Coordinates | undefined)?.[0];

  async function clickOnMap(map: Locator, points: Array<[number, number]>): Promise<void> {
    const box = (await map.boundingBox())!;
    for (const [x, y] of points) {
      await map.page().mouse.click(box.x + x, box.y + y);
      await map.page().waitForTimeout(120);
    }
  }
  const square = (x: number, y: number, size: number): Array<[number, number]> => [[x, y], [x + size, y], [x + size, y + size], [x, y + size], [x, y]];

  async function drawSquare(page: Page): Promise<Locator> {
    await page.goto(`${stack.webUrl}/features/new`);
    await page.getByLabel('Geometrietyp').selectOption('Polygon');
    const map = page.getByRole('region', { name: 'Karte der Objekte' });
    await clickOnMap(map, square(100, 80, 200));
    await expect.poll(() => page.locator('#geometry-summary').textContent()).toBe('Fläche mit 1 Teil(en) und 0 Loch/Löchern');
    return map;
  }

  it('undoes and redoes a vertex move with the buttons and with Ctrl+Z / Ctrl+Shift+Z', async () => {
    const page = await contributor();
    const map = await drawSquare(page);
    const undo = page.getByRole('button', { name: 'Rückgängig' });
    const redo = page.getByRole('button', { name: 'Wiederholen' });
    expect(await undo.isEnabled()).toBe(true);
    expect(await redo.isEnabled()).toBe(false);
    const before = await ring(page);
    await page.getByRole('button', { name: 'Stützpunkte bearbeiten' }).click();
    const box = (await map.boundingBox())!;
    // Drag the top-right corner 60 px to the right.
    await page.mouse.move(box.x + 300, box.y + 80);
    await page.mouse.down();
    await page.mouse.move(box.x + 330, box.y + 80, { steps: 5 });
    await page.mouse.move(box.x + 360, box.y + 80, { steps: 5 });
    await page.mouse.up();
    await expect.poll(async () => JSON.stringify(await ring(page))).not.toBe(JSON.stringify(before));
    const moved = await ring(page);
    expect(moved!.length).toBe(before!.length);

    await map.focus();
    await page.keyboard.press('Control+z');
    await expect.poll(async () => JSON.stringify(await ring(page))).toBe(JSON.stringify(before));
    expect(await redo.isEnabled()).toBe(true);
    await page.keyboard.press('Control+Shift+z');
    await expect.poll(async () => JSON.stringify(await ring(page))).toBe(JSON.stringify(moved));
    await page.screenshot({ path: join(repoRoot, 'docs/images/editor-undo.png') });
    await undo.click();
    await expect.poll(async () => JSON.stringify(await ring(page))).toBe(JSON.stringify(before));
    await redo.click();
    await expect.poll(async () => JSON.stringify(await ring(page))).toBe(JSON.stringify(moved));
    // Back past the drawing itself: nothing drawn, and the drawing comes back with redo.
    await undo.click();
    await undo.click();
    await expect.poll(() => page.locator('#geometry-summary').textContent()).toBe('Noch keine Geometrie');
    expect(await undo.isEnabled()).toBe(false);
    await redo.click();
    await expect.poll(async () => JSON.stringify(await ring(page))).toBe(JSON.stringify(before));
    violations.push(...(await seriousViolations(page)));
    expect(violations).toEqual([]);
  });

  it('Esc drops the shape being drawn; Delete removes the selected vertex, and undo brings it back', async () => {
    const page = await contributor();
    const map = await drawSquare(page);
    const square4 = await ring(page);
    expect(square4).toHaveLength(5);
    // A second polygon begun and dropped: the square stays as it was.
    await clickOnMap(map, [[350, 250], [400, 250], [400, 300]]);
    await page.keyboard.press('Escape');
    await page.waitForTimeout(200);
    expect(await ring(page)).toEqual(square4);

    await page.getByRole('button', { name: 'Stützpunkte bearbeiten' }).click();
    await clickOnMap(map, [[300, 280]]); // the bottom-right corner
    await expect.poll(() => page.locator('#vertex-status').textContent()).toBe('Stützpunkt gewählt: Entf oder Rücktaste löscht ihn.');
    await page.keyboard.press('Delete');
    await expect.poll(async () => (await ring(page))?.length).toBe(4);
    expect(JSON.stringify(await ring(page))).not.toContain(JSON.stringify(square4![2]));
    await clickOnMap(map, [[100, 280]]); // the bottom-left corner
    await page.keyboard.press('Backspace');
    // A ring keeps three corners: the last Delete is refused, not a broken polygon.
    await page.waitForTimeout(200);
    expect((await ring(page))?.length).toBe(4);
    await page.keyboard.press('Control+z');
    await expect.poll(async () => (await ring(page))?.length).toBe(5);
  });

  it('draws a polygon with the keyboard alone: Space at the map centre, arrows to pan, Enter to finish; and saves it', async () => {
    const page = await contributor();
    await page.goto(`${stack.webUrl}/features/new`);
    await page.getByLabel('Geometrietyp').selectOption('Polygon');
    const map = page.getByRole('region', { name: 'Karte der Objekte' });
    await map.focus();
    const pan = async (key: string) => {
      await page.keyboard.press(key);
      await page.waitForTimeout(400); // OpenLayers animates the pan
    };
    await page.keyboard.press('Space');
    await pan('ArrowRight');
    await page.keyboard.press('Space');
    await pan('ArrowDown');
    await page.keyboard.press('Space');
    await page.keyboard.press('Enter');
    await expect.poll(() => page.locator('#geometry-summary').textContent()).toBe('Fläche mit 1 Teil(en) und 0 Loch/Löchern');
    const polygon = await ring(page);
    expect(polygon).toHaveLength(4); // three corners and the closing one
    expect(polygon![0]).toEqual(polygon![3]);
    // East, then south of the first corner.
    expect(polygon![1]![0]!).toBeGreaterThan(polygon![0]![0]!);
    expect(polygon![2]![1]!).toBeLessThan(polygon![1]![1]!);
    await page.getByLabel('Name', { exact: true }).fill('Tastaturbeet');
    await page.getByLabel('Kategorie', { exact: true }).selectOption('blumenbeet');
    await page.getByRole('button', { name: 'Speichern' }).click();
    await page.waitForURL((url) => /^\/features\/[^/]+$/.test(url.pathname) && url.pathname !== '/features/new');
    const id = decodeURIComponent(new URL(page.url()).pathname.split('/').pop()!);
    const saved = (await stack.api<{ geometry: { type: string; coordinates: Coordinates } }>('GET', `/api/features/${encodeURIComponent(id)}`)).body;
    expect(saved.geometry.type).toBe('Polygon');
    expect(saved.geometry.coordinates[0]).toHaveLength(4);
  });

  it('a tool key switches the tool, and "?" opens the help panel with every shortcut', async () => {
    const page = await contributor();
    await page.goto(`${stack.webUrl}/features/new`);
    await page.getByLabel('Geometrietyp').selectOption('Polygon');
    await page.getByRole('region', { name: 'Karte der Objekte' }).focus();
    await page.keyboard.press('h');
    expect(await page.getByRole('button', { name: 'Loch zeichnen' }).getAttribute('aria-pressed')).toBe('true');
    await page.keyboard.press('?');
    const help = page.getByRole('dialog', { name: 'Tastenkürzel des Editors' });
    await help.waitFor();
    await page.screenshot({ path: join(repoRoot, 'docs/images/editor-shortcuts.png') });
    for (const line of ['Letzte Änderung rückgängig machen', 'Zeichnen abbrechen', 'Stützpunkt in der Kartenmitte setzen (beim Zeichnen)', 'Werkzeug: Stützpunkte bearbeiten']) {
      expect(await help.getByText(line).count()).toBe(1);
    }
    violations.push(...(await seriousViolations(page)));
    await help.getByRole('button', { name: 'Schließen' }).click();
    expect(await help.isVisible()).toBe(false);
    expect(violations).toEqual([]);
  });
});
