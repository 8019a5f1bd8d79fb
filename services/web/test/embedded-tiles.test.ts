/**
 * The map on the embedded default (the API on PGlite, as `npm start` runs it): opened below zoom 12 it
 * draws the overview from vector tiles the API encodes itself (PGlite's PostGIS has no ST_AsMVT), so
 * `/?center=13.4,52.525&zoom=11` shows the features at once — it used to stay empty after twelve 501s.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext } from 'playwright-core';
import { launchChromium, missingForBrowserTests, startWebStack, type WebStack } from './harness.js';
import { warmEmbeddedImage } from '../../../test/helpers/embedded-image.js';

const missing = missingForBrowserTests();
if (missing) console.log(`skipping the embedded-database map test: ${missing}`);

describe.skipIf(missing !== undefined)('the map below zoom 12 on the embedded database', () => {
  let stack: WebStack;
  let browser: Browser;
  const contexts: BrowserContext[] = [];

  beforeAll(async () => {
    // The API's fresh data folder starts from the cached image of its schema (.cache/embedded-db): made
    // here first, under this hook's longer timeout, so the harness' wait for /healthz never covers initdb.
    await warmEmbeddedImage();
    // DATABASE_URL empty: the API opens its embedded PGlite in its data folder, as `npm start` does.
    stack = await startWebStack({ apiEnv: { DATABASE_URL: '' } });
    browser = await launchChromium();
    const token = await stack.token('contributor', 'demo');
    const demo = await stack.api<{ imported: number }>('POST', '/api/imports/demo', { token });
    expect(demo.status).toBe(201);
    expect(demo.body.imported).toBe(1000);
  }, 300_000);
  afterAll(async () => {
    for (const context of contexts) await context.close().catch(() => undefined);
    await browser?.close();
    await stack?.close();
  });

  it('shows the demo city at zoom 11 from vector tiles, every tile answered 200', async () => {
    const context = await browser.newContext({ locale: 'en-GB', viewport: { width: 1100, height: 800 } });
    contexts.push(context);
    const page = await context.newPage();
    const tileStatuses: number[] = [];
    page.on('response', (response) => {
      if (/\/api\/tiles\/\d+\/\d+\/\d+\.mvt/.test(response.url())) tileStatuses.push(response.status());
    });
    await page.goto(`${stack.webUrl}/?center=13.4,52.525&zoom=11`);
    await expect.poll(() => page.getByRole('status').first().textContent(), { timeout: 60_000 }).toMatch(/^1\D?000 features loaded$/);
    expect(tileStatuses.length).toBeGreaterThan(0);
    expect(new Set(tileStatuses)).toEqual(new Set([200]));
  }, 120_000);
});
