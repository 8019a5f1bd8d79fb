import { beforeAll, describe, expect, it } from 'vitest';
import { checkPin, locateSchemas, PINNED_SCHEMAS } from './k8s/schemas/pins.js';
import { loadValidators, unknownChartKeys } from './k8s/schemas/validate.js';
import { declareKubernetesUnderMocks, type DeclaredObject } from './testing/k8s.js';
import { reveal } from './testing/pulumi-mocks.js';

/**
 * Every object the Kubernetes target declares, as the provider would send it, checked against the pinned
 * upstream schemas (infra/k8s/schemas/pins.ts): the Kubernetes 1.33 OpenAPI definitions, the
 * CloudNativePG, Barman Cloud and cert-manager CRDs, with unknown fields refused; the build Job each
 * deploy creates; and the Ory Helm releases' values against their charts' keys. Skips, saying why,
 * where the pinned files are not at hand (they are never committed, like the Ory contracts).
 */

const location = locateSchemas();
const HELM_RELEASE = 'kubernetes:helm.sh/v3:Release';

let objects: DeclaredObject[];
let buildJobs: Record<string, unknown>[];
let validators: ReturnType<typeof loadValidators>;

beforeAll(async () => {
  if (!location.ok) return;
  validators = loadValidators(location.dir);
  const declared = await declareKubernetesUnderMocks();
  objects = declared.objects;
  buildJobs = declared.stack.sites.sites.map((s) => reveal(s.buildJob) as Record<string, unknown>);
});

describe.skipIf(!location.ok)(`the pinned schemas${location.ok ? '' : ` (skipped: ${location.reason})`}`, () => {
  it('are the pinned bytes', () => {
    if (!location.ok) return;
    for (const pin of Object.values(PINNED_SCHEMAS)) expect(checkPin(pin, location.dir), pin.file).toBeUndefined();
  });

  it('accept every declared Kubernetes object (Helm releases aside), unknown fields refused', () => {
    const kubernetesObjects = objects.filter((o) => o.type !== HELM_RELEASE);
    expect(kubernetesObjects.length).toBeGreaterThan(100);
    const problems = kubernetesObjects.map((o) => validators.validate(o.object, `${o.kind} ${o.name}`)).filter((p) => p !== undefined);
    expect(problems).toEqual([]);
  });

  it('cover every kind the program declares, CloudNativePG, Barman Cloud and cert-manager included', () => {
    const kinds = new Set(objects.filter((o) => o.type !== HELM_RELEASE).map((o) => `${o.apiVersion} ${o.kind}`));
    for (const crd of ['postgresql.cnpg.io/v1 Cluster', 'postgresql.cnpg.io/v1 Pooler', 'postgresql.cnpg.io/v1 ScheduledBackup', 'barmancloud.cnpg.io/v1 ObjectStore', 'cert-manager.io/v1 ClusterIssuer']) {
      expect(kinds, crd).toContain(crd);
    }
    const known = new Set(validators.kinds());
    for (const kind of kinds) expect(known, kind).toContain(kind);
  });

  it('accept the build Job of every deploy target (created by the deploy driver, not by Pulumi)', () => {
    expect(buildJobs.length).toBeGreaterThan(0);
    const problems = buildJobs.map((job, i) => validators.validate(job, `build Job ${i}`)).filter((p) => p !== undefined);
    expect(problems).toEqual([]);
  });

  it('refuse an object that breaks its schema (the check can fail)', () => {
    const api = objects.find((o) => o.kind === 'Deployment' && o.name === 'api');
    const broken = structuredClone(api?.object ?? {}) as { spec: { template: { spec: { containers: Record<string, unknown>[] } } } };
    const first = broken.spec.template.spec.containers[0] ?? {};
    first.resource = first.resources;
    expect(validators.validate(broken, 'probe')?.errors.join('\n')).toContain('(resource)');
    const cluster = objects.find((o) => o.kind === 'Cluster' && o.name === 'features-db');
    const brokenCluster = structuredClone(cluster?.object ?? {}) as { spec: Record<string, unknown> };
    brokenCluster.spec.instances = 'three';
    expect(validators.validate(brokenCluster, 'probe')?.errors.join('\n')).toContain('/spec/instances');
  });

  it("keep the Ory releases' values within the keys their charts know (the charts ship no values schema)", () => {
    const release = (name: string) => objects.find((o) => o.type === HELM_RELEASE && o.name === name)?.object as { chart: string; version: string; values: unknown };
    // environmentSecretsName: read by the chart's templates, mentioned in its values.yaml as a comment only.
    const kratos = release('kratos');
    expect(unknownChartKeys(kratos.values, validators.chartDefaults('kratosValues'), ['kratos.config', 'deployment.environmentSecretsName'])).toEqual([]);
    const hydra = release('hydra');
    expect(unknownChartKeys(hydra.values, validators.chartDefaults('hydraValues'), ['hydra.config'])).toEqual([]);
    expect([kratos.version, hydra.version]).toEqual(['0.62.1', '0.62.1']);
    // A misspelt key is caught.
    expect(unknownChartKeys({ deployment: { resource: {} } }, validators.chartDefaults('kratosValues'), [])).toEqual(['deployment.resource']);
  });
});
