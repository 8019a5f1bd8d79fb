import { beforeAll, describe, expect, it } from 'vitest';
import { isPreviewTarget } from '../config.js';
import { isPinnedImage } from '../images.js';
import { loadKubernetesSettings } from '../k8s/config.js';
import { EDGE_PORT } from '../k8s/edge.js';
import { proxyRoutes } from '../routes.js';
import { apiEnvironment } from '../stack/settings.js';
import { declareKubernetesUnderMocks, K8S_GIVEN_SECRETS, type DeclaredObject } from '../testing/k8s.js';
import { isSecretEnvelope, plainStrings, reveal } from '../testing/pulumi-mocks.js';

/**
 * The Kubernetes target under Pulumi's runtime mocks, checked like the Docker target's policies
 * (infra/test/stack.test.ts): every object the program registers, with the inputs the provider would send,
 * against rules the cluster must obey. No cluster, Helm or Pulumi CLI needed.
 */

type Json = Record<string, unknown>;
type Container = { name: string; image: string; resources?: { limits?: Json }; securityContext?: Json; command?: string[]; args?: string[] };
type PodSpec = { containers: Container[]; initContainers?: Container[]; automountServiceAccountToken?: boolean; serviceAccountName?: string; tolerations?: Json[]; nodeSelector?: Json; securityContext?: Json };

let objects: DeclaredObject[];
let declared: Awaited<ReturnType<typeof declareKubernetesUnderMocks>>;

beforeAll(async () => {
  declared = await declareKubernetesUnderMocks();
  objects = declared.objects;
});

const ofKind = (kind: string) => objects.filter((o) => o.kind === kind);
const named = (kind: string, name: string) => {
  const found = objects.find((o) => o.kind === kind && (o.object.metadata as Json | undefined)?.name === name);
  if (!found) throw new Error(`no ${kind} ${name}`);
  return found.object as Json & { metadata: Json; spec: Json };
};
const namespaceOf = (o: DeclaredObject) => String((o.object.metadata as Json | undefined)?.namespace ?? '');
/** Every pod the stack runs: its workloads' templates and the Job each deploy creates. */
const pods = (): { name: string; namespace: string; spec: PodSpec }[] => [
  ...objects
    .filter((o) => ['Deployment', 'StatefulSet', 'Job'].includes(o.kind))
    .map((o) => ({ name: `${o.kind} ${o.name}`, namespace: namespaceOf(o), spec: (o.object as { spec: { template: { spec: PodSpec } } }).spec.template.spec })),
  ...declared.stack.sites.sites.map((s) => {
    const job = reveal(s.buildJob) as { metadata: Json; spec: { template: { spec: PodSpec } } };
    return { name: `build Job ${s.t.target.deployPath}`, namespace: String(job.metadata.namespace), spec: job.spec.template.spec };
  }),
];
const containersOf = (spec: PodSpec) => [...(spec.initContainers ?? []), ...spec.containers];
const ns = () => declared.stack.ctx.ns;
const policiesIn = (namespace: string) => ofKind('NetworkPolicy').filter((p) => namespaceOf(p) === namespace).map((p) => p.object as { metadata: Json; spec: Json });

describe('namespaces', () => {
  it('every namespace starts from a NetworkPolicy that denies all traffic in and out, and allows DNS', () => {
    const names = ofKind('Namespace').map((n) => String((n.object.metadata as Json).name));
    expect(names.sort()).toEqual([ns().platform, ns().builds, ns().preview, ns().sites].sort());
    for (const name of names) {
      const deny = policiesIn(name).find((p) => p.metadata.name === 'default-deny');
      expect(deny?.spec, name).toEqual({ podSelector: {}, policyTypes: ['Ingress', 'Egress'] });
      expect(policiesIn(name).some((p) => p.metadata.name === 'allow-dns'), name).toBe(true);
    }
  });

  it('every namespace enforces the restricted Pod Security level', () => {
    for (const n of ofKind('Namespace')) expect((n.object.metadata as { labels: Json }).labels['pod-security.kubernetes.io/enforce'], n.name).toBe('restricted');
  });

  it('no allow rule opens a pod to everything: each names its peers and its ports', () => {
    for (const p of ofKind('NetworkPolicy')) {
      const spec = p.object.spec as { ingress?: { from?: unknown[]; ports?: unknown[] }[]; egress?: { to?: unknown[]; ports?: unknown[] }[] };
      for (const rule of spec.ingress ?? []) expect({ name: p.name, from: rule.from?.length, ports: rule.ports?.length }).toEqual({ name: p.name, from: expect.any(Number), ports: expect.any(Number) });
      for (const rule of spec.egress ?? []) expect({ name: p.name, to: rule.to?.length, ports: rule.ports?.length }).toEqual({ name: p.name, to: expect.any(Number), ports: expect.any(Number) });
    }
  });
});

