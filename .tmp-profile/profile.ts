import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { migrate } from '../services/api/src/db/migrate.js';
import { ensureWebBuild, startWebServer } from '../services/web/launch.js';
import { launchChromium, startTileServer } from '../services/web/test/harness.js';
import { freePort } from '../test/helpers/ports.js';
import { openBenchDatabase, startApiProcess } from '../bench/support.js';

const ORIGIN = [13.35, 52.49] as const;
const STEP = [0.001, 0.0004] as const;
console.log('start'); ensureWebBuild(console.log); console.log('built');
const database = await openBenchDatabase('prof');
const pool = new pg.Pool({ connectionString: database.url, max: 2 });
await migrate(pool);
await pool.query(`INSERT INTO features.features (id, name, kategorie, adresse, geom)
       SELECT 'w' || lpad(i::text, 6, '0'), 'Objekt ' || i, (ARRAY['friedhof','blumenbeet','denkmal'])[1 + i % 3], NULL,
              ST_MakeEnvelope($3::float8 + (i % $5::int) * $6::float8, $4::float8 + (i / $5::int) * $7::float8,
                              $3::float8 + (i % $5::int) * $6::float8 + $6::float8 / 2, $4::float8 + (i / $5::int) * $7::float8 + $7::float8 / 2, 4326)
       FROM generate_series($1::int, $2::int) AS i`, [0, 9999, ORIGIN[0], ORIGIN[1], 100, STEP[0], STEP[1]]);
const tiles = await startTileServer();
const webPort = await freePort();
const webOrigin = `http://127.0.0.1:${webPort}`;
const api = await startApiProcess({ DATABASE_URL: database.url, DATA_DIR: mkdtempSync(join(tmpdir(), 'prof-')), CORS_ORIGINS: webOrigin, WORKER_ENABLED: 'false', LOG_LEVEL: 'info', NODE_ENV: 'development' });
const web = await startWebServer({ port: webPort, env: { API_PUBLIC_URL: api.base, PUBLIC_BASE_URL: webOrigin, BASEMAP_URL: tiles.url, NODE_ENV: 'development' } });
const browser = await launchChromium();
const cityCentre = `${(ORIGIN[0] + 50 * STEP[0]).toFixed(4)},${(ORIGIN[1] + 50 * STEP[1]).toFixed(4)}`;
try {
  for (let run = 0; run < 3; run++) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    if (run === 2) await browser.startTracing(page, { path: '/tmp/webperf11-trace.json', screenshots: false });
    await page.goto(`${web.url}/?center=${cityCentre}&zoom=13`);
    await page.waitForFunction(() => {
      const map = (globalThis as any).document.getElementById('map');
      return map.dataset.loadedAt !== undefined && Number(map.dataset.renderedAt ?? 0) > Number(map.dataset.loadedAt);
    }, undefined, { timeout: 120_000 });
    if (run === 2) await browser.stopTracing();
    const result = await page.evaluate(() => {
      const map = (globalThis as any).document.getElementById('map');
      const entries = performance.getEntriesByType('resource').map((e: any) => `${e.name.replace(/^https?:\/\/[^/]+/, '').slice(0, 60)} start ${e.startTime.toFixed(0)} end ${e.responseEnd.toFixed(0)}`);
      const nav = performance.getEntriesByType('navigation')[0] as any;
      return { renderedAt: map.dataset.renderedAt, loadedAt: map.dataset.loadedAt, loaded: map.dataset.loaded, dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd, entries };
    });
    console.log(JSON.stringify({ ...result, entries: undefined }));
    if (run >= 1) console.log(result.entries.join('\n'));
    await context.close();
  }
} finally {
  await browser.close();
  await web.close();
  await api.stop();
  tiles.server.close();
  await pool.end();
  await database.close();
}
