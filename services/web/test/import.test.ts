/**
 * The import page in a real headless Chromium against the real API on PostGIS: a contributor finds
 * "Import" in the navigation, chooses a GeoJSON file (English), a CSV file (German), a GeoPackage and a
 * zipped Shapefile with one bad row each, checks it (every row's result in the table, the rows on the map), imports the valid rows with
 * the button that counts them, and the features are there; a guest gets no link and no form.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext } from 'playwright-core';
import { launchChromium, missingForBrowserTests, openPage, seriousViolations, startWebStack, type WebStack } from './harness.js';
import { requirements } from '../../../test/helpers/requirements.js';

const gdal = requirements.gdal();
const missing = missingForBrowserTests() ?? (gdal.ok ? undefined : gdal.reason);
if (missing) console.log(`skipping the import page's browser tests: ${missing}`);

const GEOJSON = JSON.stringify({
  type: 'FeatureCollection',
  features: [
    { type: 'Feature', geometry: { type: 'Point', coordinates: [13.401, 52.501] }, properties: { Bezeichnung: 'Importierter Friedhof', Typ: 'friedhof', Tel: '030 1234' } },
    { type: 'Feature', geometry: { type: 'Polygon', coordinates: [[[13.41, 52.5], [13.411, 52.5], [13.411, 52.501], [13.41, 52.5]]] }, properties: { Bezeichnung: 'Importiertes Beet', Typ: 'blumenbeet', Tel: null } },
    { type: 'Feature', geometry: { type: 'Point', coordinates: [13.42, 52.52] }, properties: { Bezeichnung: 'Spielplatz', Typ: 'spielplatz', Tel: null } },
  ],
});
const CSV = 'name,kategorie,adresse,lon,lat\n"CSV-Denkmal",denkmal,"Platz 1",13.402,52.502\n"CSV-Beet",blumenbeet,,13.403,52.503\n"Ohne Ort",denkmal,,abc,52.5\n';

describe.skipIf(missing !== undefined)('the import page in a browser', () => {
  let stack: WebStack;
  let browser: Browser;
  const contexts: BrowserContext[] = [];

  beforeAll(async () => {
    stack = await startWebStack();
    browser = await launchChromium();
  }, 300_000);
  afterAll(async () => {
    for (const context of contexts) await context.close().catch(() => undefined);
    await browser?.close();
    await stack?.close();
  });

  const names = async () => (await stack.db.pool.query<{ name: string }>('SELECT name FROM features.features ORDER BY name')).rows.map((r) => r.name);

  it('imports a GeoJSON file with a bad row: the check shows each row, the bad one is reported and left out', async () => {
    const page = await openPage(browser, stack.webUrl, contexts, { role: 'contributor', sub: 'ina' }, { locale: 'en-GB' });
    await page.getByRole('navigation').getByRole('link', { name: 'Import' }).click();
    await page.waitForURL(`${stack.webUrl}/import`);
    await page.getByLabel('File').setInputFiles({ name: 'orte.geojson', mimeType: 'application/geo+json', buffer: Buffer.from(GEOJSON) });
    await page.getByRole('button', { name: 'Check' }).click();
    await expect.poll(() => page.getByRole('status').first().textContent(), { timeout: 20_000 }).toBe('3 rows: 2 valid, 1 with problems.');
    // The mapping was guessed from the attribute names: Bezeichnung → name, Typ → kategorie, Tel → telefon.
    expect(await page.getByLabel('Name', { exact: true }).inputValue()).toBe('Bezeichnung');
    expect(await page.getByLabel('Category').inputValue()).toBe('Typ');
    const bad = page.getByRole('row', { name: /Spielplatz/ });
    expect(await bad.textContent()).toMatch(/properties\.kategorie: must be one of friedhof, blumenbeet, denkmal/);
    expect(await page.getByRole('row', { name: /Importierter Friedhof/ }).textContent()).toContain('OK');
    expect(await page.getByRole('region', { name: 'Preview of the import' }).isVisible()).toBe(true);
    expect(await seriousViolations(page)).toEqual([]);
    await page.getByRole('button', { name: 'Import 2 features' }).click();
    await expect.poll(() => page.getByRole('status').first().textContent(), { timeout: 20_000 }).toBe('2 features imported; 1 rows not imported.');
    expect(await names()).toEqual(expect.arrayContaining(['Importierter Friedhof', 'Importiertes Beet']));
    expect(await names()).not.toContain('Spielplatz');
  }, 120_000);

  it('imports a CSV file with coordinates and a bad row (German): Datei, Prüfen, "2 Objekte importieren"', async () => {
    const page = await openPage(browser, stack.webUrl, contexts, { role: 'contributor', sub: 'ina' });
    await page.goto(`${stack.webUrl}/import`);
    await page.getByLabel('Datei').setInputFiles({ name: 'orte.csv', mimeType: 'text/csv', buffer: Buffer.from(CSV) });
    await page.getByRole('button', { name: 'Prüfen' }).click();
    await expect.poll(() => page.getByRole('status').first().textContent(), { timeout: 20_000 }).toBe('3 Zeilen: 2 gültig, 1 mit Fehlern.');
    expect(await page.getByRole('row', { name: /Ohne Ort/ }).textContent()).toMatch(/geometry/);
    await page.getByRole('button', { name: '2 Objekte importieren' }).click();
    await expect.poll(() => page.getByRole('status').first().textContent(), { timeout: 20_000 }).toBe('2 Objekte importiert; 1 Zeilen nicht importiert.');
    expect(await names()).toEqual(expect.arrayContaining(['CSV-Denkmal', 'CSV-Beet']));
    expect(await names()).not.toContain('Ohne Ort');
  }, 120_000);

  /** A GeoPackage and a zipped Shapefile of the GeoJSON's points, written by GDAL (as a user's GIS would). */
  function gdalFile(name: string, driver: string, features = JSON.parse(GEOJSON) as { features: Array<{ geometry: { type: string } }> }): Buffer {
    const dir = mkdtempSync(join(tmpdir(), 'import-page-'));
    try {
      const source = join(dir, 'source.geojson');
      writeFileSync(source, JSON.stringify({ type: 'FeatureCollection', features: features.features.filter((f) => f.geometry.type === 'Point') }));
      execFileSync('ogr2ogr', ['-f', driver, join(dir, name), source], { stdio: 'pipe' });
      return readFileSync(join(dir, name));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  for (const [format, name, driver] of [['GeoPackage', 'punkte.gpkg', 'GPKG'], ['zipped Shapefile', 'punkte.shp.zip', 'ESRI Shapefile']] as const) {
    it(`imports a ${format} with a bad row through the page`, async () => {
      const page = await openPage(browser, stack.webUrl, contexts, { role: 'contributor', sub: 'ina' }, { locale: 'en-GB' });
      await page.goto(`${stack.webUrl}/import`);
      const bytes = gdalFile(name, driver);
      await page.getByLabel('File').setInputFiles({ name: name.replace('.shp.zip', '.zip'), mimeType: 'application/octet-stream', buffer: bytes });
      await page.getByRole('button', { name: 'Check' }).click();
      await expect.poll(() => page.getByRole('status').first().textContent(), { timeout: 20_000 }).toBe('2 rows: 1 valid, 1 with problems.');
      // A Shapefile cuts attribute names to 10 characters: Bezeichnung → Bezeichnun, still taken for the name.
      expect(await page.getByLabel('Name', { exact: true }).inputValue()).toBe(driver === 'ESRI Shapefile' ? 'Bezeichnun' : 'Bezeichnung');
      expect(await page.getByRole('row', { name: /Spielplatz/ }).textContent()).toMatch(/kategorie/);
      await page.getByRole('button', { name: 'Import 1 features' }).click();
      await expect.poll(() => page.getByRole('status').first().textContent(), { timeout: 20_000 }).toBe('1 features imported; 1 rows not imported.');
    }, 120_000);
  }

  it('a guest sees no Import link and no form', async () => {
    const page = await openPage(browser, stack.webUrl, contexts, { role: 'guest', sub: 'gast' }, { locale: 'en-GB' });
    expect(await page.getByRole('navigation').getByRole('link', { name: 'Import' }).count()).toBe(0);
    const response = await page.goto(`${stack.webUrl}/import`);
    expect(response?.status()).toBe(403);
    expect(await page.getByLabel('File').count()).toBe(0);
  });
});
