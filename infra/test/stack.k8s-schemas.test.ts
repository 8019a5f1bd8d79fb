import { beforeAll, describe, expect, it } from 'vitest';
import { chartDefaults, unknownChartKeys } from '../k8s/schemas/charts.js';
import { checkPin, locateSchemas, PINNED_SCHEMAS } from '../k8s/schemas/pins.js';
import { loadValidators, type Validators } from '../k8s/schemas/validate.js';
import { declareKubernetesUnderMocks, type DeclaredObject } from '../testing/k8s.js';
import { reveal } from '../testing/pulumi-mocks.js';

/**
 * Every object the Kubernetes target declares, as the provider would send it, and the build Job each
 * deploy creates, checked against the schemas of the models on the npm registry, pinned by
 * package-lock.json (infra/k8s/schemas/validate.ts): Kubernetes 1.36.0 (kubernetes-models 5.1.0),
 * CloudNativePG 1.29.0 (@kubernetes-models/cloudnative-pg 2.0.0), cert-manager 1.20.2
 * (@kubernetes-models/cert-manager 6.0.0), the Barman Cloud plugin's ObjectStore by an explicit check
 * around barman-cloud's configuration model. Types, required fields, enums and patterns by each model's
 * validator; unknown fields refused by its declaration. `npm ci` brings all of it: nothing here skips.
 *
 * The Ory Helm releases' values are checked against their charts' keys, which no registry package
 * carries (infra/k8s/schemas/pins.ts): that test alone skips, saying why, where the pinned chart
 * defaults are not at hand.
 */

const HELM_RELEASE = 'kubernetes:helm.sh/v3:Release';
const keyOf = (o: Record<string, unknown>) => `${String(o.apiVersion)} ${String(o.kind)}`;

let objects: DeclaredObject[];
let kubernetesObjects: DeclaredObject[];
let buildJobs: Record<string, unknown>[];
let validators: Validators;

beforeAll(async () => {
  const declared = await declareKubernetesUnderMocks();
  objects = declared.objects;
  kubernetesObjects = objects.filter((o) => o.type !== HELM_RELEASE);
  buildJobs = declared.stack.sites.sites.map((s) => reveal(s.buildJob) as Record<string, unknown>);
  validators = await loadValidators([...kubernetesObjects.map((o) => keyOf(o.object)), ...buildJobs.map(keyOf)]);
});

/** A copy of a declared object, to break on purpose. */
const objectNamed = (kind: string, name: string) => {
  const found = objects.find((o) => o.kind === kind && o.name === name);
  if (!found) throw new Error(`no ${kind} ${name} declared`);
  return structuredClone(found.object);
};
/** The object at a path (`spec/template/spec/containers/0`) inside another. */
const nodeAt = (object: Record<string, unknown>, path: string) => path.split('/').reduce((node, key) => node[key] as Record<string, unknown>, object);
const errorsOf = (object: Record<string, unknown>) => validators.validate(object, 'probe')?.errors.join('\n') ?? '';
/** A copy of a declared object with each `path/field` set to a value (a field that is not there added). */
const broken = (kind: string, name: string, changes: Record<string, unknown>) => {
  const object = objectNamed(kind, name);
  for (const [path, value] of Object.entries(changes)) {
    const slash = path.lastIndexOf('/');
    nodeAt(object, path.slice(0, slash))[path.slice(slash + 1)] = value;
  }
  return object;
};
/** The object's validation errors include every one given. */
const expectRefused = (object: Record<string, unknown>, errors: string[]) => {
  const found = errorsOf(object);
  for (const error of errors) expect(found).toContain(error);
};