describe('every container', () => {
  it('has CPU and memory limits (init containers and build steps included)', () => {
    const all = pods().flatMap((p) => containersOf(p.spec).map((c) => ({ pod: p.name, c })));
    expect(all.length).toBeGreaterThan(20);
    for (const { pod, c } of all) {
      expect(c.resources?.limits?.cpu, `${pod} ${c.name}`).toMatch(/^\d+m$/);
      expect(c.resources?.limits?.memory, `${pod} ${c.name}`).toMatch(/^\d+Mi$/);
    }
  });

  it('runs as a non-root user with a read-only root file system, no privilege escalation, no capabilities, the runtime seccomp profile', () => {
    for (const p of pods()) {
      for (const c of containersOf(p.spec)) {
        const sc = c.securityContext ?? {};
        expect({ at: `${p.name} ${c.name}`, runAsNonRoot: sc.runAsNonRoot, readOnly: sc.readOnlyRootFilesystem, escalation: sc.allowPrivilegeEscalation, caps: sc.capabilities, seccomp: sc.seccompProfile }).toEqual({
          at: `${p.name} ${c.name}`,
          runAsNonRoot: true,
          readOnly: true,
          escalation: false,
          caps: { drop: ['ALL'] },
          seccomp: { type: 'RuntimeDefault' },
        });
        expect(Number(sc.runAsUser), `${p.name} ${c.name}`).toBeGreaterThan(0);
        expect(sc.privileged, `${p.name} ${c.name}`).toBeUndefined();
      }
      expect(p.spec.securityContext?.runAsNonRoot, p.name).toBe(true);
    }
  });

  it('runs a pinned image, none is latest (the Ory charts\' images too)', () => {
    const images = pods().flatMap((p) => containersOf(p.spec).map((c) => c.image));
    for (const release of ofKind('Release')) {
      const image = (release.object as { values: { image: { registry: string; repository: string; tag: string } } }).values.image;
      images.push(`${image.registry}/${image.repository}:${image.tag}`);
    }
    for (const image of images) expect(isPinnedImage(image), image).toBe(true);
  });
});

describe('service-account tokens', () => {
  it('no pod gets one but the webhook, whose account may only create build Jobs and set the site images', () => {
    const withToken = pods().filter((p) => p.spec.automountServiceAccountToken !== false);
    expect(withToken.map((p) => p.name)).toEqual(['Deployment webhook']);
    expect(withToken[0]?.spec.serviceAccountName).toBe('webhook');
    const roles = ofKind('Role').map((r) => ({ namespace: namespaceOf(r), rules: (r.object as { rules: { resources: string[]; verbs: string[] }[] }).rules }));
    for (const role of roles) for (const rule of role.rules) expect(rule.verbs, role.namespace).not.toContain('*');
    expect(ofKind('ClusterRole')).toEqual([]);
    expect(ofKind('ClusterRoleBinding')).toEqual([]);
  });
});

