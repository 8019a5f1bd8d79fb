/**
 * Two paths of the web app the main browser suite (editing.test.ts) leaves out, in a real headless
 * Chromium against the real API on PostGIS:
 * - the GeoServer WMS overlay: with WMS_URL set (here a local WMS double that records every request),
 *   the map offers the overlay toggle, requests nothing while it is off, and once on asks for GetMap
 *   tiles with the parameters GeoServer expects; without WMS_URL there is no toggle;
 * - drawing a LineString in the editor and saving it (the suite covers Point, Polygon and
 *   MultiPolygon).
 * axe-core checks every page visited.
 */
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Locator, Page } from 'playwright-core';
import { freePort } from '../../shared/testing/ports.js';
import { startWebServer } from '../launch.js';
import { launchChromium, missingForBrowserTests, openPage, seriousViolations, startWebStack, type WebStack } from './harness.js';

const missing = missingForBrowserTests();
if (missing) console.log(`skipping the WMS overlay and LineString browser tests: ${missing}`);

const WMS_LAYERS = 'stadt:objekte';
/** A 1×1 transparent PNG: enough for the map to draw a tile. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=', 'base64');
/** The width of the whole EPSG:3857 world in metres: a tile at zoom z is this divided by 2^z. */
const WORLD_WIDTH = 2 * 20037508.342789244;

interface FeatureBody {
  id: string;
  geometry: { type: string; coordinates: number[][] };
  properties: Record<string, unknown>;
}

