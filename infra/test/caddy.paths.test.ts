import { createServer as createHttpServer, type Server } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { closeGracefully, listen } from '../../services/shared/http-server.js';
import type { ProxyRoute } from '../caddy.js';
import { proxyRoutes } from '../routes.js';
import { CaddyRunner, EXAMPLE_DOMAINS, send } from '../testing/caddy-runner.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

const MISSING = lacks('the proxy path normalisation tests in a real Caddy', requirements.caddy());

/**
 * GeoServer's guarded paths (/geoserver/rest*, /geoserver/web*) behind the rendered Caddyfile in a real
 * Caddy on loopback, with the stack's own GeoServer route (infra/routes.ts) pointed at stand-ins.
 *
 * Why: Caddy matches `path` on the decoded, cleaned path, but hands the upstream the path as the
 * client wrote it, and Tomcat reads it differently: it drops `;` path parameters in every segment
 * (`/geoserver;jsessionid=1/rest/x` is /geoserver/rest/x to GeoServer) and undoes dot segments. Any
 * path the two could read differently must be refused before an upstream sees it.
 */

const DOMAINS = EXAMPLE_DOMAINS;

let geoserver: Server;
let api: Server;
const seenByGeoserver: string[] = [];
const seenByApi: string[] = [];
const caddy = new CaddyRunner();
let outside: number;
let inside: number;

/** What a servlet container may read as a guarded path although Caddy's `path` matcher does not. */
const VARIANTS = [
  // `;` path parameters, which Tomcat strips from each segment.
  '/geoserver;jsessionid=1/rest/workspaces',
  '/geoserver;a/web/',
  '/geoserver/rest;x/workspaces',
  '/geoserver/gwc;x/rest/seed',
  '/geoserver/%3b/rest/workspaces',
  // Encoded dots.
  '/geoserver/%2e/rest/workspaces',
  '/geoserver/%2E/web/',
  '/geoserver/wms/%2e%2e/rest/workspaces',
  '/geoserver/wms/%2E%2E/web/',
  '/geoserver/wms/.%2e/rest/workspaces',
  // Doubled slashes and dot segments.
  '//geoserver/rest/workspaces',
  '/geoserver//rest/workspaces',
  '/geoserver/./rest/workspaces',
  '/geoserver/wms/../rest/workspaces',
  '/geoserver/web/.',
  // Encoded slashes and backslashes, and double encoding.
  '/geoserver%2frest/workspaces',
  '/geoserver%2Fweb/',
  '/geoserver%5crest/workspaces',
  '/geoserver/%252e/rest/workspaces',
];

beforeAll(async () => {
  if (MISSING) return;
  geoserver = createHttpServer((req, res) => {
    seenByGeoserver.push(`${req.method} ${req.url}`);
    res.end(`geoserver saw ${req.url}`);
  });
  // The API's forward-auth answer: a contributor (the route asks it before every write).
  api = createHttpServer((req, res) => {
    seenByApi.push(`${req.method} ${req.url}`);
    res.writeHead(200, { 'x-geodata-user': 'alice', 'x-geodata-role': 'ROLE_CONTRIBUTOR' }).end();
  });
  const geoPort = await listen(geoserver, 0, '127.0.0.1');
  const apiPort = await listen(api, 0, '127.0.0.1');
  const geo = proxyRoutes(DOMAINS, [], { selfServiceUi: false }).find((r) => r.domain === DOMAINS.geo);
  if (!geo?.forwardAuth) throw new Error('the stack has no GeoServer route with forward auth');
  const routes: ProxyRoute[] = [{ ...geo, upstream: `127.0.0.1:${geoPort}`, forwardAuth: { ...geo.forwardAuth, upstream: `127.0.0.1:${apiPort}` } }];
  outside = await caddy.start(['10.0.0.0/8'], routes);
  inside = await caddy.start(['127.0.0.0/8'], routes);
}, 30_000);

afterAll(async () => {
  if (MISSING) return;
  caddy.stopAll();
  await closeGracefully(geoserver, 500);
  await closeGracefully(api, 500);
});

beforeEach(() => {
  seenByGeoserver.length = 0;
  seenByApi.length = 0;
});

describe.skipIf(MISSING)('the proxy matches a normalised path in front of GeoServer', () => {
  it.each(VARIANTS)('refuses %s from outside the internal ranges, and GeoServer never sees it', async (path) => {
    const answer = await send(outside, 'GET', DOMAINS.geo, path);
    expect([400, 403], `${path}: ${answer.status} ${answer.body}`).toContain(answer.status);
    expect(answer.body).not.toContain('geoserver saw');
    expect(seenByGeoserver).toEqual([]);
  });

  it('refuses the same paths from inside too (nothing an operator needs is written so)', async () => {
    for (const path of VARIANTS) {
      const answer = await send(inside, 'GET', DOMAINS.geo, path);
      expect([400, 403], `${path}: ${answer.status}`).toContain(answer.status);
    }
    expect(seenByGeoserver).toEqual([]);
  });

  it('refuses a write under such a path before asking the API or GeoServer', async () => {
    for (const path of ['/geoserver;x/wfs', '/geoserver//wfs', '/geoserver/%2e/wfs']) {
      const answer = await send(outside, 'POST', DOMAINS.geo, path);
      expect([400, 403], path).toContain(answer.status);
    }
    expect(seenByGeoserver).toEqual([]);
  });

  it('still passes the ordinary GeoServer paths, with `;`, `%2e` or `//` in the query string', async () => {
    const passing = [
      '/geoserver/wms?SERVICE=WMS&REQUEST=GetCapabilities',
      '/geoserver/ows?service=WFS&version=2.0.0&request=GetFeature&typeNames=features:features',
      '/geoserver/wms?LAYERS=a;b&STYLES=&BBOX=1,2,3,4&x=%2e%2e%2f&u=http://x//y',
      '/geoserver/gwc/service/wmts?REQUEST=GetCapabilities',
      '/geoserver/features/wfs',
      '/geoserver/www/legend.png',
    ];
    for (const path of passing) {
      const answer = await send(outside, 'GET', DOMAINS.geo, path);
      expect(answer, path).toMatchObject({ status: 200, body: `geoserver saw ${path}` });
    }
    expect(seenByGeoserver).toEqual(passing.map((p) => `GET ${p}`));
  });

  it('keeps the guarded paths for internal clients and refuses them to others', async () => {
    expect(await send(inside, 'GET', DOMAINS.geo, '/geoserver/rest/workspaces')).toMatchObject({ status: 200, body: 'geoserver saw /geoserver/rest/workspaces' });
    expect((await send(outside, 'GET', DOMAINS.geo, '/geoserver/rest/workspaces')).status).toBe(403);
    expect((await send(outside, 'GET', DOMAINS.geo, '/geoserver/web/')).status).toBe(403);
  });

  it('still asks the API before an ordinary write', async () => {
    const answer = await send(outside, 'POST', DOMAINS.geo, '/geoserver/wfs');
    expect(answer.status).toBe(200);
    expect(seenByApi).toEqual(['GET /api/auth/forward']);
    expect(seenByGeoserver).toEqual(['POST /geoserver/wfs']);
  });
});
