/**
 * The web app in a real headless Chromium against the real API on PostGIS: drawing and saving
 * features, the field errors, the conflict view, the history diff, the guard, both languages, the
 * mobile viewport and keyboard-only editing. axe-core checks every page visited.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, BrowserContextOptions, Locator, Page } from 'playwright-core';
import { launchChromium, missingForBrowserTests, openPage, repoRoot, seriousViolations, startWebStack, type WebStack } from './harness.js';

const missing = missingForBrowserTests();
if (missing) console.log(`skipping the web app's browser tests: ${missing}`);

const SCREENSHOTS = join(repoRoot, 'docs/web');

interface FeatureBody {
  id: string;
  geometry: { type: string; coordinates: unknown[] };
  properties: Record<string, unknown>;
}

describe.skipIf(missing !== undefined)('the web app in a browser', () => {
  let stack: WebStack;
  let browser: Browser;
  const contexts: BrowserContext[] = [];
  const violations: string[] = [];

  beforeAll(async () => {
    stack = await startWebStack();
    browser = await launchChromium();
    mkdirSync(SCREENSHOTS, { recursive: true });
  }, 300_000);
  afterAll(async () => {
    for (const context of contexts) await context.close().catch(() => undefined);
    await browser?.close();
    await stack?.close();
  });

  const signedIn = (role: string, sub: string, options: BrowserContextOptions = {}): Promise<Page> =>
    openPage(browser, stack.webUrl, contexts, role === 'anonymous' ? undefined : { role, sub }, options);

  /** axe on the current page; collected and asserted per test so the failing page is named. */
  async function audit(page: Page): Promise<void> {
    violations.push(...(await seriousViolations(page)));
  }

  /** Pixel positions relative to the map's top-left corner. */
  async function clickOnMap(map: Locator, points: Array<[number, number]>): Promise<void> {
    const box = (await map.boundingBox())!;
    for (const [x, y] of points) {
      await map.page().mouse.click(box.x + x, box.y + y);
      await map.page().waitForTimeout(120);
    }
  }

  const square = (x: number, y: number, size: number): Array<[number, number]> => [
    [x, y],
    [x + size, y],
    [x + size, y + size],
    [x, y + size],
    [x, y], // clicking the first vertex again closes the ring
  ];

  async function fillAttributes(page: Page, values: { name: string; kategorie: string; adresse?: string; telefon?: string }) {
    await page.getByLabel('Name', { exact: true }).fill(values.name);
    await page.getByLabel('Kategorie', { exact: true }).selectOption(values.kategorie);
    if (values.adresse !== undefined) await page.getByLabel('Adresse').fill(values.adresse);
    if (values.telefon !== undefined) await page.getByLabel('Telefon').fill(values.telefon);
  }

  async function savedFeatureId(page: Page): Promise<string> {
    await page.waitForURL((url) => /^\/features\/[^/]+$/.test(url.pathname) && url.pathname !== '/features/new');
    await page.waitForLoadState('load');
    return decodeURIComponent(new URL(page.url()).pathname.split('/').pop()!);
  }

  let polygonId = '';

  it('a contributor draws a Polygon with a hole and a MultiPolygon with two parts, fills the form and saves both', async () => {
    const page = await signedIn('contributor', 'alice');
    await page.getByRole('link', { name: 'Neues Objekt' }).click();
    await page.waitForURL(/\/features\/new$/);
    const map = page.getByRole('region', { name: 'Karte der Objekte' });
    await page.getByLabel('Geometrietyp').selectOption('Polygon');
    await clickOnMap(map, square(100, 80, 240));
    await page.getByRole('button', { name: 'Loch zeichnen' }).click();
    await clickOnMap(map, square(180, 160, 60));
    await expect.poll(() => page.getByText('Fläche mit 1 Teil(en) und 1 Loch/Löchern').count()).toBe(1);
    await fillAttributes(page, { name: 'Alter Friedhof Nord', kategorie: 'friedhof', adresse: 'Friedhofstraße 1', telefon: '+49 30 1234-567' });
    await audit(page);
    await page.screenshot({ path: join(SCREENSHOTS, 'editor.png') });
    await page.getByRole('button', { name: 'Speichern' }).click();
    polygonId = await savedFeatureId(page);
    await audit(page);

    const polygon = (await stack.api<FeatureBody>('GET', `/api/features/${encodeURIComponent(polygonId)}`)).body;
    expect(polygon.geometry.type).toBe('Polygon');
    expect(polygon.geometry.coordinates).toHaveLength(2); // the outer ring and one hole
    expect(polygon.properties).toMatchObject({ name: 'Alter Friedhof Nord', kategorie: 'friedhof', adresse: 'Friedhofstraße 1', telefon: '+49 30 1234-567', createdBy: 'alice' });

    await page.goto(`${stack.webUrl}/features/new`);
    await page.getByLabel('Geometrietyp').selectOption('MultiPolygon');
    await clickOnMap(map, square(60, 60, 100));
    await page.getByRole('button', { name: 'Teilfläche hinzufügen' }).click();
    await clickOnMap(map, square(300, 200, 100));
    await expect.poll(() => page.getByText('Mehrteilige Fläche mit 2 Teil(en) und 0 Loch/Löchern').count()).toBe(1);
    await fillAttributes(page, { name: 'Blumenbeete am Markt', kategorie: 'blumenbeet' });
    await page.getByRole('button', { name: 'Speichern' }).click();
    const multiId = await savedFeatureId(page);
    const multi = (await stack.api<FeatureBody>('GET', `/api/features/${encodeURIComponent(multiId)}`)).body;
    expect(multi.geometry.type).toBe('MultiPolygon');
    expect(multi.geometry.coordinates).toHaveLength(2);
    expect(violations).toEqual([]);
  });

  it('the saved features appear on the map and in the list', async () => {
    const page = await signedIn('anonymous', '');
    await page.goto(`${stack.webUrl}/?center=13.4,52.52&zoom=13`);
    await expect.poll(() => page.getByRole('status').filter({ hasText: 'Objekte geladen' }).textContent(), { timeout: 20_000 }).toBe('2 Objekte geladen');
    await page.getByLabel('Suche', { exact: true }).fill('Friedhof');
    await audit(page);
    await page.screenshot({ path: join(SCREENSHOTS, 'map.png') });
    await page.getByRole('link', { name: 'Dieselben Objekte als Liste' }).click();
    await expect(page.getByRole('link', { name: 'Alter Friedhof Nord' })).toBeVisible();
    await expect(page.getByRole('link', { name: 'Blumenbeete am Markt' })).toBeVisible();
    await page.getByLabel('Suche', { exact: true }).fill('Blumen');
    await page.getByRole('button', { name: 'Suchen' }).click();
    await expect.poll(() => page.getByRole('link', { name: 'Alter Friedhof Nord' }).count()).toBe(0);
    await expect(page.getByRole('link', { name: 'Blumenbeete am Markt' })).toBeVisible();
    await audit(page);
    expect(violations).toEqual([]);
  });

  it('refuses a name of 256 characters at the field, before anything is sent', async () => {
    const page = await signedIn('contributor', 'alice');
    await page.goto(`${stack.webUrl}/features/new`);
    const name = page.getByLabel('Name', { exact: true });
    await name.fill('x'.repeat(256));
    await name.blur();
    await expect.poll(() => name.getAttribute('aria-invalid')).toBe('true');
    const describedBy = (await name.getAttribute('aria-describedby'))!;
    const message = await page.locator(`[id="${describedBy.split(' ')[0]}"]`).textContent();
    expect(message).toBe('Höchstens 255 Zeichen.');
    await page.getByLabel('Kategorie', { exact: true }).selectOption('denkmal');
    await page.getByLabel('Längengrad').fill('13.4');
    await page.getByLabel('Breitengrad').fill('52.52');
    const before = (await stack.api<{ features: unknown[] }>('GET', '/api/features')).body.features.length;
    await page.getByRole('button', { name: 'Speichern' }).click();
    await expect.poll(() => page.getByRole('alert').filter({ hasText: 'Bitte die markierten Felder korrigieren.' }).count()).toBe(1);
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('name');
    await audit(page);
    expect((await stack.api<{ features: unknown[] }>('GET', '/api/features')).body.features.length).toBe(before);
    // One character less is fine.
    await name.fill('x'.repeat(255));
    await expect.poll(() => name.getAttribute('aria-invalid')).toBe(null);
    expect(violations).toEqual([]);
  });

  it('shows the server’s problem+json field error at its field: a self-intersecting polygon', async () => {
    const page = await signedIn('contributor', 'alice');
    await page.goto(`${stack.webUrl}/features/new`);
    await page.getByLabel('Geometrietyp').selectOption('Polygon');
    // A bow tie: the schema accepts its shape, PostGIS finds the self-intersection.
    await clickOnMap(page.getByRole('region', { name: 'Karte der Objekte' }), [[420, 60], [520, 160], [520, 60], [420, 160], [420, 60]]);
    await fillAttributes(page, { name: 'Schleife', kategorie: 'blumenbeet' });
    await page.getByRole('button', { name: 'Speichern' }).click();
    const map = page.getByRole('region', { name: 'Karte der Objekte' });
    await expect.poll(() => map.getAttribute('aria-invalid')).toBe('true');
    const error = await page.locator('[id="geometry-error"]').textContent();
    expect(error).toBe('Die Geometrie überschneidet sich selbst.');
    expect((await map.getAttribute('aria-describedby'))!.split(' ')).toContain('geometry-error');
    expect(new URL(page.url()).pathname).toBe('/features/new');
    await audit(page);
    expect(violations).toEqual([]);
  });

  it('shows the conflict view when someone saved meanwhile, and saves the values chosen per field', async () => {
    const mine = await signedIn('contributor', 'alice');
    const theirs = await signedIn('contributor', 'alice');
    await mine.goto(`${stack.webUrl}/features/${encodeURIComponent(polygonId)}/edit`);
    await theirs.goto(`${stack.webUrl}/features/${encodeURIComponent(polygonId)}/edit`);

    await theirs.getByLabel('Name', { exact: true }).fill('Friedhof Nord (umbenannt)');
    await theirs.getByLabel('Telefon').fill('+49 30 999');
    await theirs.getByRole('button', { name: 'Speichern' }).click();
    await savedFeatureId(theirs);

    await mine.getByLabel('Name', { exact: true }).fill('Mein Friedhof Nord');
    await mine.getByLabel('Adresse').fill('Nordweg 7');
    await mine.getByRole('button', { name: 'Speichern' }).click();
    const heading = mine.getByRole('heading', { name: 'Jemand anderes hat dieses Objekt inzwischen geändert' });
    await expect(heading).toBeVisible();
    // Nothing typed is lost: my values are still in the form and preselected in the conflict view.
    expect(await mine.getByLabel('Name', { exact: true }).inputValue()).toBe('Mein Friedhof Nord');
    expect(await mine.getByRole('radio', { name: 'Name: Meine' }).isChecked()).toBe(true);
    await audit(mine);
    await mine.getByRole('heading', { name: 'Jemand anderes hat dieses Objekt inzwischen geändert' }).scrollIntoViewIfNeeded();
    await mine.screenshot({ path: join(SCREENSHOTS, 'conflict.png'), fullPage: true });
    await mine.getByRole('radio', { name: 'Name: Deren' }).check();
    await mine.getByRole('radio', { name: 'Telefon: Deren' }).check();
    // Adresse stays mine (preselected).
    await mine.getByRole('button', { name: 'Auswahl speichern' }).click();
    await savedFeatureId(mine);
    const saved = (await stack.api<FeatureBody>('GET', `/api/features/${encodeURIComponent(polygonId)}`)).body;
    expect(saved.properties).toMatchObject({ name: 'Friedhof Nord (umbenannt)', telefon: '+49 30 999', adresse: 'Nordweg 7', version: 3 });
    expect(violations).toEqual([]);
  });

  it('the history shows every version and the attribute diff of any two', async () => {
    const page = await signedIn('anonymous', '');
    await page.goto(`${stack.webUrl}/features/${encodeURIComponent(polygonId)}`);
    const history = page.getByRole('table', { name: 'Alle Versionen, neueste zuerst' });
    await expect.poll(() => history.getByRole('row').count()).toBe(4); // header + versions 3, 2, 1
    await page.getByLabel('Von Version').selectOption('1');
    await page.getByLabel('Bis Version').selectOption('3');
    await page.getByRole('button', { name: 'Vergleichen' }).click();
    const diff = page.getByRole('table', { name: 'Unterschiede zwischen Version 1 und 3' });
    await expect(diff).toBeVisible();
    const nameRow = diff.getByRole('row', { name: /^Name/ });
    expect(await nameRow.getByRole('cell').allTextContents()).toEqual(['Alter Friedhof Nord', 'Friedhof Nord (umbenannt)']);
    expect(await diff.getByRole('row', { name: /^Adresse/ }).getByRole('cell').allTextContents()).toEqual(['Friedhofstraße 1', 'Nordweg 7']);
    expect(await diff.getByRole('row', { name: /^Telefon/ }).getByRole('cell').allTextContents()).toEqual(['+49 30 1234-567', '+49 30 999']);
    await expect(page.getByRole('region', { name: 'Geometrie vorher (rot gestrichelt) und nachher (blau)' })).toBeVisible();
    await audit(page);
    await diff.scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(SCREENSHOTS, 'history-diff.png'), fullPage: true });
    expect(violations).toEqual([]);
  });

  it('a guest sees no edit controls and an anonymous visitor of a protected route lands on /login', async () => {
    const guest = await signedIn('guest', 'gustav');
    await expect(guest.getByText('Angemeldet als gustav (Gast)')).toBeVisible();
    expect(await guest.getByRole('link', { name: 'Neues Objekt' }).count()).toBe(0);
    await guest.goto(`${stack.webUrl}/features/${encodeURIComponent(polygonId)}`);
    expect(await guest.getByRole('link', { name: 'Bearbeiten' }).count()).toBe(0);
    const edit = await guest.goto(`${stack.webUrl}/features/${encodeURIComponent(polygonId)}/edit`);
    expect(edit?.status()).toBe(403);
    expect(await guest.getByRole('button', { name: 'Speichern' }).count()).toBe(0);
    // Another contributor (not the creator) gets no edit link either: update:own.
    const other = await signedIn('contributor', 'bert');
    await other.goto(`${stack.webUrl}/features/${encodeURIComponent(polygonId)}`);
    expect(await other.getByRole('link', { name: 'Bearbeiten' }).count()).toBe(0);

    const anonymous = await signedIn('anonymous', '');
    await anonymous.goto(`${stack.webUrl}/features/${encodeURIComponent(polygonId)}/edit`);
    expect(new URL(anonymous.url()).pathname).toBe('/login');
    expect(new URL(anonymous.url()).searchParams.get('return_to')).toBe(`/features/${encodeURIComponent(polygonId)}/edit`);
    await audit(anonymous);
    // Signing in from there returns to the protected page.
    await anonymous.getByLabel('Benutzername').fill('alice');
    await anonymous.getByRole('button', { name: 'Als Mitwirkende anmelden' }).click();
    await anonymous.waitForURL((url) => url.pathname.endsWith('/edit'));
    expect(violations).toEqual([]);
  });

  it('speaks German by default and English by Accept-Language or by choice', async () => {
    const german = await signedIn('contributor', 'alice');
    await german.goto(`${stack.webUrl}/features/new`);
    expect(await german.getAttribute('html', 'lang')).toBe('de');
    for (const label of ['Name', 'Kategorie', 'Adresse', 'Telefon', 'Längengrad', 'Breitengrad']) expect(await german.getByLabel(label, { exact: true }).count()).toBe(1);
    expect(await german.getByRole('button', { name: 'Speichern' }).count()).toBe(1);

    const english = await signedIn('admin', 'ada', { locale: 'en-GB' });
    await english.goto(`${stack.webUrl}/features/${encodeURIComponent(polygonId)}/edit`);
    expect(await english.getAttribute('html', 'lang')).toBe('en');
    for (const label of ['Name', 'Category', 'Address', 'Phone']) expect(await english.getByLabel(label, { exact: true }).count()).toBe(1);
    expect(await english.getByRole('button', { name: 'Save' }).count()).toBe(1);
    // The admin may delete, after a confirmation; cancelling keeps the feature.
    await english.getByRole('button', { name: 'Delete' }).click();
    const dialog = english.getByRole('dialog');
    await expect(dialog.getByText('Really delete this feature? Its history is kept.')).toBeVisible();
    await audit(english);
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    expect((await stack.api('GET', `/api/features/${encodeURIComponent(polygonId)}`)).status).toBe(200);
    await english.getByRole('button', { name: 'Delete' }).click();
    await english.getByRole('dialog').getByRole('button', { name: 'Delete permanently' }).click();
    await english.waitForURL((url) => url.pathname === '/features');
    expect((await stack.api('GET', `/api/features/${encodeURIComponent(polygonId)}`)).status).toBe(404);
    await english.goto(`${stack.webUrl}/features/new`);
    for (const label of ['Longitude', 'Latitude']) expect(await english.getByLabel(label, { exact: true }).count()).toBe(1);
    await english.goto(`${stack.webUrl}/`);
    expect(await english.getByRole('link', { name: 'New feature' }).count()).toBe(1);
    await audit(english);

    // The language link switches and the choice sticks.
    await german.goto(`${stack.webUrl}/features`);
    await german.getByRole('link', { name: 'English' }).click();
    await german.waitForURL(/lang=en/);
    expect(await german.getAttribute('html', 'lang')).toBe('en');
    await german.goto(`${stack.webUrl}/help`);
    expect(await german.getAttribute('html', 'lang')).toBe('en');
    expect(await german.getByRole('heading', { name: 'The map' }).count()).toBe(1);
    await audit(german);
    await german.goto(`${stack.webUrl}/qc`);
    await audit(german);
    expect(violations).toEqual([]);
  });

  it('on a 390×844 touch screen, the map and form stack and a point is captured at the device location', async () => {
    const page = await signedIn('contributor', 'mia', {
      viewport: { width: 390, height: 844 },
      isMobile: true,
      hasTouch: true,
      geolocation: { longitude: 13.377704, latitude: 52.516275 },
      permissions: ['geolocation'],
    });
    await page.goto(`${stack.webUrl}/features/new`);
    const map = page.getByRole('region', { name: 'Karte der Objekte' });
    const mapBox = (await map.boundingBox())!;
    const nameBox = (await page.getByLabel('Name', { exact: true }).boundingBox())!;
    expect(mapBox.width).toBeLessThanOrEqual(390);
    expect(nameBox.y).toBeGreaterThan(mapBox.y + mapBox.height); // stacked, not side by side
    await page.getByRole('button', { name: 'Meinen Standort übernehmen' }).tap();
    await expect.poll(() => page.getByLabel('Längengrad').inputValue()).toBe('13.377704');
    expect(await page.getByLabel('Breitengrad').inputValue()).toBe('52.516275');
    await fillAttributes(page, { name: 'Brandenburger Tor', kategorie: 'denkmal' });
    await audit(page);
    await page.getByRole('button', { name: 'Speichern' }).tap();
    const id = await savedFeatureId(page);
    const saved = (await stack.api<FeatureBody>('GET', `/api/features/${encodeURIComponent(id)}`)).body;
    expect(saved.geometry).toEqual({ type: 'Point', coordinates: [13.377704, 52.516275] });
    await audit(page);
    expect(violations).toEqual([]);
  });

  it('creates a point and edits its attributes with the keyboard alone', async () => {
    const page = await signedIn('contributor', 'kim');
    await page.goto(`${stack.webUrl}/features/new`);
    /** Tab until the element with this accessible label has focus (at most 60 presses). */
    const tabTo = async (label: string) => {
      for (let i = 0; i < 60; i++) {
        await page.keyboard.press('Tab');
        const focused = await page.evaluate(() => {
          const element = document.activeElement as HTMLElement | null;
          if (!element) return '';
          const labelled = element.id ? document.querySelector(`label[for="${element.id}"]`)?.textContent : undefined;
          return (labelled ?? element.getAttribute('aria-label') ?? element.textContent ?? '').trim();
        });
        if (focused === label) return;
      }
      throw new Error(`no focusable element labelled ${label} on ${page.url()}`);
    };
    await tabTo('Längengrad');
    await page.keyboard.type('13.4049');
    await tabTo('Breitengrad');
    await page.keyboard.type('52.5200');
    await tabTo('Name');
    await page.keyboard.type('Gedenkstein');
    await tabTo('Kategorie');
    for (let i = 0; i < 3; i++) await page.keyboard.press('ArrowDown'); // —, Friedhof, Blumenbeet, Denkmal
    expect(await page.getByLabel('Kategorie', { exact: true }).inputValue()).toBe('denkmal');
    await tabTo('Speichern');
    await page.keyboard.press('Enter');
    const id = await savedFeatureId(page);
    await tabTo('Bearbeiten');
    await page.keyboard.press('Enter');
    await page.waitForURL((url) => url.pathname.endsWith('/edit'));
    await tabTo('Telefon');
    await page.keyboard.type('030 123');
    await tabTo('Speichern');
    await page.keyboard.press('Enter');
    await savedFeatureId(page);
    const saved = (await stack.api<FeatureBody>('GET', `/api/features/${encodeURIComponent(id)}`)).body;
    expect(saved.geometry).toEqual({ type: 'Point', coordinates: [13.4049, 52.52] });
    expect(saved.properties).toMatchObject({ name: 'Gedenkstein', kategorie: 'denkmal', telefon: '030 123', version: 2 });
  }, 90_000);
});

// vitest's expect has no Playwright matchers: the few used here, on locators.
declare module 'vitest' {
  interface Assertion {
    toBeVisible(): Promise<void>;
  }
}
expect.extend({
  async toBeVisible(received: Locator) {
    try {
      await received.first().waitFor({ state: 'visible', timeout: 10_000 });
      return { pass: true, message: () => 'visible' };
    } catch {
      return { pass: false, message: () => `expected ${String(received)} to be visible` };
    }
  },
});
