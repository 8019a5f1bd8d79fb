import { beforeAll, describe, expect, it } from 'vitest';
import { loadStackConfig } from '../config.js';
import { ENTRY_POINTS } from '../images.js';
import { declaredContainer, declareDockerUnderMocks, exampleConfig, isSecretEnvelope, resolved, reveal, type RegisteredResource } from '../testing/pulumi-mocks.js';

/**
 * Approvals leave the platform through one container: the QC worker, the only one on a network with a
 * way out (`worker-out`), configured from the stack (exportSettings, credentials as Pulumi secrets).
 * Read from the program under the runtime mocks.
 */

const CONTAINER = 'docker:index/container:Container';
const NETWORK = 'docker:index/network:Network';
let registered: RegisteredResource[];

beforeAll(async () => {
  const declared = await declareDockerUnderMocks({
    config: { exportSettings: { OSM_API_URL: 'https://master.apis.dev.openstreetmap.org', WIKIBASE_URL: 'https://test.wikidata.org', AGENCY_WEBHOOK_URL: 'https://agency.example.net/notices', REVIEWER_EMAILS: 'qc@example.org' } },
    secrets: { osmAccessToken: 'osm-token-from-the-operator', wikibasePassword: 'wikibase-password-from-the-operator' },
  });
  registered = declared.registered;
  const { qcWorker, api, proxy } = declared.program.stack.containers;
  await Promise.all([qcWorker, api, proxy].map((c) => resolved(c.id)));
});

const container = (name: string) => {
  const declared = declaredContainer(registered, name);
  return { ...declared, rawEnvs: declared.inputs.envs ?? [] };
};
const network = (name: string) => registered.find((r) => r.type === NETWORK && reveal(r.inputs.name) === name);
const containersOn = (net: string) => registered.filter((r) => r.type === CONTAINER && ((reveal(r.inputs.networksAdvanced) as { name: string }[] | undefined) ?? []).some((n) => n.name === net)).map((r) => r.name);

describe('the way out for approvals', () => {
  it('the QC worker is alone on worker-out, a network with a route out; it reaches the features database on app', () => {
    expect(network('geodata-worker-out')?.inputs.internal).toBe(false);
    expect(containersOn('geodata-worker-out')).toEqual(['qc-worker']);
    expect(container('qc-worker').networks.sort()).toEqual(['geodata-app', 'geodata-worker-out']);
  });

  it('the API runs no worker of its own and, like the databases, joins no network with a route out', () => {
    expect(container('api').env.WORKER_ENABLED).toBe('false');
    for (const name of ['api', 'features-db', 'identity-db']) {
      for (const net of container(name).networks) expect(network(net)?.inputs.internal, `${name} on ${net}`).toBe(true);
    }
  });

  it('the worker gets the operator\'s export settings, the credentials as secrets, and the web app\'s address for its links', () => {
    const worker = container('qc-worker');
    expect(worker.env).toMatchObject({
      OSM_API_URL: 'https://master.apis.dev.openstreetmap.org',
      WIKIBASE_URL: 'https://test.wikidata.org',
      AGENCY_WEBHOOK_URL: 'https://agency.example.net/notices',
      REVIEWER_EMAILS: 'qc@example.org',
      OSM_ACCESS_TOKEN: 'osm-token-from-the-operator',
      WIKIBASE_PASSWORD: 'wikibase-password-from-the-operator',
      SMTP_URL: 'smtp://mail.example.org:25/',
      WEB_PUBLIC_URL: String(exampleConfig().appUrl),
    });
    // The environment as a whole is a secret in the state (it holds the credentials).
    expect(isSecretEnvelope(worker.rawEnvs)).toBe(true);
  });

  it('runs as node with a read-only root and no capabilities; healthy only while its heartbeat is fresh', () => {
    const { inputs } = container('qc-worker');
    expect(inputs.user).toBe('node');
    expect(inputs.readOnly).toBe(true);
    expect(reveal(inputs.capabilities)).toEqual({ drops: ['ALL'], adds: [] });
    expect(reveal(inputs.command)).toEqual([...ENTRY_POINTS.qcWorker]);
    expect((reveal(inputs.healthcheck) as { tests: string[] }).tests).toEqual(['CMD', ...ENTRY_POINTS.qcWorkerHealth]);
  });
});

describe('export settings in the stack configuration', () => {
  const withSettings = (exportSettings: Record<string, string>) => {
    const values: Record<string, unknown> = { ...exampleConfig(), exportSettings };
    return () => loadStackConfig({ get: (k: string) => values[k] as string | undefined, getObject: (k: string) => values[k], getBoolean: (k: string) => values[k] as boolean | undefined, getNumber: (k: string) => values[k] as number | undefined } as never);
  };

  it('refuses a credential given as a plain setting, naming it', () => {
    expect(withSettings({ OSM_ACCESS_TOKEN: 'plain-text-token' })).toThrow(/OSM_ACCESS_TOKEN: a credential: set it as a secret/);
  });

  it('refuses a name the worker does not read', () => {
    expect(withSettings({ NODE_OPTIONS: '--require /tmp/x' })).toThrow(/NODE_OPTIONS: not a QC worker setting such as OSM_API_URL/);
  });
});
