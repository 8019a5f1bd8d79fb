import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GeoServerClient } from '../geoserver/client.js';
import { provisionGeoServer, type ProvisionOptions } from '../geoserver/provision.js';
import { provisionOptions, startFakeGeoServer, type FakeGeoServer } from '../geoserver/testing/fake-geoserver.js';
import { forwardTo, LateServers } from '../../test/helpers/late-servers.js';
import { freePort } from '../../services/shared/testing/ports.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

/**
 * The provisioning job against a GeoServer that is still starting, through real HTTP on loopback: the
 * same retry as the OAuth2 clients sync (services/shared/retry.ts), in front of the spec-checked fake.
 */

const MISSING = lacks('the GeoServer provisioning retry tests (the fake checks requests against the REST specification)', requirements.contracts());
const ADMIN = { user: 'admin', password: 'test-admin-password' };
const CLI = join(import.meta.dirname, '..', 'geoserver', 'cli.ts');

/** A GeoServer that takes a while: readiness waited for up to 20 s. */
const options = (overrides: Partial<ProvisionOptions> = {}) => provisionOptions({ readyTimeoutMs: 20_000, ...overrides });

let geoserver: FakeGeoServer;
const late = new LateServers();
const listen = late.listen.bind(late);
/** Passes a request on to the real double once the stand-in is done refusing. */
const forward = forwardTo(() => geoserver.url);

beforeEach(async () => {
  if (MISSING) return;
  geoserver = await startFakeGeoServer(ADMIN);
});
afterEach(async () => {
  await late.closeAll();
  if (MISSING) return;
  await geoserver.close();
});

describe.skipIf(MISSING)('GeoServer provisioning against a GeoServer that is still starting', () => {
  it('retries while connections are refused and GeoServer answers 503, with growing waits, then provisions', async () => {
    const port = await freePort();
    const statuses: number[] = [];
    const waits: number[] = [];
    const client = new GeoServerClient({ baseUrl: `http://127.0.0.1:${port}/geoserver`, ...ADMIN });
    const running = provisionGeoServer(client, options({ onRetry: ({ delayMs }) => waits.push(delayMs) }));
    await new Promise((done) => setTimeout(done, 700));
    await listen((req, res) => {
      if (statuses.length < 2) {
        statuses.push(503);
        res.writeHead(503).end('starting');
        return;
      }
      statuses.push(200);
      forward(req, res);
    }, port);
    const report = await running;
    expect(statuses.slice(0, 3)).toEqual([503, 503, 200]);
    expect(report.changes).toContain('published feature type geodata:features');
    expect(geoserver.violations).toEqual([]);
    // Exponential: each wait at least half of twice the one before's ceiling (equal jitter).
    expect(waits.length).toBeGreaterThanOrEqual(4);
    waits.forEach((delay, i) => expect(delay).toBeGreaterThanOrEqual(10 * 2 ** i));
  });

  it('a 404 at the REST API (a wrong URL) fails at once, after one request', async () => {
    let requests = 0;
    const port = await listen((_req, res) => {
      requests++;
      res.writeHead(404).end('no such context');
    });
    const client = new GeoServerClient({ baseUrl: `http://127.0.0.1:${port}/not-geoserver`, ...ADMIN });
    const started = Date.now();
    await expect(provisionGeoServer(client, options())).rejects.toThrow('GeoServer GET /workspaces answered 404: no such context');
    expect(requests).toBe(1);
    expect(Date.now() - started).toBeLessThan(1_000);
  });

  it('the command exits 1 with one line when GeoServer does not answer within GEOSERVER_READY_TIMEOUT_SECONDS', async () => {
    const port = await freePort();
    const result = await new Promise<{ code: number; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        ['--import', 'tsx', CLI],
        { env: { ...process.env, GEOSERVER_URL: `http://127.0.0.1:${port}/geoserver`, GEOSERVER_ADMIN_PASSWORD: 'pw-not-logged', GEOSERVER_DB_PASSWORD: 'db', GEOSERVER_READY_TIMEOUT_SECONDS: '2' } },
        (error, _stdout, stderr) => resolve({ code: error ? Number(error.code) : 0, stderr }),
      );
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^geoserver: not ready \(GeoServer GET \/workspaces answered 0: no answer \(fetch failed \(connect ECONNREFUSED .*\)\)\); attempt 2 in \d\.\d s$/m);
    expect(result.stderr).toMatch(/^geoserver-provision failed: GeoServer REST API not ready in time \(gave up after \d+ attempts in \d+\.\d s: .*ECONNREFUSED.*\)$/m);
    expect(result.stderr).not.toContain('pw-not-logged');
  });
});
