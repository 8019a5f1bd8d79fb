/**
 * Background maps and offline areas in a real Chromium, with stand-in tile servers on loopback (no
 * internet): the "Hintergrundkarte" switcher is a radio group of config entries (XYZ, WMTS, WMS and a
 * vector style, from a BASEMAPS_FILE written here), each chosen one loads from its server, an
 * unreachable one is said on the map; "Diesen Bereich offline verfügbar machen" estimates, shows its
 * progress, keeps the tiles and the area's features, refuses a source whose terms forbid it, and the
 * kept tiles draw the map when the tile server is gone.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { loadBasemaps } from '../src/basemaps.js';
import { launchChromium, missingForBrowserTests, openPage, plainTile, repoRoot, seriousViolations, startWebStack, type WebStack } from './harness.js';
import { freePort } from '../../shared/testing/ports.js';

const missing = missingForBrowserTests();
if (missing) console.log(`skipping the background map browser tests: ${missing}`);

describe('config/basemaps.yaml (src/basemaps.ts)', () => {
  it('reads the shipped file: OpenStreetMap first, basemap.de vector and raster, GeoServer and the aerial example only where configured', () => {
    const shipped = loadBasemaps({ BASEMAPS_FILE: join(repoRoot, 'config/basemaps.yaml') });
    expect(shipped.map((b) => `${b.id}:${b.type}`)).toEqual(['osm:xyz', 'basemapde-vektor:vector-style', 'basemapde-raster:wmts']);
    expect(shipped.every((b) => b.attribution.length > 0)).toBe(true);
    // tile.openstreetmap.org's usage policy: no offline downloads.
    expect(shipped[0]!.offline.allowed).toBe(false);
    const configured = loadBasemaps({ BASEMAPS_FILE: join(repoRoot, 'config/basemaps.yaml'), WMS_URL: 'https://geo.example.org/wms', AERIAL_WMS_URL: 'https://luftbild.example.org/wms' });
    expect(configured.map((b) => b.id)).toEqual(['osm', 'basemapde-vektor', 'basemapde-raster', 'geoserver', 'luftbild']);
    expect(configured[3]).toMatchObject({ type: 'wms', url: 'https://geo.example.org/wms', layers: 'features:features' });
    // BASEMAP_URL comes first and is the default.
    expect(loadBasemaps({ BASEMAPS_FILE: join(repoRoot, 'config/basemaps.yaml'), BASEMAP_URL: 'http://tiles.example/{z}/{x}/{y}.png' })[0]).toMatchObject({ id: 'configured', url: 'http://tiles.example/{z}/{x}/{y}.png' });
  });

  it('refuses a file with an unknown type, naming the entry', () => {
    const dir = mkdtempSync(join(tmpdir(), 'basemaps-'));
    try {
      writeFileSync(join(dir, 'b.yaml'), 'basemaps:\n  - { id: a, title: { de: A, en: A }, type: tms, url: "http://x/{z}", attribution: x }\n');
      expect(() => loadBasemaps({ BASEMAPS_FILE: join(dir, 'b.yaml') })).toThrow(/BASEMAPS_FILE .*basemaps\.0\.type/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.skipIf(missing !== undefined)('background maps and offline areas, in a browser', () => {
  let stack: WebStack;
  let browser: Browser;
  let tiles: Server;
  let dir: string;
  const requests: string[] = [];
  let serverDown = false;
  const contexts: BrowserContext[] = [];
  const violations: string[] = [];

  beforeAll(async () => {
    const png = plainTile();
    const style = { version: 8, sources: {}, layers: [{ id: 'land', type: 'background', paint: { 'background-color': '#d9e8c0' } }] };
    tiles = createServer((req, res) => {
      requests.push(req.url ?? '');
      if (serverDown) {
        res.writeHead(503, { 'access-control-allow-origin': '*' });
        res.end();
        return;
      }
      if (req.url === '/style.json') {
        res.writeHead(200, { 'content-type': 'application/json', 'access-control-allow-origin': '*' });
        res.end(JSON.stringify(style));
        return;
      }
      res.writeHead(200, { 'content-type': 'image/png', 'access-control-allow-origin': '*', 'cache-control': 'no-store' });
      res.end(png);
    });
    await new Promise<void>((resolve) => tiles.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(tiles.address() as { port: number }).port}`;
    const closed = `http://127.0.0.1:${await freePort()}`;
    dir = mkdtempSync(join(tmpdir(), 'basemaps-'));
    const file = join(dir, 'basemaps.yaml');
    writeFileSync(
      file,
      `basemaps:
  - { id: raster, title: { de: Test-Raster, en: Test raster }, type: xyz, url: "${base}/xyz/{z}/{x}/{y}.png", attribution: "© Testkarte", maxZoom: 19, offline: { allowed: true, maxTiles: 400 } }
  - { id: wmts, title: { de: Test-WMTS, en: Test WMTS }, type: wmts, url: "${base}/wmts/{TileMatrix}/{TileRow}/{TileCol}.png", attribution: "© WMTS-Test" }
  - { id: wms, title: { de: Test-WMS, en: Test WMS }, type: wms, url: "${base}/wms", layers: "stadt:karte", attribution: "© WMS-Test" }
  - { id: vektor, title: { de: Test-Vektor, en: Test vector }, type: vector-style, url: "${base}/style.json", attribution: "© Vektor-Test" }
  - { id: osm-policy, title: { de: Nur online, en: Online only }, type: xyz, url: "${base}/policy/{z}/{x}/{y}.png", attribution: "© Nur online", offline: { allowed: false } }
  - { id: gone, title: { de: Nicht erreichbar, en: Unreachable }, type: xyz, url: "${closed}/{z}/{x}/{y}.png", attribution: "© Nirgends" }
`,
    );
    stack = await startWebStack({ webEnv: { BASEMAPS_FILE: file, BASEMAP_URL: '' } });
    browser = await launchChromium();
  }, 300_000);
  afterAll(async () => {
    for (const context of contexts) await context.close().catch(() => undefined);
    await browser?.close();
    await stack?.close();
    tiles?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const note = (page: Page) => page.getByText('Keine Hintergrundkarte erreichbar: die Objekte werden ohne Karte darunter gezeigt.');
  const requestsSince = (count: number, prefix: string) => requests.slice(count).filter((url) => url.startsWith(prefix));

  it('"Hintergrundkarte" opens a radio group of the configured sources; each loads from its server; an unreachable one is said on the map', async () => {
    const page = await openPage(browser, stack.webUrl, contexts);
    await page.goto(`${stack.webUrl}/?center=13.4,52.52&zoom=14`);
    await expect.poll(() => requestsSince(0, '/xyz/').length, { timeout: 15_000 }).toBeGreaterThan(0);
    expect(await page.getByText('© Testkarte').count()).toBeGreaterThan(0);
    await page.getByRole('button', { name: 'Hintergrundkarte' }).click();
    const group = page.getByRole('radiogroup', { name: 'Hintergrundkarte' });
    await group.waitFor();
    expect(await group.getByRole('radio').evaluateAll((radios) => radios.map((radio) => (radio as HTMLInputElement).labels?.[0]?.textContent?.trim()))).toEqual(['Test-Raster', 'Test-WMTS', 'Test-WMS', 'Test-Vektor', 'Nur online', 'Nicht erreichbar']);
    expect(await group.getByRole('radio', { name: 'Test-Raster' }).isChecked()).toBe(true);
    violations.push(...(await seriousViolations(page)));

    let seen = requests.length;
    await group.getByRole('radio', { name: 'Test-WMTS' }).check();
    await expect.poll(() => requestsSince(seen, '/wmts/').length, { timeout: 10_000 }).toBeGreaterThan(0);
    expect(requestsSince(seen, '/wmts/').every((url) => /^\/wmts\/14\/\d+\/\d+\.png$/.test(url))).toBe(true);
    seen = requests.length;
    await group.getByRole('radio', { name: 'Test-WMS' }).check();
    await expect.poll(() => requestsSince(seen, '/wms?').length, { timeout: 10_000 }).toBeGreaterThan(0);
    const wms = new URL(requestsSince(seen, '/wms?')[0]!, 'http://x').searchParams;
    expect([wms.get('SERVICE'), wms.get('REQUEST'), wms.get('LAYERS')]).toEqual(['WMS', 'GetMap', 'stadt:karte']);
    seen = requests.length;
    await group.getByRole('radio', { name: 'Test-Vektor' }).check();
    await expect.poll(() => requestsSince(seen, '/style.json').length, { timeout: 10_000 }).toBe(1);
    await expect.poll(() => page.getByText('© Vektor-Test').count()).toBeGreaterThan(0);
    expect(await note(page).isVisible()).toBe(false);

    await group.getByRole('radio', { name: 'Nicht erreichbar' }).check();
    await expect.poll(() => note(page).isVisible(), { timeout: 15_000 }).toBe(true);
    await page.screenshot({ path: join(repoRoot, 'docs/images/map-no-basemap.png') });
    await group.getByRole('radio', { name: 'Test-Raster' }).check();
    await expect.poll(() => note(page).isVisible(), { timeout: 10_000 }).toBe(false);
    // The choice is remembered.
    await group.getByRole('radio', { name: 'Test-WMTS' }).check();
    await page.reload();
    await page.getByRole('button', { name: 'Hintergrundkarte' }).click();
    expect(await page.getByRole('radio', { name: 'Test-WMTS' }).isChecked()).toBe(true);
    expect(violations).toEqual([]);
  });

  it('makes an area available offline: estimate, progress bar, tiles and features kept; refused where the terms forbid it; kept tiles draw without the tile server', async () => {
    const token = await stack.token('contributor', 'olga');
    for (const [index, lon] of [13.401, 13.402, 13.403].entries()) {
      const { status } = await stack.api('POST', '/api/features', { token, body: { type: 'Feature', geometry: { type: 'Point', coordinates: [lon, 52.5201] }, properties: { name: `Feldobjekt ${index + 1}`, kategorie: 'denkmal' } } });
      expect(status).toBe(201);
    }
    const page = await openPage(browser, stack.webUrl, contexts, { role: 'contributor', sub: 'olga' });
    await page.goto(`${stack.webUrl}/?center=13.402,52.5201&zoom=16`);
    await page.getByRole('button', { name: 'Hintergrundkarte' }).click();
    await page.getByRole('radio', { name: 'Nur online' }).check();
    await page.getByRole('button', { name: 'Diesen Bereich offline verfügbar machen' }).click();
    const panel = page.getByRole('region', { name: 'Diesen Bereich offline verfügbar machen' });
    await expect.poll(() => panel.locator('#offline-estimate').textContent()).toBe('„Nur online“ erlaubt kein Herunterladen für die Offline-Nutzung. Bitte eine andere Hintergrundkarte wählen; die Objekte werden trotzdem gespeichert.');

    await page.getByRole('radio', { name: 'Test-Raster' }).check();
    await expect.poll(() => panel.locator('#offline-estimate').textContent()).toMatch(/^\d+ Kacheln von „Test-Raster“ \(Zoom 16–1[6-9], etwa [\d,]+ MB\) und die Objekte dieses Bereichs\.$/);
    const planned = Number((await panel.locator('#offline-estimate').textContent())!.split(' ')[0]);
    expect(planned).toBeGreaterThan(20);
    expect(planned).toBeLessThanOrEqual(400);
    const seen = requests.length;
    await panel.getByRole('button', { name: 'Herunterladen' }).click();
    const bar = panel.getByRole('progressbar', { name: 'Fortschritt des Herunterladens' });
    await bar.waitFor();
    await expect.poll(() => panel.locator('#offline-result').textContent(), { timeout: 60_000 }).toBe(`${planned} Kacheln und 3 Objekte offline gespeichert.`);
    expect(await bar.evaluate((element: HTMLProgressElement) => [element.value, element.max])).toEqual([planned + 1, planned + 1]);
    expect(requestsSince(seen, '/xyz/').length).toBeGreaterThanOrEqual(planned);
    expect(requestsSince(seen, '/policy/')).toEqual([]);
    const kept = await page.evaluate(async () => (await (await caches.open('fp-offline-tiles')).keys()).length);
    expect(kept).toBe(planned);
    await page.screenshot({ path: join(repoRoot, 'docs/images/map-offline-area.png') });

    // The tile server goes away: the kept tiles draw the map, nothing says it is unreachable.
    serverDown = true;
    const before = requests.length;
    await page.reload();
    await expect.poll(() => page.getByRole('status').filter({ hasText: 'Objekte geladen' }).textContent(), { timeout: 20_000 }).toBe('3 Objekte geladen');
    await page.waitForTimeout(1_500);
    expect(requestsSince(before, '/xyz/16/')).toEqual([]);
    expect(await note(page).isVisible()).toBe(false);
    // The area's features are in the offline store.
    await page.goto(`${stack.webUrl}/offline`);
    await expect.poll(() => page.getByText(/^\d+ Objekte offline verfügbar$/).textContent()).toBe('3 Objekte offline verfügbar');
    serverDown = false;
  });
});
