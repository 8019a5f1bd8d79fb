import proxyAddress from 'proxy-addr';
import { beforeAll, describe, expect, it } from 'vitest';
import { declaredContainer, declareDockerUnderMocks, resolved, reveal, type RegisteredResource } from '../testing/pulumi-mocks.js';

/**
 * The API's change limit keys callers without credentials on their address, which in the stack only
 * the proxy knows (X-Forwarded-For). The API must believe that header from the proxy's networks and
 * from nobody a client could be. Read from the program under the runtime mocks.
 */

const NETWORK = 'docker:index/network:Network';
let registered: RegisteredResource[];

beforeAll(async () => {
  const declared = await declareDockerUnderMocks({ secrets: { osmAccessToken: 'osm-token', wikibasePassword: 'wikibase-password' } });
  registered = declared.registered;
  const { api, proxy } = declared.program.stack.containers;
  await Promise.all([api, proxy].map((c) => resolved(c.id)));
});

const container = (name: string) => declaredContainer(registered, name);
const network = (name: string) => registered.find((r) => r.type === NETWORK && reveal(r.inputs.name) === name);

describe("the API's client address", () => {
  it('is taken from X-Forwarded-For only when the peer is on a private network, as the proxy is', () => {
    const { env } = container('api');
    // As services/api/src/config.ts reads it (infra/test/stack.jobs.test.ts starts the API with this environment).
    const trusted = (env.API_TRUST_PROXY ?? '').split(',').map((v) => v.trim()).filter(Boolean);
    expect(trusted.length).toBeGreaterThan(0);
    const trust = proxyAddress.compile(trusted);
    // Docker's address pools, from which the proxy's address on the internal app network is drawn.
    for (const proxy of ['172.17.0.2', '172.30.0.5', '192.168.16.3', '10.213.0.4']) expect(trust(proxy, 0), proxy).toBe(true);
    // Addresses a client on the internet has.
    for (const client of ['203.0.113.9', '8.8.8.8', '2001:db8::1']) expect(trust(client, 0), client).toBe(false);
  });

  it('can come only from the proxy and the platform: the API joins internal networks alone, shared with the proxy on app', () => {
    const api = container('api');
    for (const net of api.networks) expect(network(net)?.inputs.internal, net).toBe(true);
    expect(container('proxy').networks).toContain('geodata-app');
    expect(api.networks).toContain('geodata-app');
  });
});
