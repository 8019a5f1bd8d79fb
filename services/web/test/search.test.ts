/**
 * The map's search and the list's paging in a real Chromium against the real API on PostGIS, with
 * more than 5 000 features inserted directly into the database: the search box asks the API across the
 * whole dataset and flies to a feature outside the view; a place search through a Nominatim stand-in
 * on loopback; "Mein Standort" with the browser's geolocation; the address follows the view and a
 * reload restores it; /features pages through the API with "Nächste Seite" and finds a feature beyond
 * the first 5 000.
 */
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, BrowserContextOptions, Page } from 'playwright-core';
import { loadWebConfig } from '../src/config.js';
import { searchFilter } from '../src/lib/search.js';
import { launchChromium, missingForBrowserTests, openPage, repoRoot, seriousViolations, startWebStack, type WebStack } from './harness.js';

const missing = missingForBrowserTests();
if (missing) console.log(`skipping the search and paging browser tests: ${missing}`);

/** Features inserted by SQL: ids f00000…, all before the one the search must find (ids sort after). */
const BULK = 5_200;

describe('the search text as a CQL2 filter (lib/search.ts)', () => {
  it('asks for the text in any case of its letters (CQL2 CASEI), in name and address, quotes and wildcards escaped', () => {
    expect(searchFilter("O'Brien 100%")).toBe("CASEI(name) LIKE CASEI('%O''Brien 100\\%%') OR CASEI(adresse) LIKE CASEI('%O''Brien 100\\%%')");
    expect(searchFilter('   ')).toBeUndefined();
  });

  it('has no place search unless a geocoder is configured', () => {
    expect(loadWebConfig({}).geocoder).toBeUndefined();
    expect(loadWebConfig({ GEOCODER_URL: 'https://geo.example.org/' }).geocoder).toEqual({ url: 'https://geo.example.org', attribution: '© OpenStreetMap contributors (Nominatim)' });
    expect(() => loadWebConfig({ GEOCODER_URL: 'ftp://geo.example.org' })).toThrow(/GEOCODER_URL/);
  });
});