describe('the preview namespace (team code)', () => {
  const previews = () => declared.stack.sites.sites.filter((s) => isPreviewTarget(s.t.target));

  it('holds every preview site and nothing of the platform', () => {
    expect(previews().length).toBeGreaterThan(0);
    for (const s of previews()) expect(s.namespace).toBe(ns().preview);
    const inPreview = objects.filter((o) => namespaceOf(o) === ns().preview && ['Deployment', 'StatefulSet', 'Job'].includes(o.kind)).map((o) => o.name);
    expect(inPreview.sort()).toEqual(previews().map((s) => s.t.siteHost).sort());
  });

  it('has no service-account token: not in its pods, not in its default account', () => {
    for (const p of pods().filter((x) => x.namespace === ns().preview || x.namespace === ns().builds)) expect(p.spec.automountServiceAccountToken, p.name).toBe(false);
    const patched = ofKind('ServiceAccount').filter((sa) => (sa.object.metadata as Json).name === 'default').map((sa) => ({ namespace: namespaceOf(sa), token: sa.object.automountServiceAccountToken }));
    expect(patched).toEqual(expect.arrayContaining([{ namespace: ns().preview, token: false }, { namespace: ns().builds, token: false }]));
  });

  it('runs only on the tainted node pool, which no platform pod tolerates', () => {
    const taint = declared.stack.ctx.k8s.previewTaintKey;
    for (const p of pods()) {
      const tolerates = (p.spec.tolerations ?? []).some((t) => t.key === taint);
      const untrusted = p.namespace === ns().preview || p.namespace === ns().builds;
      expect({ pod: p.name, tolerates, pinned: p.spec.nodeSelector?.[taint] === 'true' }).toEqual({ pod: p.name, tolerates: untrusted, pinned: untrusted });
    }
  });

  it('a preview site is reached by the edge alone, on its port, and reaches only DNS and the public entrance', () => {
    for (const s of previews()) {
      const policy = policiesIn(ns().preview).find((p) => p.metadata.name === `allow-${s.t.siteHost}`)?.spec as { ingress: { from: Json[]; ports: Json[] }[]; egress: { to: Json[]; ports: Json[] }[] };
      expect(policy.ingress).toEqual([{ from: [{ podSelector: { matchLabels: { 'app.kubernetes.io/name': 'edge' } }, namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns().platform } } }], ports: [{ port: s.t.target.port, protocol: 'TCP' }] }]);
      expect(policy.egress).toEqual([{ to: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': declared.stack.ctx.k8s.ingressNamespace } } }], ports: [{ port: 80, protocol: 'TCP' }, { port: 443, protocol: 'TCP' }] }]);
    }
  });
});

describe('admin APIs', () => {
  it('no admin port is exposed: no LoadBalancer or NodePort Service, the Ingress sends every host to the edge, no edge route reaches 4434 or 4445', () => {
    for (const s of ofKind('Service')) expect((s.object.spec as Json).type ?? 'ClusterIP', s.name).toBe('ClusterIP');
    const ingress = named('Ingress', 'edge').spec as { rules: { http: { paths: { backend: { service: { name: string; port: { number: number } } } }[] } }[] };
    const backends = ingress.rules.flatMap((r) => r.http.paths.map((p) => `${p.backend.service.name}:${p.backend.service.port.number}`));
    expect(new Set(backends)).toEqual(new Set([`edge:${EDGE_PORT}`]));
    expect(ofKind('Ingress')).toHaveLength(1);
    for (const route of declared.stack.routes) expect(route.upstream).not.toMatch(/:(4434|4445)$/);
    expect(declared.stack.caddyfile).not.toMatch(/:(4434|4445)\b/);
    const kratos = ofKind('Release').find((r) => r.name === 'kratos')?.object as { values: { ingress?: unknown } };
    expect(kratos.values.ingress).toBeUndefined();
  });

  it('only the API, the login app and the clients sync may reach the admin ports (and Hydra Kratos\', as on the Docker admin network)', () => {
    const admins = (name: string, port: number) =>
      (policiesIn(ns().platform).find((p) => p.metadata.name === `allow-${name}`)?.spec as { ingress: { from: { podSelector: { matchLabels: Json } }[]; ports: { port: number }[] }[] }).ingress
        .filter((r) => r.ports.some((p) => p.port === port))
        .flatMap((r) => r.from.map((f) => f.podSelector.matchLabels['app.kubernetes.io/name']));
    expect(admins('kratos', 4434).sort()).toEqual(['api', 'hydra', 'login']);
    expect(admins('hydra', 4445).sort()).toEqual(['api', 'clients-sync', 'login']);
  });
});

describe('identity', () => {
  const release = (name: string) => ofKind('Release').find((r) => r.name === name)?.object as { chart: string; version: string; repositoryOpts: { repo: string }; values: Json & { kratos?: Json; hydra?: Json; courier?: Json; deployment?: Json; statefulSet?: Json } };

  it("Kratos and Hydra come from Ory's charts, migrating as Jobs before their pods roll", () => {
    for (const name of ['kratos', 'hydra']) {
      const r = release(name);
      expect({ chart: r.chart, repo: r.repositoryOpts.repo }).toEqual({ chart: name, repo: 'https://k8s.ory.sh/helm/charts' });
      expect((r.values[name] as { automigration: Json }).automigration).toMatchObject({ enabled: true, type: 'job' });
    }
  });

  it('one courier: a singleton of its own, and the Kratos servers do not send mail', () => {
    const kratos = release('kratos');
    expect(kratos.values.courier).toEqual({ enabled: true });
    const args = JSON.stringify([kratos.values.deployment, kratos.values.statefulSet]);
    expect(args).not.toContain('watch-courier');
    expect((kratos.values.kratos as { customArgs?: unknown }).customArgs).toBeUndefined();
    expect(release('kratos').values.replicaCount).toBeGreaterThan(1);
    // Only the courier's pods may send mail.
    const mailers = policiesIn(ns().platform).filter((p) => JSON.stringify(p.spec).includes('"port":587')).map((p) => p.metadata.name);
    expect(mailers.sort()).toEqual(['allow-kratos-courier', 'allow-qc-worker']);
  });

  it("gets Ory's secrets from Secrets, never in the chart values", () => {
    for (const name of ['kratos', 'hydra']) {
      const r = release(name);
      expect(r.values.secret).toMatchObject({ enabled: false });
      const config = JSON.stringify((r.values[name] as { config: unknown }).config);
      expect(config).not.toMatch(/dsn|secrets"|connection_uri/);
    }
  });
});

describe('features, worker, sites', () => {
  it('the API: replicas, readiness and liveness probes, a PodDisruptionBudget and a HorizontalPodAutoscaler', () => {
    const api = named('Deployment', 'api');
    const c = (api.spec as { template: { spec: PodSpec & { containers: (Container & { readinessProbe?: unknown; livenessProbe?: unknown })[] } } }).template.spec.containers[0];
    expect(Number((api.spec as Json).replicas)).toBeGreaterThanOrEqual(2);
    expect(c?.readinessProbe).toMatchObject({ httpGet: { path: '/healthz' } });
    expect(c?.livenessProbe).toMatchObject({ httpGet: { path: '/healthz' } });
    expect(named('PodDisruptionBudget', 'api').spec).toMatchObject({ minAvailable: 1 });
    expect(named('HorizontalPodAutoscaler', 'api').spec).toMatchObject({ scaleTargetRef: { kind: 'Deployment', name: 'api' }, minReplicas: 2, maxReplicas: 6 });
  });

  it('is told the same variables as on the Docker target (infra/stack/settings.ts), only the addresses differ', () => {
    const secret = named('Secret', 'api-env') as unknown as { stringData: Json };
    const expected = apiEnvironment(declared.stack.ctx.cfg, { databaseUrl: 'x', identity: { kratosAdmin: 'x', hydraAdmin: 'x', kratosPublicInternal: 'x' }, origins: [] });
    expect(Object.keys(secret.stringData).sort()).toEqual(Object.keys(expected).sort());
    expect(secret.stringData.DATABASE_URL).toMatch(/@features-db-pooler:5432\/features$/);
    expect(secret.stringData.HYDRA_ADMIN_URL).toBe('http://hydra-admin:4445');
  });

  it('the QC worker is its own Deployment; GeoServer a StatefulSet of one with its data directory on a volume', () => {
    expect(named('Deployment', 'qc-worker')).toBeDefined();
    const geoserver = named('StatefulSet', 'geoserver').spec as { replicas: number; volumeClaimTemplates: { metadata: Json }[] };
    expect(geoserver.replicas).toBe(1);
    expect(geoserver.volumeClaimTemplates.map((v) => v.metadata.name)).toEqual(['data']);
  });

  it('one site Deployment per deploy target, each with its own Service', () => {
    const targets = declared.stack.ctx.cfg.targets;
    for (const s of declared.stack.sites.sites) {
      expect(named('Deployment', s.t.siteHost)).toBeDefined();
      expect(named('Service', s.t.siteHost).spec).toMatchObject({ ports: [{ port: s.t.target.port }] });
    }
    expect(declared.stack.sites.sites).toHaveLength(targets.length);
  });
});

describe("the login app's limiters", () => {
  it('count in the database login on Kratos\' cluster, as the managed role login that owns only it; the URL and the replica count reach the app inside its Secret', () => {
    const login = named('Deployment', 'login').spec as { replicas: number };
    const env = named('Secret', 'login-env') as unknown as { stringData: Record<string, string> };
    const url = new URL(env.stringData.LOGIN_DATABASE_URL ?? '');
    expect({ user: url.username, host: url.host, database: url.pathname }).toEqual({ user: 'login', host: 'kratos-db-rw:5432', database: '/login' });
    expect(env.stringData.IDENTITY_REPLICAS).toBe(String(login.replicas));
    expect(login.replicas).toBeGreaterThan(1);
    const secretInput = declared.registered.find((r) => r.type === 'kubernetes:core/v1:Secret' && r.name === 'login-env');
    expect(isSecretEnvelope(secretInput?.inputs.stringData), 'login-env stringData is not a secret').toBe(true);

    expect(named('Database', 'login').spec).toEqual({ name: 'login', owner: 'login', cluster: { name: 'kratos-db' }, ensure: 'present', databaseReclaimPolicy: 'retain' });
    const kratosDb = named('Cluster', 'kratos-db').spec as { managed: { roles: { name: string; superuser: boolean; createdb: boolean; createrole: boolean; passwordSecret: { name: string } }[] } };
    expect(kratosDb.managed.roles.map((r) => ({ name: r.name, superuser: r.superuser, createdb: r.createdb, createrole: r.createrole }))).toEqual([{ name: 'login', superuser: false, createdb: false, createrole: false }]);
    const roleSecret = named('Secret', kratosDb.managed.roles[0]!.passwordSecret.name) as unknown as { stringData: { username: string; password: string } };
    expect(roleSecret.stringData).toEqual({ username: 'login', password: decodeURIComponent(url.password) });

    // The login pods reach that cluster's instances, and nothing else of the databases.
    const egress = (policiesIn(ns().platform).find((p) => p.metadata.name === 'allow-login')?.spec as { egress: { to: Json[]; ports: Json[] }[] }).egress;
    const toDatabases = egress.filter((rule) => JSON.stringify(rule.ports).includes('5432'));
    expect(toDatabases.map((rule) => rule.to)).toEqual([[{ podSelector: { matchLabels: { 'cnpg.io/cluster': 'kratos-db' } } }]]);
    const instances = policiesIn(ns().platform).find((p) => p.metadata.name === 'allow-kratos-db-instances')?.spec as { ingress: { from: Json[] }[] };
    expect(JSON.stringify(instances.ingress[0]?.from)).toContain('"app.kubernetes.io/name":"login"');
  });
});

describe("the webhook's replicas", () => {
  type Probe = { httpGet?: { path: string } };
  type WebhookPod = PodSpec & {
    containers: (Container & { readinessProbe?: Probe; livenessProbe?: Probe; env?: { name: string }[]; envFrom?: { secretRef?: { name: string } }[]; volumeMounts?: { name: string; mountPath: string }[] })[];
    volumes: (Json & { name: string })[];
    topologySpreadConstraints?: Json[];
    affinity?: { podAntiAffinity?: Json };
  };
  const webhook = () => named('Deployment', 'webhook').spec as { replicas: number; strategy: { type: string; rollingUpdate?: Json }; template: { spec: WebhookPod } };
  const webhookEnv = () => (named('Secret', 'webhook-env') as unknown as { stringData: Record<string, string> }).stringData;
  const databaseUrl = () => new URL(webhookEnv().WEBHOOK_DATABASE_URL ?? 'postgres://missing');

  it('run two or more only with their journal in PostgreSQL, its URL inside the Secret the pods read, and no state volume', () => {
    const { replicas, strategy, template } = webhook();
    expect(replicas).toBeGreaterThanOrEqual(2);
    // The rule: more than one webhook shares its journal through a database, or does not run.
    if (replicas > 1) expect(webhookEnv().WEBHOOK_DATABASE_URL, 'replicas without WEBHOOK_DATABASE_URL keep separate file journals').toMatch(/^postgres:\/\//);
    expect(strategy).toEqual({ type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } });
    // From the Secret alone: no container names the URL (or any variable) as a plain value.
    const [c] = template.spec.containers;
    expect(c?.env).toBeUndefined();
    expect(c?.envFrom).toEqual([{ secretRef: { name: 'webhook-env' } }]);
    const secretInput = declared.registered.find((r) => r.type === 'kubernetes:core/v1:Secret' && r.name === 'webhook-env');
    expect(isSecretEnvelope(secretInput?.inputs.stringData), 'webhook-env stringData is not a secret').toBe(true);
    expect(webhookEnv().WEBHOOK_STATE_DIR).toBeUndefined();
    // Nothing a pod writes outlives it or is shared: no claim, only the scratch space, the targets and /tmp.
    expect(ofKind('PersistentVolumeClaim').filter((v) => v.name.startsWith('webhook'))).toEqual([]);
    expect(template.spec.volumes.filter((v) => 'persistentVolumeClaim' in v)).toEqual([]);
    expect(template.spec.volumes.map((v) => v.name).sort()).toEqual(['scratch', 'targets', 'tmp']);
    expect(webhookEnv().DEPLOY_ROOT?.startsWith(String(c?.volumeMounts?.find((m) => m.name === 'scratch')?.mountPath))).toBe(true);
  });

  it('keep one answering through a rollout, a drained node and a lost node: a PodDisruptionBudget, spread over nodes, probes on /health', () => {
    expect(named('PodDisruptionBudget', 'webhook').spec).toEqual({ minAvailable: 1, selector: { matchLabels: { 'app.kubernetes.io/name': 'webhook' } } });
    const pod = webhook().template.spec;
    const spread = pod.topologySpreadConstraints ?? [];
    expect(spread.length + Object.keys(pod.affinity?.podAntiAffinity ?? {}).length).toBeGreaterThan(0);
    for (const rule of spread) expect(rule).toMatchObject({ topologyKey: 'kubernetes.io/hostname', labelSelector: { matchLabels: { 'app.kubernetes.io/name': 'webhook' } } });
    const [c] = pod.containers;
    expect(c?.readinessProbe?.httpGet?.path).toBe('/health');
    expect(c?.livenessProbe?.httpGet?.path).toBe('/health');
    // The kubelet waits for the webhook's own grace for running deploys, and the driver's clean-up after it.
    expect((pod as { terminationGracePeriodSeconds?: number }).terminationGracePeriodSeconds).toBeGreaterThan(Number(webhookEnv().WEBHOOK_SHUTDOWN_GRACE_SECONDS));
  });

  it("reach their database's cluster on its port, and no other database; the cluster's instances let them in", () => {
    const cluster = 'features-db';
    expect({ user: databaseUrl().username, host: databaseUrl().host, database: databaseUrl().pathname }).toEqual({ user: 'webhook', host: `${cluster}-rw:5432`, database: '/webhook' });
    const egress = (policiesIn(ns().platform).find((p) => p.metadata.name === 'allow-webhook')?.spec as { egress: { to: Json[]; ports: Json[] }[] }).egress;
    const toDatabases = egress.filter((rule) => JSON.stringify(rule.to).includes('cnpg.io'));
    expect(toDatabases).toEqual([{ to: [{ podSelector: { matchLabels: { 'cnpg.io/cluster': cluster } } }], ports: [{ port: 5432, protocol: 'TCP' }] }]);
    // Everything else it reaches is the Kubernetes API (the deploy driver).
    const apiServer = declared.stack.ctx.k8s.apiServerCidrs.map((cidr) => ({ ipBlock: { cidr } }));
    expect(egress.filter((rule) => !toDatabases.includes(rule))).toEqual([{ to: apiServer, ports: [{ port: 443, protocol: 'TCP' }, { port: 6443, protocol: 'TCP' }] }]);
    const instances = (name: string) => JSON.stringify((policiesIn(ns().platform).find((p) => p.metadata.name === `allow-${name}-instances`)?.spec as { ingress: Json[] }).ingress);
    expect(instances(cluster)).toContain('"app.kubernetes.io/name":"webhook"');
    for (const other of ['kratos-db', 'hydra-db']) expect(instances(other), other).not.toContain('"app.kubernetes.io/name":"webhook"');
  });

  it('connect as the managed role webhook, which owns its database and schema webhook and nothing else, with a connection limit', () => {
    const clusters = ofKind('Cluster').map((c) => c.object as { metadata: { name: string }; spec: { managed?: { roles: (Json & { name: string; passwordSecret: { name: string } })[] } } });
    const holding = clusters.filter((c) => c.spec.managed?.roles.some((r) => r.name === 'webhook'));
    expect(holding.map((c) => c.metadata.name)).toEqual(['features-db']);
    const role = holding[0]!.spec.managed!.roles.find((r) => r.name === 'webhook')!;
    expect({ login: role.login, superuser: role.superuser, createdb: role.createdb, createrole: role.createrole, replication: role.replication ?? false, bypassrls: role.bypassrls ?? false, inRoles: role.inRoles ?? [] }).toEqual({
      login: true,
      superuser: false,
      createdb: false,
      createrole: false,
      replication: false,
      bypassrls: false,
      inRoles: [],
    });
    expect(Number(role.connectionLimit)).toBeGreaterThan(0);
    const roleSecret = named('Secret', role.passwordSecret.name) as unknown as { stringData: { username: string; password: string } };
    expect(roleSecret.stringData).toEqual({ username: 'webhook', password: decodeURIComponent(databaseUrl().password) });

    // Owner of exactly one Database (with its one schema); no other Database or cluster names it.
    const databases = ofKind('Database').map((d) => d.object as { spec: { name: string; owner: string; cluster: { name: string }; schemas?: { name: string; owner: string }[] } });
    expect(databases.filter((d) => d.spec.owner === 'webhook' || JSON.stringify(d.spec.schemas ?? []).includes('"owner":"webhook"'))).toEqual([
      expect.objectContaining({ spec: { name: 'webhook', owner: 'webhook', cluster: { name: 'features-db' }, ensure: 'present', databaseReclaimPolicy: 'retain', schemas: [{ name: 'webhook', owner: 'webhook', ensure: 'present' }] } }),
    ]);
    const bootstrap = (holding[0] as unknown as { spec: { bootstrap: { initdb: { owner: string; postInitApplicationSQL: string[] } } } }).spec.bootstrap.initdb;
    expect(bootstrap.owner).not.toBe('webhook');
    // The cluster's own database is closed to other roles: the webhook's role cannot connect to it.
    expect(bootstrap.postInitApplicationSQL).toContain('REVOKE ALL ON DATABASE features FROM PUBLIC');
  });
});

describe('databases', () => {
  it('three CloudNativePG clusters (features on the PostGIS image), each behind a session-mode pooler, archiving to the object store and backed up nightly', () => {
    const clusters = ofKind('Cluster').map((c) => c.object as { metadata: Json; spec: { imageName: string; plugins: Json[]; enableSuperuserAccess: boolean } });
    expect(clusters.map((c) => c.metadata.name).sort()).toEqual(['features-db', 'hydra-db', 'kratos-db']);
    expect(clusters.find((c) => c.metadata.name === 'features-db')?.spec.imageName).toMatch(/cloudnative-pg\/postgis:/);
    for (const c of clusters) {
      expect(c.spec.plugins, String(c.metadata.name)).toEqual([{ name: 'barman-cloud.cloudnative-pg.io', isWALArchiver: true, parameters: { barmanObjectName: `${String(c.metadata.name)}-store` } }]);
      expect(c.spec.enableSuperuserAccess).toBe(false);
    }
    for (const p of ofKind('Pooler')) expect((p.object.spec as { pgbouncer: Json }).pgbouncer.poolMode, p.name).toBe('session');
    expect(ofKind('ScheduledBackup').map((b) => (b.object.spec as { method: string }).method)).toEqual(['plugin', 'plugin', 'plugin']);
  });
});

describe('the edge', () => {
  it('serves the same routes as the Docker proxy, every public domain with a cert-manager certificate', () => {
    const cfg = declared.stack.ctx.cfg;
    const docker = proxyRoutes(cfg.domains, cfg.targets, { selfServiceUi: cfg.selfServiceUi });
    expect(declared.stack.routes.map((r) => ({ domain: r.domain, guarded: r.internalOnlyPaths, gate: r.gate?.path }))).toEqual(docker.map((r) => ({ domain: r.domain, guarded: r.internalOnlyPaths, gate: r.gate?.path })));
    const ingress = named('Ingress', 'edge') as { metadata: { annotations: Json }; spec: { tls: { hosts: string[] }[] } };
    expect(ingress.metadata.annotations['cert-manager.io/cluster-issuer']).toBe(declared.stack.ctx.k8s.clusterIssuer);
    expect(ingress.spec.tls.flatMap((t) => t.hosts).sort()).toEqual(docker.map((r) => r.domain.toLowerCase()).sort());
  });

  it('reads the client address from the ingress controller alone for the internal-only paths', () => {
    expect(declared.stack.caddyfile).toContain('trusted_proxies static 10.0.0.0/8');
    expect(declared.stack.caddyfile).toContain('not client_ip 10.0.0.0/8 192.168.0.0/16');
    expect(declared.stack.caddyfile).not.toContain('remote_ip');
    const edge = policiesIn(ns().platform).find((p) => p.metadata.name === 'allow-edge')?.spec as { ingress: { from: Json[] }[] };
    expect(edge.ingress).toEqual([{ from: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'ingress-nginx' } } }], ports: [{ port: EDGE_PORT, protocol: 'TCP' }] }]);
  });
});

describe('secrets', () => {
  it('operator-set secrets never appear outside a Pulumi secret in any resource input', () => {
    const markers = Object.values(K8S_GIVEN_SECRETS).map((v) => (v.match(/MARK-[a-z0-9-]+/) ?? [v])[0]);
    for (const r of declared.registered) {
      const plain = plainStrings(r.inputs).join('\n');
      for (const marker of markers) expect(plain, `${r.type} ${r.name}`).not.toContain(marker);
    }
  });
});

describe('the Kubernetes settings', () => {
  const config = (values: Record<string, unknown>) => ({ getObject: (k: string) => values[k] }) as never;

  it('are required on the Kubernetes target, and a wrong one is refused naming its key', () => {
    expect(() => loadKubernetesSettings(config({}))).toThrow(/needs the key kubernetes/);
    expect(() => loadKubernetesSettings(config({ kubernetes: { registry: 'registry.example.org/x' } }))).toThrow(/kubernetes\.apiServerCidrs/);
    expect(() => loadKubernetesSettings(config({ kubernetes: { registry: 'registry.example.org/x', apiServerCidrs: ['10.0.0.1/32'], apiReplicas: { min: 4, max: 2 } } }))).toThrow(/kubernetes\.apiReplicas\.max/);
  });
});
