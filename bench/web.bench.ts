/**
 * The web app in headless Chromium against the API on a real database (BENCH_DATABASE_URL or
 * TEST_DATABASE_URL; PGlite otherwise), each figure with a baseline measured in the same run:
 *
 * 1. navigation → 10 000 features drawn (median of 5), against the baseline of fetching the same pages
 *    of GeoJSON in the same browser without a map (interleaved runs);
 * 2. the longest main-thread task while panning across them, against panning the same map with no
 *    features in view;
 * 3. gzip size of the JavaScript the map page loads, against the 250 KB budget;
 * 4. the API benchmark's 100 000 features (bench/feature-grid.ts, copied from the template database of
 *    bench/grid-database.ts): navigation → the whole grid drawn from vector tiles, p50 and p99; and in
 *    the same run one tile of that view through the API against the raw ST_AsMVT query through pg
 *    (interleaved). Skipped with one line when the API cannot serve tiles (PGlite).
 *
 * BENCH_WEB_ONLY=city runs part 4 alone. Needs Chromium (CHROMIUM_PATH, default /usr/bin/chromium);
 * skips with one line without it.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import pg from 'pg';
import type { Browser } from 'playwright-core';
import { migrate } from '../services/api/src/db/migrate.js';
import { rawTileQuery } from '../services/api/src/tiles/queries.js';
import { ensureWebBuild, startWebServer } from '../services/web/launch.js';
import { CHROMIUM, launchChromium, startTileServer } from '../services/web/test/harness.js';
import { freePort } from '../services/shared/testing/ports.js';
import { GRID_TOTAL } from './feature-grid.js';
import { openGridDatabase } from './grid-database.js';
import { median, percentile, printTable, ratio } from './stats.js';
import { baselinePool, openBenchDatabase, startApiProcess } from './support.js';

/** What the page functions below touch, typed here because the root tsconfig has no DOM library. */
interface MapElement {
  dataset: Record<string, string | undefined>;
}
interface PageGlobals {
  document: { getElementById(id: string): MapElement };
  longest: number;
  PerformanceObserver: typeof PerformanceObserver;
}

const RUNS = Number(process.env.BENCH_WEB_RUNS ?? 5);
/** BENCH_WEB_ONLY=city runs part 4 alone (the other parts take a minute and do not change with tiles). */
const ONLY_CITY = process.env.BENCH_WEB_ONLY === 'city';
const TILE_ROUNDS = process.env.BENCH_QUICK === '1' ? 10 : 40;
// The city: a 100 × 100 grid of small squares (10 000 features) around Berlin-Mitte.
const ORIGIN = [13.35, 52.49] as const;
const STEP = [0.001, 0.0004] as const;

async function seed(pool: pg.Pool, total: number, columns: number): Promise<void> {
  for (let start = 0; start < total; start += 10_000) {
    await pool.query(
      `INSERT INTO features.features (id, name, kategorie, adresse, geom)
       SELECT 'w' || lpad(i::text, 6, '0'), 'Objekt ' || i, (ARRAY['friedhof','blumenbeet','denkmal'])[1 + i % 3], NULL,
              ST_MakeEnvelope($3::float8 + (i % $5::int) * $6::float8, $4::float8 + (i / $5::int) * $7::float8,
                              $3::float8 + (i % $5::int) * $6::float8 + $6::float8 / 2, $4::float8 + (i / $5::int) * $7::float8 + $7::float8 / 2, 4326)
       FROM generate_series($1::int, $2::int) AS i`,
      [start, Math.min(total, start + 10_000) - 1, ORIGIN[0], ORIGIN[1], columns, STEP[0], STEP[1]],
    );
  }
  await pool.query('ANALYZE features.features');
}

/** The slippy-map tile (z, x, y) holding a lon/lat. */
function tileAt(lon: number, lat: number, z: number): { z: number; x: number; y: number } {
  const n = 2 ** z;
  const rad = (lat * Math.PI) / 180;
  return { z, x: Math.floor(((lon + 180) / 360) * n), y: Math.floor(((1 - Math.log(Math.tan(rad) + 1 / Math.cos(rad)) / Math.PI) / 2) * n) };
}

