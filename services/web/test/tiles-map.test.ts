/**
 * A dense view in a real browser: the map draws it from vector tiles that a Web Worker fetched and
 * decoded (lib/tile-decoder.ts, lib/tile-worker.ts), counts every feature once, and a click on a
 * feature drawn from a tile opens it; below zoom 12 the overview draws the same tiles onto canvases
 * (lib/overview-tiles.ts) and counts and opens features too — against the real API on PostGIS.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { launchChromium, missingForBrowserTests, seriousViolations, startWebStack, type WebStack } from './harness.js';

const missing = missingForBrowserTests();
if (missing) console.log(`skipping the vector tile map test: ${missing}`);

// 60 × 50 small squares, 0.001° × 0.0006° apart: 3 000 features, more than one list page (1 000).
const COLUMNS = 60;
const ROWS = 50;
const ORIGIN = [13.3, 52.4] as const;
const STEP = [0.001, 0.0006] as const;
/** Every view of the grid is centred on its feature in row 25, column 30. */
const CENTRE = [ORIGIN[0] + 30 * STEP[0] + STEP[0] / 4, ORIGIN[1] + 25 * STEP[1] + STEP[1] / 4] as const;

describe.skipIf(missing !== undefined)('a dense view drawn from vector tiles', () => {
  let stack: WebStack;
  let browser: Browser;

  beforeAll(async () => {
    stack = await startWebStack();
    // Vector tiles on every engine: ST_AsMVT on PostGIS, encoded in the API where PGlite lacks it.
    const probe = await stack.api('GET', '/api/tiles/0/0/0.mvt');
    expect(probe.status).toBe(200);
    await stack.db.pool.query(
      `INSERT INTO features.features (id, name, kategorie, geom)
       SELECT 't' || lpad(i::text, 4, '0'), 'Kachel ' || i, (ARRAY['friedhof','blumenbeet','denkmal'])[1 + i % 3],
              ST_MakeEnvelope($1::float8 + (i % $3::int) * $4::float8, $2::float8 + (i / $3::int) * $5::float8,
                              $1::float8 + (i % $3::int) * $4::float8 + $4::float8 / 2, $2::float8 + (i / $3::int) * $5::float8 + $5::float8 / 2, 4326)
       FROM generate_series(0, $6::int - 1) AS i`,
      [ORIGIN[0], ORIGIN[1], COLUMNS, STEP[0], STEP[1], COLUMNS * ROWS],
    );
    browser = await launchChromium();
  }, 300_000);
  afterAll(async () => {
    await browser?.close();
    await stack?.close();
  });

  /**
   * The grid at `zoom`, centred on the feature in row 25, column 30, in a fresh English browser that
   * reports `cores` cores; waits until the status line counts all 3 000 features (written with or
   * without a thousands separator). Returns the page and the tile requests it made.
   */
  async function openGrid(zoom: number, cores?: number) {
    const browserContext = await browser.newContext({ locale: 'en-GB', viewport: { width: 1100, height: 800 } });
    // The map decodes tiles in a worker only on devices with cores to spare (lib/tile-decoder.ts).
    if (cores !== undefined) await browserContext.addInitScript((count) => Object.defineProperty(navigator, 'hardwareConcurrency', { get: () => count }), cores);
    const page = await browserContext.newPage();
    const tileRequests: string[] = [];
    page.on('request', (request) => {
      if (/\/api\/tiles\/\d+\/\d+\/\d+\.mvt(\?|$)/.test(request.url())) tileRequests.push(request.url());
    });
    await page.goto(`${stack.webUrl}/?center=${CENTRE.join(',')}&zoom=${zoom}`);
    await expect.poll(() => page.getByRole('status').textContent(), { timeout: 60_000 }).toMatch(/^3\D?000 features loaded$/);
    return { browserContext, page, tileRequests };
  }

  /** Clicks the middle of the map, where the feature in row 25, column 30 lies. */
  async function clickMapCentre(page: Page) {
    const box = (await page.getByRole('region', { name: 'Map of the features' }).boundingBox())!;
    await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
  }

  /**
   * Searches the view for one name, then clears the search: the status line counts what is drawn,
   * 1 and then all 3 000 again. Tiles from zoom 12 on hold names, so the tiles already in the browser
   * serve the search; the overview's hold none, so it asks the API for the view's tiles filtered by
   * the name, and only for those. Clearing the search redraws from the bytes already held: no request.
   */
  async function searchByName(page: Page, tileRequests: string[], where: 'tiles' | 'overview') {
    const requested = tileRequests.length;
    const search = page.getByLabel('Search', { exact: true });
    await search.fill('Kachel 1234');
    await expect.poll(() => page.getByRole('status').textContent(), { timeout: 15_000 }).toBe('1 features loaded');
    const searched = tileRequests.slice(requested);
    if (where === 'tiles') expect(searched).toEqual([]);
    else {
      expect(searched.length).toBeGreaterThan(0);
      expect(searched.filter((url) => !url.endsWith('.mvt?name=kachel%201234'))).toEqual([]);
    }
    await search.fill('');
    await expect.poll(() => page.getByRole('status').textContent(), { timeout: 15_000 }).toMatch(/^3\D?000 features loaded$/);
    expect(tileRequests).toHaveLength(requested + searched.length);
  }

  for (const cores of [8, 2]) {
    const decoder = cores >= 4 ? 'a worker' : 'the main thread';
    it(`counts every feature of the view once from tiles decoded in ${decoder} (${cores} cores), and a click on one opens it`, async () => {
      const { browserContext, page, tileRequests } = await openGrid(13.5, cores);
      expect(tileRequests.length).toBeGreaterThan(0);
      expect(page.workers().some((worker) => /tile-worker/.test(worker.url()))).toBe(cores >= 4);

      await clickMapCentre(page);
      const id = `t${String(25 * COLUMNS + 30).padStart(4, '0')}`;
      await expect.poll(() => page.getByRole('link', { name: `Kachel ${25 * COLUMNS + 30}` }).getAttribute('href'), { timeout: 15_000 }).toBe(`/features/${id}`);
      await searchByName(page, tileRequests, 'tiles');
      expect(await seriousViolations(page)).toEqual([]);
      await browserContext.close();
    });
  }

  it('draws the overview below zoom 12 from the same tiles: features crossing a tile edge are counted once, and a click opens a feature under the pointer', async () => {
    const { browserContext, page, tileRequests } = await openGrid(10);
    // The grid's last column straddles the edge of the zoom-10 tiles x 549 and 550 (13.359375°E): those
    // squares are in both tiles, and still counted once.
    expect(tileRequests.some((url) => url.includes('/api/tiles/10/549/'))).toBe(true);
    expect(tileRequests.some((url) => url.includes('/api/tiles/10/550/'))).toBe(true);
    // The page asked for the first view's tiles while it was parsed (lib/first-view.ts), and
    // OpenLayers drew from those answers: every tile it drew was a preload, none was fetched twice.
    expect(new Set(tileRequests).size).toBe(tileRequests.length);
    const initiators = await page.evaluate(() => (performance.getEntriesByType('resource') as PerformanceResourceTiming[]).filter((entry) => entry.name.includes('/api/tiles/')).map((entry) => entry.initiatorType));
    expect(initiators).toEqual(tileRequests.map(() => 'link'));
    // Requested nearest the view's centre first, as OpenLayers orders its own: over HTTP/1.1 six leave
    // at a time, and a city's densest (slowest) tiles are usually at its centre.
    const n = 2 ** 10;
    const centreX = ((CENTRE[0] + 180) / 360) * n;
    const latitude = (CENTRE[1] * Math.PI) / 180;
    const centreY = ((1 - Math.log(Math.tan(latitude) + 1 / Math.cos(latitude)) / Math.PI) / 2) * n;
    const fromCentre = tileRequests.map((url) => {
      const [x, y] = /\/10\/(\d+)\/(\d+)\.mvt$/.exec(url)!.slice(1).map(Number) as [number, number];
      return Math.hypot(x + 0.5 - centreX, y + 0.5 - centreY);
    });
    expect(fromCentre.length).toBeGreaterThan(4);
    expect(fromCentre).toEqual([...fromCentre].sort((a, b) => a - b));

    // The overview's canvases hold no features to hit: the click asks the API what lies under it.
    const lookups: string[] = [];
    page.on('request', (request) => {
      if (/\/api\/features\?bbox=/.test(request.url())) lookups.push(request.url());
    });
    await clickMapCentre(page);
    const link = page.getByRole('link', { name: /^Kachel \d+$/ });
    await expect.poll(() => link.count(), { timeout: 15_000 }).toBe(1);
    // A few pixels around the pointer hold several squares at this zoom; the one opened is among them.
    const opened = Number(/^\/features\/t(\d{4})$/.exec((await link.getAttribute('href')) ?? '')?.[1]);
    expect(Math.abs(Math.floor(opened / COLUMNS) - 25)).toBeLessThanOrEqual(6);
    expect(Math.abs((opened % COLUMNS) - 30)).toBeLessThanOrEqual(6);
    expect(lookups).toHaveLength(1);
    // The overview asks for its tiles filtered by the search, and redraws the whole ones from their bytes.
    await searchByName(page, tileRequests, 'overview');
    expect(await seriousViolations(page)).toEqual([]);
    await browserContext.close();
  });
});