describe('the schemas from the models on the npm registry', () => {
  it('accept every declared Kubernetes object (Helm releases aside), unknown fields refused', () => {
    expect(kubernetesObjects.length).toBeGreaterThan(100);
    const problems = kubernetesObjects.map((o) => validators.validate(o.object, `${o.kind} ${o.name}`)).filter((p) => p !== undefined);
    expect(problems).toEqual([]);
  });

  it('accept the build Job of every deploy target (created by the deploy driver, not by Pulumi)', () => {
    expect(buildJobs.length).toBeGreaterThan(0);
    const problems = buildJobs.map((job, i) => validators.validate(job, `build Job ${i}`)).filter((p) => p !== undefined);
    expect(problems).toEqual([]);
  });

  it('have a model for every kind the program declares, CloudNativePG, Barman Cloud and cert-manager included', () => {
    const kinds = new Set([...kubernetesObjects.map((o) => keyOf(o.object)), ...buildJobs.map(keyOf)]);
    for (const crd of ['postgresql.cnpg.io/v1 Cluster', 'postgresql.cnpg.io/v1 Pooler', 'postgresql.cnpg.io/v1 ScheduledBackup', 'postgresql.cnpg.io/v1 Database', 'barmancloud.cnpg.io/v1 ObjectStore', 'cert-manager.io/v1 ClusterIssuer']) {
      expect(kinds, crd).toContain(crd);
    }
    const unchecked = [...kinds].filter((kind) => validators.checkedBy(kind) === undefined);
    expect(unchecked).toEqual([]);
  });

  it('see only stable API versions (kubernetes-models also knows versions removed since, such as policy/v1beta1)', () => {
    const unstable = [...new Set([...kubernetesObjects.map((o) => o.apiVersion), ...buildJobs.map((j) => String(j.apiVersion))])].filter((v) => !/^([a-z0-9.-]+\/)?v\d+$/.test(v));
    expect(unstable).toEqual([]);
  });

  it('refuse an unknown field and a wrong type, in Kubernetes objects and in custom resources (the check can fail)', () => {
    const api = objectNamed('Deployment', 'api');
    const container = nodeAt(api, 'spec/template/spec/containers/0');
    container.resource = container.resources;
    nodeAt(api, 'metadata').label = { app: 'api' };
    nodeAt(api, 'spec').replicas = 'three';
    expectRefused(api, ['/spec/template/spec/containers/0/resource is not a field', '/metadata/label is not a field', '/spec/replicas must be integer']);

    expectRefused(broken('Cluster', 'features-db', { 'spec/instances': 'three', 'spec/storage/sise': '20Gi' }), ['/spec/instances must be integer', '/spec/storage/sise is not a field']);
    expectRefused(broken('Pooler', 'features-db-pooler', { 'spec/type': 'primary' }), ['/spec/type must be equal to one of the allowed values']);
    expectRefused(broken('Database', 'webhook-db', { 'spec/schemas/0/owners': 'webhook', 'spec/connectionLimit': 'twenty' }), ['/spec/schemas/0/owners is not a field', '/spec/connectionLimit must be integer']);
    expectRefused(broken('ClusterIssuer', 'cluster-issuer', { 'spec/acme/emial': 'ops@example.org' }), ['/spec/acme/emial is not a field']);
  });

  it('refuse an ObjectStore off its shape (no model: the explicit check can fail)', () => {
    const store = broken('ObjectStore', 'features-db-store', {
      'spec/configuration/wal/compresion': 'gzip',
      'spec/configuration/data/jobs': 'two',
      'spec/configuration/serverName': 'features',
      'spec/retentionPolicy': '30 days',
      'spec/retention': '30d',
      'metadata/name': 42,
    });
    expectRefused(store, [
      '/spec/configuration/wal/compresion is not a field',
      '/spec/configuration/data/jobs must be integer',
      '/spec/configuration/serverName is forbidden',
      '/spec/retentionPolicy must be a count',
      '/spec/retention is not a field',
      '/metadata/name must be string',
    ]);
  });
});

const charts = locateSchemas();
if (!charts.ok) console.log(`skipping the Ory releases' values against their charts' keys: ${charts.reason}`);

describe("the Ory releases' values", () => {
  it.skipIf(!charts.ok)('stay within the keys their charts know (the charts ship no values schema)', () => {
    if (!charts.ok) return;
    for (const pin of Object.values(PINNED_SCHEMAS)) expect(checkPin(pin, charts.dir), pin.file).toBeUndefined();
    const release = (name: string) => objects.find((o) => o.type === HELM_RELEASE && o.name === name)?.object as { chart: string; version: string; values: unknown };
    // environmentSecretsName: read by the chart's templates, mentioned in its values.yaml as a comment only.
    const kratos = release('kratos');
    expect(unknownChartKeys(kratos.values, chartDefaults(charts.dir, 'kratosValues'), ['kratos.config', 'deployment.environmentSecretsName'])).toEqual([]);
    const hydra = release('hydra');
    expect(unknownChartKeys(hydra.values, chartDefaults(charts.dir, 'hydraValues'), ['hydra.config'])).toEqual([]);
    expect([kratos.version, hydra.version]).toEqual(['0.62.1', '0.62.1']);
    // A misspelt key is caught.
    expect(unknownChartKeys({ deployment: { resource: {} } }, chartDefaults(charts.dir, 'kratosValues'), [])).toEqual(['deployment.resource']);
  });
});