/**
 * 4. The API benchmark's 100 000 features (bench/feature-grid.ts: 10° × 1° of small squares): navigation
 * → the whole grid drawn from tiles (every feature counted once in view), median and p99 of RUNS
 * fresh browser contexts (no HTTP cache). In the same run, interleaved: the p50 and p99 of one of
 * the view's tiles through the API (HTTP, as the browser gets it) against the raw ST_AsMVT query for
 * the same tile through pg.
 */
async function cityFromTiles(browser: Browser, basemapUrl: string): Promise<void> {
  const started = performance.now();
  const database = await openGridDatabase('webcity');
  const pool = baselinePool(database);
  const dataDir = mkdtempSync(join(tmpdir(), 'web-bench-city-'));
  const webPort = await freePort();
  const webOrigin = `http://127.0.0.1:${webPort}`;
  const api = await startApiProcess({ DATABASE_URL: database.url, DATA_DIR: dataDir, CORS_ORIGINS: webOrigin, WORKER_ENABLED: 'false', LOG_LEVEL: 'info', NODE_ENV: 'development' });
  const web = await startWebServer({ port: webPort, env: { API_PUBLIC_URL: api.base, PUBLIC_BASE_URL: webOrigin, BASEMAP_URL: basemapUrl, NODE_ENV: 'development' } });
  console.log(`\n100 000 features (${database.kind}), ready in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  try {
    const viewport = { width: 1280, height: 900 };
    // The zoom at which the whole grid (10.0° × 1.0°, plus a margin) fits the map's box.
    const probe = await browser.newContext({ viewport });
    const probePage = await probe.newPage();
    await probePage.goto(`${web.url}/?center=50,50&zoom=3`);
    const box = (await probePage.getByRole('region', { name: /Karte der Objekte|Map of the features/ }).boundingBox())!;
    await probe.close();
    const zoom = Math.log2(Math.min((box.width * 360) / (256 * 10.4), (box.height * 360) / (256 * 1.4)));
    const cityUrl = `${web.url}/?center=5,0.5&zoom=${zoom.toFixed(3)}`;

    /**
     * A cold visit: one no-op UPDATE per tile around the view's zoom, so every tile's fingerprint
     * changes and the API's server-side cache must build each again (PostgreSQL's buffers stay warm,
     * as on a live server). A warm visit is the next visitor: a fresh browser (no HTTP cache) while
     * the server still holds the tiles.
     */
    const invalidateServerCache = async () => {
      for (let z = Math.floor(zoom) - 1; z <= Math.ceil(zoom) + 1; z++) {
        const [northWest, southEast] = [tileAt(-0.2, 1.2, z), tileAt(10.2, -0.2, z)];
        await pool.query(
          `UPDATE features.features SET name = name WHERE id IN (
             SELECT (SELECT t.id FROM features.tile_features t WHERE t.geom && ST_TileEnvelope($1::int, x, y) LIMIT 1)
             FROM generate_series($2::int, $3::int) x, generate_series($4::int, $5::int) y)`,
          [z, northWest.x, southEast.x, northWest.y, southEast.y],
        );
      }
    };
    const visit = async () => {
      const context = await browser.newContext({ viewport });
      const page = await context.newPage();
      await page.goto(cityUrl);
      await page.waitForFunction(() => {
        const map = (globalThis as unknown as PageGlobals).document.getElementById('map')!;
        return map.dataset.loaded !== undefined && map.dataset.loaded !== 'false' && Number(map.dataset.renderedAt ?? 0) > Number(map.dataset.loadedAt ?? Infinity);
      }, undefined, { timeout: 120_000 });
      const result = await page.evaluate(() => {
        const map = (globalThis as unknown as PageGlobals).document.getElementById('map')!;
        return { ms: Number(map.dataset.renderedAt), held: Number(map.dataset.loaded) };
      });
      await context.close();
      if (result.held !== GRID_TOTAL) throw new Error(`the map drew ${result.held} features from tiles, not the ${GRID_TOTAL} of the grid`);
      return result.ms;
    };
    const cold: number[] = [];
    const warm: number[] = [];
    for (let run = 0; run < RUNS; run++) {
      await invalidateServerCache();
      cold.push(await visit());
      warm.push(await visit());
    }

    // One tile of that view: through the API over HTTP, and the raw query through pg, interleaved.
    const tile = tileAt(5, 0.5, Math.round(zoom));
    const query = rawTileQuery(tile.z, tile.x, tile.y);
    const url = `${api.base}/api/tiles/${tile.z}/${tile.x}/${tile.y}.mvt`;
    // fetch sends Accept-Encoding: gzip and decodes, as the browser does: the API's bytes are gzip.
    const viaApi = async () => Buffer.from(await (await fetch(url)).arrayBuffer());
    const viaSql = async () => (await pool.query<{ tile: Buffer }>(query.text, query.values)).rows[0]!.tile;
    const [first, raw] = [await viaApi(), await viaSql()];
    if (!first.equals(raw)) throw new Error(`API and SQL disagree on ${url}`);
    const apiTimes: number[] = [];
    const sqlTimes: number[] = [];
    const time = async (work: () => Promise<unknown>, into: number[]) => {
      const t0 = performance.now();
      await work();
      into.push(performance.now() - t0);
    };
    for (let round = 0; round < TILE_ROUNDS; round++) {
      if (round % 2 === 0) {
        await time(viaApi, apiTimes);
        await time(viaSql, sqlTimes);
      } else {
        await time(viaSql, sqlTimes);
        await time(viaApi, apiTimes);
      }
    }
    console.log(`navigation → the whole grid drawn from tiles (${GRID_TOTAL.toLocaleString('en')} features, zoom ${zoom.toFixed(2)}, fresh browser each run):`);
    printTable([
      { measure: 'navigation → city drawn, cold server cache (ms)', p50: median(cold).toFixed(0), p99: percentile(cold, 99).toFixed(0), baseline: '—', ratio: '—', target: '≤ 2000 ms' },
      {
        measure: 'navigation → city drawn, second visitor (ms)',
        p50: median(warm).toFixed(0),
        p99: percentile(warm, 99).toFixed(0),
        baseline: `cold p50 ${median(cold).toFixed(0)}`,
        ratio: ratio(median(warm), median(cold)),
        target: '≤ 2000 ms',
      },
      {
        measure: `tile ${tile.z}/${tile.x}/${tile.y} (${(raw.length / 1024).toFixed(0)} KiB), API over HTTP, server cache hit (ms)`,
        p50: median(apiTimes).toFixed(1),
        p99: percentile(apiTimes, 99).toFixed(1),
        baseline: `raw ST_AsMVT through pg: p50 ${median(sqlTimes).toFixed(1)}, p99 ${percentile(sqlTimes, 99).toFixed(1)}`,
        ratio: `p50 ${ratio(median(apiTimes), median(sqlTimes))}, p99 ${ratio(percentile(apiTimes, 99), percentile(sqlTimes, 99))}`,
        target: 'p50 ≤ 1.2×',
      },
    ]);
    console.log(`runs (ms): cold ${cold.map((d) => d.toFixed(0)).join(', ')}; warm ${warm.map((d) => d.toFixed(0)).join(', ')}; ${TILE_ROUNDS} tile rounds (the API's answers are cache hits after the first)`);
  } finally {
    await web.close();
    await api.stop();
    await pool.end();
    await database.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  if (!existsSync(CHROMIUM)) {
    console.log(`skipping the web benchmark: no Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`);
    return;
  }
  ensureWebBuild((message) => console.log(message));
  const database = await openBenchDatabase('web');
  const pool = new pg.Pool({ connectionString: database.url, max: 2 });
  const dataDir = mkdtempSync(join(tmpdir(), 'web-bench-'));
  const tiles = await startTileServer();
  const webPort = await freePort();
  const webOrigin = `http://127.0.0.1:${webPort}`;
  let browser: Browser | undefined;
  const api = await (async () => {
    await migrate(pool);
    await seed(pool, 10_000, 100);
    return startApiProcess({ DATABASE_URL: database.url, DATA_DIR: dataDir, CORS_ORIGINS: webOrigin, WORKER_ENABLED: 'false', LOG_LEVEL: 'info', NODE_ENV: 'development' });
  })();
  const web = await startWebServer({ port: webPort, env: { API_PUBLIC_URL: api.base, PUBLIC_BASE_URL: webOrigin, BASEMAP_URL: tiles.url, NODE_ENV: 'development' } });
  try {
    browser = await launchChromium();
    const cityCentre = `${(ORIGIN[0] + 50 * STEP[0]).toFixed(4)},${(ORIGIN[1] + 50 * STEP[1]).toFixed(4)}`;
    const mapUrl = `${web.url}/?center=${cityCentre}&zoom=13`; // the whole 100 × 100 grid in view
    const viewport = { width: 1280, height: 900 };

    /** Navigation → all features loaded and a complete frame drawn after that, in page time (ms since navigation start). */
    const drawTime = async (): Promise<{ ms: number; held: number }> => {
      const context = await browser!.newContext({ viewport });
      const page = await context.newPage();
      await page.goto(mapUrl);
      await page.waitForFunction(() => {
        const map = (globalThis as unknown as PageGlobals).document.getElementById('map')!;
        return map.dataset.loadedAt !== undefined && Number(map.dataset.renderedAt ?? 0) > Number(map.dataset.loadedAt);
      }, undefined, { timeout: 120_000 });
      const result = await page.evaluate(() => {
        const map = (globalThis as unknown as PageGlobals).document.getElementById('map')!;
        return { ms: Number(map.dataset.renderedAt), held: Number(map.dataset.loaded) };
      });
      await context.close();
      return result;
    };
    /** Baseline: the same GeoJSON pages fetched and parsed in the browser, no map (navigation start → done). */
    const fetchTime = async (): Promise<number> => {
      const context = await browser!.newContext({ viewport });
      const page = await context.newPage();
      await page.goto(`${web.url}/qc`);
      const ms = await page.evaluate(async ({ apiUrl, bbox }) => {
        let url: string | undefined = `${apiUrl}/api/features?bbox=${bbox}&limit=5000`;
        let count = 0;
        while (url) {
          const body = (await (await fetch(url)).json()) as { features: unknown[]; links: Array<{ rel: string; href: string }> };
          count += body.features.length;
          const next = body.links.find((l) => l.rel === 'next')?.href;
          url = next ? new URL(next, apiUrl).toString() : undefined;
        }
        if (count < 10_000) throw new Error(`only ${count} features`);
        return performance.now();
      }, { apiUrl: api.base, bbox: `${ORIGIN[0] - 0.01},${ORIGIN[1] - 0.01},${ORIGIN[0] + 0.11},${ORIGIN[1] + 0.05}` });
      await context.close();
      return ms;
    };

    if (ONLY_CITY) {
      await cityFromTiles(browser, tiles.url);
      return;
    }
    const draws: number[] = [];
    const fetches: number[] = [];
    let held = 0;
    for (let run = 0; run < RUNS; run++) {
      const drawn = await drawTime();
      if (drawn.held !== 10_000) throw new Error(`the map held ${drawn.held} features, not the 10 000 in view`);
      draws.push(drawn.ms);
      held = drawn.held;
      fetches.push(await fetchTime());
    }

    /** Longest main-thread task while dragging the map around (PerformanceObserver longtask). */
    const longestTaskWhilePanning = async (url: string): Promise<number> => {
      const context = await browser!.newContext({ viewport });
      const page = await context.newPage();
      await page.goto(url);
      await page.waitForFunction(() => (globalThis as unknown as PageGlobals).document.getElementById('map')!.dataset.renderedAt !== undefined, undefined, { timeout: 120_000 });
      await page.waitForTimeout(1_000);
      await page.evaluate(() => {
        const w = globalThis as unknown as PageGlobals;
        w.longest = 0;
        new w.PerformanceObserver((list) => {
          for (const entry of list.getEntries()) w.longest = Math.max(w.longest, entry.duration);
        }).observe({ type: 'longtask' as never, buffered: false }); // a browser entry type Node's typings do not list
      });
      const box = (await page.getByRole('region', { name: /Karte der Objekte|Map of the features/ }).boundingBox())!;
      const cx = box.x + box.width / 2;
      const cy = box.y + box.height / 2;
      for (const [dx, dy] of [[300, 0], [-300, 150], [0, -300], [200, 150]] as const) {
        await page.mouse.move(cx, cy);
        await page.mouse.down();
        for (let step = 1; step <= 20; step++) await page.mouse.move(cx + (dx * step) / 20, cy + (dy * step) / 20);
        await page.mouse.up();
        await page.waitForTimeout(400);
      }
      await page.waitForTimeout(1_000);
      const longest = await page.evaluate(() => (globalThis as unknown as PageGlobals).longest);
      await context.close();
      return longest;
    };
    const panFull = await longestTaskWhilePanning(mapUrl);
    const panEmpty = await longestTaskWhilePanning(`${web.url}/?center=12.0,50.0&zoom=13`);

    // JavaScript the map page loads, gzip-compressed as a server would send it.
    const context = await browser.newContext({ viewport });
    const page = await context.newPage();
    const scripts: Promise<number>[] = [];
    page.on('response', (response) => {
      if (response.request().resourceType() === 'script' && response.url().startsWith(web.url)) scripts.push(response.body().then((body) => gzipSync(body, { level: 9 }).length));
    });
    await page.goto(mapUrl, { waitUntil: 'networkidle' });
    const gzipBytes = (await Promise.all(scripts)).reduce((a, b) => a + b, 0);
    await context.close();

    console.log(`database: ${database.kind}; Chromium headless; ${RUNS} runs; ${held} features held by the map`);
    printTable([
      { measure: 'navigation → 10 000 features drawn (median ms)', value: median(draws).toFixed(0), baseline: `${median(fetches).toFixed(0)} (same pages fetched+parsed, no map)`, ratio: ratio(median(draws), median(fetches)), target: '≤ 1500 ms' },
      { measure: 'longest main-thread task while panning (ms)', value: panFull.toFixed(0), baseline: `${panEmpty.toFixed(0)} (same map, nothing in view)`, ratio: panEmpty > 0 ? ratio(panFull, panEmpty) : 'n/a', target: '—' },
      { measure: 'map page JavaScript, gzip (KB)', value: (gzipBytes / 1024).toFixed(1), baseline: '250 (budget)', ratio: ratio(gzipBytes / 1024, 250), target: '≤ 250 KB' },
    ]);
    console.log(`runs (ms) drawn: ${draws.map((d) => d.toFixed(0)).join(', ')}; fetch baseline: ${fetches.map((d) => d.toFixed(0)).join(', ')}`);

    const tileProbe = await fetch(`${api.base}/api/tiles/0/0/0.mvt`);
    await tileProbe.body?.cancel();
    if (tileProbe.status !== 200) {
      console.log(`skipping 100 000 features from tiles: the API answers ${tileProbe.status} for tiles (the embedded PGlite has no ST_AsMVT; set BENCH_DATABASE_URL or TEST_DATABASE_URL)`);
    } else {
      await cityFromTiles(browser, tiles.url);
    }
  } finally {
    await browser?.close();
    await web.close();
    await api.stop();
    tiles.server.close();
    await pool.end();
    await database.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
