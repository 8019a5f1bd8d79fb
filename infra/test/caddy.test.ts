import { createServer as createHttpServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeGracefully, listen } from '../../services/shared/http-server.js';
import { renderCaddyfile, type ProxyRoute } from '../caddy.js';
import { CaddyRunner, send } from '../testing/caddy-runner.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

const MISSING = lacks('the Caddyfile tests in a real Caddy', requirements.caddy());

/**
 * The rendered Caddyfile in a real Caddy on loopback (plain HTTP, driven by Host header): routing by
 * domain, and the 403 on /admin for clients outside the internal ranges. Loopback is "outside" in
 * one instance and "inside" in the other.
 */

let upstream: Server;
let upstreamPort: number;
const caddy = new CaddyRunner();
const get = (port: number, host: string, path: string) => send(port, 'GET', host, path).then(({ status, body }) => ({ status, body }));

let outside: number;
let inside: number;

beforeAll(async () => {
  if (MISSING) return;
  upstream = createHttpServer((req, res) => res.end(`upstream saw ${req.headers.host} ${req.url}`));
  upstreamPort = await listen(upstream, 0, '127.0.0.1');
  const routes: ProxyRoute[] = [
    { domain: 'api.example.org', upstream: `127.0.0.1:${upstreamPort}`, description: 'API' },
    { domain: 'geo.example.org', upstream: `127.0.0.1:${upstreamPort}`, internalOnlyPaths: ['/geoserver/rest*'], description: 'GeoServer' },
  ];
  outside = await caddy.start(['10.0.0.0/8', '192.168.0.0/16'], routes);
  inside = await caddy.start(['127.0.0.0/8', '10.0.0.0/8'], routes);
}, 30_000);

afterAll(async () => {
  if (MISSING) return;
  caddy.stopAll();
  await closeGracefully(upstream, 500);
});

describe.skipIf(MISSING)('the rendered Caddyfile in a real Caddy', () => {
  it('routes each domain to its upstream', async () => {
    expect(await get(outside, 'api.example.org', '/features')).toEqual({ status: 200, body: 'upstream saw api.example.org /features' });
  });

  it('answers 403 to /admin from outside the internal ranges, without reaching the upstream', async () => {
    for (const path of ['/admin', '/admin/users', '/administrator']) {
      const response = await get(outside, 'api.example.org', path);
      expect(response.status, path).toBe(403);
      expect(response.body).not.toContain('upstream saw');
    }
    expect((await get(outside, 'geo.example.org', '/geoserver/rest/workspaces')).status).toBe(403);
    expect((await get(outside, 'geo.example.org', '/geoserver/wms')).status).toBe(200);
  });

  it('lets internal clients through to /admin', async () => {
    expect(await get(inside, 'api.example.org', '/admin/users')).toEqual({ status: 200, body: 'upstream saw api.example.org /admin/users' });
  });
});

describe('rendering', () => {
  it('refuses values that would change the Caddyfile structure', () => {
    const base = { acmeEmail: 'ops@example.org', internalCidrs: ['10.0.0.0/8'] };
    expect(() => renderCaddyfile({ ...base, routes: [{ domain: 'a.example.org {\n}', upstream: 'x:1', description: '' }] })).toThrow(/unsafe domain/);
    expect(() => renderCaddyfile({ ...base, routes: [{ domain: 'a.example.org', upstream: 'x:1 }', description: '' }] })).toThrow(/unsafe upstream/);
    expect(() => renderCaddyfile({ ...base, internalCidrs: ['0.0.0.0/0 }'], routes: [] })).toThrow(/unsafe CIDR/);
  });

  it('refuses the same domain twice', () => {
    const route = { domain: 'a.example.org', upstream: 'x:1', description: '' };
    expect(() => renderCaddyfile({ acmeEmail: 'ops@example.org', internalCidrs: ['10.0.0.0/8'], routes: [route, route] })).toThrow(/duplicate proxy domain/);
  });
});
