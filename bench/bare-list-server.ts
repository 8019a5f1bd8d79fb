/**
 * The list's honest baseline for bench/growth.bench.ts: the API's own SQL behind a bare node:http
 * server, in a process of its own as the API is. GET /api/features?bbox=…&limit=… runs the statements
 * the API runs (features/queries.ts listFeatures, read with readPage) on a pool with the API's session
 * settings, and answers the same bytes the API does (the same head and next link, the texts written
 * by the same envelopeBytes); no validation, no hooks, no framework. Anything else is a 404.
 *
 * Environment: DATABASE_URL. Prints {"port":…} once it listens (startServerProcess in support.ts
 * waits for it); ends on SIGTERM.
 */
import { createServer } from 'node:http';
import pg from 'pg';
import { API_SESSION_SETTINGS } from '../services/api/src/db/pool.js';
import { listFeatures, readPage } from '../services/api/src/features/queries.js';
import { encodeCursor, envelopeBytes } from '../services/api/src/features/routes.js';

/** Its backends are told apart from the API's by this name (growth.bench.ts bills their CPU to it). */
export const BARE_APPLICATION_NAME = 'growth-bare-list';

const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL,
  max: 10,
  application_name: BARE_APPLICATION_NAME,
  options: Object.entries(API_SESSION_SETTINGS).map(([name, value]) => `-c ${name}=${value}`).join(' '),
});

const server = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://localhost');
  if (req.method !== 'GET' || url.pathname !== '/api/features') {
    res.writeHead(404).end();
    return;
  }
  const [minLon, minLat, maxLon, maxLat] = (url.searchParams.get('bbox') ?? '').split(',').map(Number) as [number, number, number, number];
  const limit = Number(url.searchParams.get('limit') ?? 100);
  const read = async (from: string | undefined, rows: number) => (await pool.query(listFeatures({ bbox: { minLon, minLat, maxLon, maxLat }, after: from, limit: rows - 1 }))).rows;
  readPage(read, undefined, limit + 1).then(
    (all) => {
      const count = Math.min(all.length, limit);
      const links: Array<{ rel: string; href: string; type: string }> = [];
      if (all.length > limit) {
        url.searchParams.set('cursor', encodeCursor(all[count - 1]![0]));
        links.push({ rel: 'next', href: `${url.pathname}${url.search}`, type: 'application/geo+json' });
        res.setHeader('Link', `<${links[0]!.href}>; rel="next"`);
      }
      const head = `{"type":"FeatureCollection","numberReturned":${count},"links":${JSON.stringify(links)},"features":`;
      const body = envelopeBytes(head, all.slice(0, count).map((row) => row[1]), '}');
      res.writeHead(200, { 'Content-Type': 'application/geo+json; charset=utf-8', 'Content-Length': body.length }).end(body);
    },
    () => res.writeHead(500).end(),
  );
});

server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  console.log(JSON.stringify({ port: typeof address === 'object' && address ? address.port : 0 }));
});
process.once('SIGTERM', () => {
  server.close();
  void pool.end();
});