describe.skipIf(missing !== undefined)('search, location and paging, in a browser', () => {
  let stack: WebStack;
  let browser: Browser;
  let geocoder: Server;
  const geocoderQueries: string[] = [];
  const contexts: BrowserContext[] = [];
  const violations: string[] = [];

  beforeAll(async () => {
    // A Nominatim stand-in: /search?format=jsonv2 answers one place, the Rotes Rathaus.
    geocoder = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://localhost');
      geocoderQueries.push(`${url.pathname}?${url.searchParams.toString()}`);
      res.writeHead(200, { 'content-type': 'application/json', 'access-control-allow-origin': '*' });
      res.end(JSON.stringify(url.pathname === '/search' ? [{ display_name: 'Rotes Rathaus, Rathausstraße 15, Berlin', lat: '52.51858', lon: '13.40858', boundingbox: ['52.5180', '52.5192', '13.4078', '13.4094'] }] : []));
    });
    await new Promise<void>((resolve) => geocoder.listen(0, '127.0.0.1', resolve));
    const geocoderUrl = `http://127.0.0.1:${(geocoder.address() as { port: number }).port}`;
    stack = await startWebStack({ webEnv: { GEOCODER_URL: geocoderUrl, GEOCODER_ATTRIBUTION: 'Testorte' } });
    browser = await launchChromium();
    // More than 5 000 features straight into the table (the API's write limit is not what is tested).
    await stack.db.pool.query(
      `INSERT INTO features.features (id, name, kategorie, adresse, geom)
       SELECT 'f' || lpad(i::text, 5, '0'), 'Beet ' || i, 'blumenbeet', 'Gartenweg ' || i, ST_SetSRID(ST_MakePoint(13.30 + (i % 100) * 0.001, 52.40 + (i / 100) * 0.001), 4326)
       FROM generate_series(0, $1::int - 1) AS i`,
      [BULK],
    );
    // The one to find: its id sorts after every other, far from the map's first view.
    await stack.db.pool.query(
      `INSERT INTO features.features (id, name, kategorie, adresse, geom) VALUES ('zz-wasserturm', 'Alter Wasserturm', 'denkmal', 'Turmstraße 1', ST_SetSRID(ST_MakePoint(13.62, 52.43), 4326))`,
    );
    await stack.db.pool.query('ANALYZE features.features');
  }, 300_000);
  afterAll(async () => {
    for (const context of contexts) await context.close().catch(() => undefined);
    await browser?.close();
    await stack?.close();
    geocoder?.close();
  });

  const visitor = (options: BrowserContextOptions = {}): Promise<Page> => openPage(browser, stack.webUrl, contexts, undefined, options);
  const viewOf = (page: Page) => {
    const url = new URL(page.url());
    const [lon, lat] = (url.searchParams.get('center') ?? '').split(',').map(Number);
    return { lon: lon!, lat: lat!, zoom: Number(url.searchParams.get('zoom')) };
  };

  it('the map’s search asks the API across the whole dataset and flies to a feature outside the view', async () => {
    const page = await visitor();
    await page.goto(`${stack.webUrl}/?center=13.4,52.52&zoom=16`);
    // Mixed case on purpose: the API compares case-insensitively (CASEI).
    await page.getByLabel('Suche', { exact: true }).fill('wASSERturm');
    const result = page.getByRole('button', { name: 'Alter Wasserturm' });
    await result.waitFor({ timeout: 15_000 });
    await page.screenshot({ path: join(repoRoot, 'docs/images/map-search.png') });
    await result.click();
    await expect.poll(() => viewOf(page), { timeout: 10_000 }).toMatchObject({ lon: expect.closeTo(13.62, 3), lat: expect.closeTo(52.43, 3) });
    await expect.poll(() => page.getByRole('status').filter({ hasText: 'Objekte geladen' }).textContent(), { timeout: 20_000 }).toBe('1 Objekte geladen');
    // Enter flies to the first feature found, as well.
    await page.goto(`${stack.webUrl}/?center=13.4,52.52&zoom=16`);
    await page.getByLabel('Suche', { exact: true }).fill('Turmstraße');
    await page.getByLabel('Suche', { exact: true }).press('Enter');
    await expect.poll(() => viewOf(page), { timeout: 10_000 }).toMatchObject({ lon: expect.closeTo(13.62, 3), lat: expect.closeTo(52.43, 3) });
    violations.push(...(await seriousViolations(page)));
    expect(violations).toEqual([]);
  });

  it('finds places through the configured geocoder on Enter only, and flies there', async () => {
    geocoderQueries.length = 0;
    const page = await visitor();
    await page.goto(`${stack.webUrl}/?center=13.3,52.4&zoom=14`);
    const box = page.getByLabel('Suche', { exact: true });
    await box.fill('Rathaus');
    await page.waitForTimeout(800);
    expect(geocoderQueries).toEqual([]); // no search-as-you-type (Nominatim's usage policy)
    await box.press('Enter');
    const place = page.getByRole('button', { name: 'Rotes Rathaus, Rathausstraße 15, Berlin' });
    await place.waitFor({ timeout: 10_000 });
    expect(geocoderQueries).toEqual(['/search?format=jsonv2&q=Rathaus&limit=5&accept-language=de']);
    expect(await page.getByText('Testorte').count()).toBe(1);
    await place.click();
    await expect.poll(() => viewOf(page), { timeout: 10_000 }).toMatchObject({ lon: expect.closeTo(13.4086, 2), lat: expect.closeTo(52.5186, 2) });
  });

  it('"Mein Standort" flies to the browser’s location', async () => {
    // On a phone, for the documentation's screenshot.
    const page = await visitor({ geolocation: { longitude: 13.45, latitude: 52.49, accuracy: 25 }, permissions: ['geolocation'], viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    await page.goto(`${stack.webUrl}/?center=13.3,52.4&zoom=13`);
    await page.getByRole('button', { name: 'Mein Standort' }).click();
    await expect.poll(() => viewOf(page), { timeout: 10_000 }).toEqual({ lon: expect.closeTo(13.45, 4), lat: expect.closeTo(52.49, 4), zoom: 17 });
    expect(await page.getByText('Ihr Standort (Genauigkeit etwa 25 m)').count()).toBe(1);
    await page.screenshot({ path: join(repoRoot, 'docs/images/map-phone.png') });
  });

  it('the address follows the view, and a reload opens the same view', async () => {
    const page = await visitor();
    await page.goto(`${stack.webUrl}/?center=13.35,52.42&zoom=15`);
    // Panned and zoomed with the map's keys (arrows, +).
    await page.getByRole('region', { name: 'Karte der Objekte' }).focus();
    await page.keyboard.press('ArrowRight');
    await expect.poll(() => viewOf(page).lon, { timeout: 10_000 }).toBeGreaterThan(13.351);
    await page.keyboard.press('ArrowUp');
    await expect.poll(() => viewOf(page).lat, { timeout: 10_000 }).toBeGreaterThan(52.4201);
    await page.keyboard.press('+');
    await expect.poll(() => viewOf(page).zoom, { timeout: 10_000 }).toBe(16);
    expect(new URL(page.url()).search).toMatch(/^\?center=13\.\d{5},52\.\d{5}&zoom=16$/);
    await page.waitForTimeout(600);
    const moved = viewOf(page);
    expect(moved.lat).toBeGreaterThan(52.42);
    await page.reload();
    const center = await page.evaluate(() => {
      const map = (window as unknown as { fpMap: { olMap: { getView(): { getCenter(): number[]; getZoom(): number } } } }).fpMap.olMap.getView();
      return { x: map.getCenter()[0]!, zoom: map.getZoom() };
    });
    expect(center.zoom).toBeCloseTo(moved.zoom, 2);
    expect(viewOf(page)).toEqual(moved);
  });

  it('/features pages through the API with "Nächste Seite" and finds "Alter" beyond the first 5 000', async () => {
    const page = await visitor();
    await page.goto(`${stack.webUrl}/features?q=Alter`);
    await expect(page.getByRole('link', { name: 'Alter Wasserturm', exact: true }).isVisible()).resolves.toBe(true);
    expect(await page.getByRole('status').textContent()).toBe('1 Objekte auf dieser Seite');
    expect(await page.getByRole('link', { name: 'Nächste Seite' }).count()).toBe(0);

    await page.goto(`${stack.webUrl}/features`);
    const names = () => page.locator('tbody tr th, tbody tr td:first-child').allTextContents();
    const first = await names();
    expect(first).toHaveLength(100);
    await page.getByRole('link', { name: 'Nächste Seite' }).click();
    await page.waitForURL(/cursor=/);
    const second = await names();
    expect(second).toHaveLength(100);
    expect(second.filter((name) => first.includes(name))).toEqual([]);
    await page.getByRole('link', { name: 'Erste Seite' }).click();
    expect(await names()).toEqual(first);
    // The search and the filters travel with the cursor: page two of "Gartenweg 1" (1, 10…19, 100…).
    await page.goto(`${stack.webUrl}/features?q=Gartenweg+1&kategorie=blumenbeet`);
    await page.getByRole('link', { name: 'Nächste Seite' }).click();
    expect(new URL(page.url()).searchParams.get('q')).toBe('Gartenweg 1');
    for (const name of await names()) expect(name).toMatch(/^Beet 1/);
    violations.push(...(await seriousViolations(page)));
    expect(violations).toEqual([]);
  });
});