/** A WMS double standing in for GeoServer: records each request's query (parameter names upper-cased). */
async function startWmsDouble(): Promise<{ url: string; requests: Array<Map<string, string>>; server: Server }> {
  const requests: Array<Map<string, string>> = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://wms.invalid');
    requests.push(new Map([...url.searchParams].map(([key, value]) => [key.toUpperCase(), value])));
    res.writeHead(200, { 'content-type': 'image/png', 'access-control-allow-origin': '*' });
    res.end(PNG);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}/geoserver/wms`, requests, server };
}

describe.skipIf(missing !== undefined)('the WMS overlay and LineStrings in a browser', () => {
  let stack: WebStack;
  let browser: Browser;
  let wms: Awaited<ReturnType<typeof startWmsDouble>>;
  const contexts: BrowserContext[] = [];
  const violations: string[] = [];

  beforeAll(async () => {
    wms = await startWmsDouble();
    stack = await startWebStack({ webEnv: { WMS_URL: wms.url, WMS_LAYERS } });
    browser = await launchChromium();
  }, 300_000);
  afterAll(async () => {
    for (const context of contexts) await context.close().catch(() => undefined);
    await browser?.close();
    await stack?.close();
    wms?.server.close();
  });

  const newPage = (role?: string, sub?: string): Promise<Page> => openPage(browser, stack.webUrl, contexts, role ? { role, sub: String(sub) } : undefined);

  it('offers the GeoServer overlay, requests nothing while it is off, and GetMap tiles with GeoServer’s parameters once on', async () => {
    const page = await newPage();
    await page.goto(`${stack.webUrl}/`);
    const toggle = page.getByRole('checkbox', { name: 'GeoServer-Ebene (WMS)' });
    await expect.poll(() => toggle.count()).toBe(1);
    expect(await toggle.isChecked()).toBe(false);
    await page.waitForLoadState('networkidle');
    expect(wms.requests).toEqual([]);
    violations.push(...(await seriousViolations(page)));

    await toggle.check();
    await expect.poll(() => wms.requests.length, { timeout: 15_000 }).toBeGreaterThan(0);
    for (const params of wms.requests) {
      expect(Object.fromEntries(params)).toMatchObject({
        SERVICE: 'WMS',
        VERSION: '1.3.0',
        REQUEST: 'GetMap',
        LAYERS: WMS_LAYERS,
        FORMAT: 'image/png',
        TRANSPARENT: 'TRUE',
        CRS: 'EPSG:3857',
        WIDTH: '256',
        HEIGHT: '256',
      });
      // Tiles of the web-mercator grid: a square whose side is the world's width over a power of two.
      const [minX, minY, maxX, maxY] = params.get('BBOX')!.split(',').map(Number) as [number, number, number, number];
      expect(maxX - minX).toBeCloseTo(maxY - minY, 3);
      const zoom = Math.log2(WORLD_WIDTH / (maxX - minX));
      expect(zoom).toBeCloseTo(Math.round(zoom), 6);
    }
    // Turning it off again stops the requests: panning the map asks the WMS for nothing more.
    await toggle.uncheck();
    await page.waitForLoadState('networkidle');
    const seen = wms.requests.length;
    const map = page.getByRole('region', { name: 'Karte der Objekte' });
    const box = (await map.boundingBox())!;
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width / 2 - 300, box.y + box.height / 2 - 200, { steps: 10 });
    await page.mouse.up();
    await page.waitForTimeout(1_000);
    await page.waitForLoadState('networkidle');
    expect(wms.requests.length).toBe(seen);
    expect(violations).toEqual([]);
  });

  it('shows no overlay toggle when no WMS is configured', async () => {
    // The labelled checkbox as the map page renders it (the catalogue in the page names it too).
    const overlayToggle = /<input[^>]*type="checkbox"[^>]*>\s*GeoServer-Ebene \(WMS\)<\/label>/;
    const page = (base: string) => fetch(`${base}/`, { headers: { 'accept-language': 'de' } }).then((response) => response.text());
    expect(await page(stack.webUrl)).toMatch(overlayToggle);
    const plain = await startWebServer({ port: await freePort(), env: { API_PUBLIC_URL: stack.apiUrl, NODE_ENV: 'development' } });
    try {
      const html = await page(plain.url);
      expect(html).toContain('<title>Karte');
      expect(html).not.toMatch(overlayToggle);
    } finally {
      await plain.close();
    }
  });

  /** Pixel positions relative to the map's top-left corner. */
  async function clickOnMap(map: Locator, points: Array<[number, number]>, last: 'click' | 'dblclick' = 'click'): Promise<void> {
    const box = (await map.boundingBox())!;
    for (const [index, [x, y]] of points.entries()) {
      if (index === points.length - 1 && last === 'dblclick') await map.page().mouse.dblclick(box.x + x, box.y + y);
      else await map.page().mouse.click(box.x + x, box.y + y);
      await map.page().waitForTimeout(120);
    }
  }

  it('a contributor draws a LineString of three vertices, finishing with a double click, and saves it', async () => {
    const page = await newPage('contributor', 'lena');
    await page.getByRole('link', { name: 'Neues Objekt' }).click();
    await page.waitForURL(/\/features\/new$/);
    const map = page.getByRole('region', { name: 'Karte der Objekte' });
    await page.getByLabel('Geometrietyp').selectOption('LineString');
    // West to east, the middle vertex higher up (north): the saved line must keep that shape.
    await clickOnMap(map, [[120, 300], [300, 150], [480, 300]], 'dblclick');
    await expect.poll(() => page.getByText('Linie mit 1 Teil(en) und 0 Loch/Löchern').count()).toBe(1);
    await page.getByLabel('Name', { exact: true }).fill('Lindenallee');
    await page.getByLabel('Kategorie', { exact: true }).selectOption('denkmal');
    violations.push(...(await seriousViolations(page)));
    await page.getByRole('button', { name: 'Speichern' }).click();
    await page.waitForURL((url) => /^\/features\/[^/]+$/.test(url.pathname) && url.pathname !== '/features/new');
    const id = decodeURIComponent(new URL(page.url()).pathname.split('/').pop()!);
    await page.waitForLoadState('load');
    violations.push(...(await seriousViolations(page)));

    const saved = (await stack.api<FeatureBody>('GET', `/api/features/${encodeURIComponent(id)}`)).body;
    expect(saved.geometry.type).toBe('LineString');
    const [west, middle, east] = saved.geometry.coordinates as [number[], number[], number[]];
    expect(saved.geometry.coordinates).toHaveLength(3);
    expect(west[0]!).toBeLessThan(middle[0]!);
    expect(middle[0]!).toBeLessThan(east[0]!);
    expect(middle[1]!).toBeGreaterThan(west[1]!);
    expect(west[1]!).toBeCloseTo(east[1]!, 6);
    expect(saved.properties).toMatchObject({ name: 'Lindenallee', kategorie: 'denkmal', createdBy: 'lena' });

    // The list shows it, and its editor opens with the line (the summary names its type).
    await page.goto(`${stack.webUrl}/features`);
    await expect.poll(() => page.getByRole('link', { name: 'Lindenallee', exact: true }).count()).toBe(1);
    await page.goto(`${stack.webUrl}/features/${encodeURIComponent(id)}/edit`);
    await expect.poll(() => page.getByText('Linie mit 1 Teil(en) und 0 Loch/Löchern').count()).toBe(1);
    expect(violations).toEqual([]);
  });
});
