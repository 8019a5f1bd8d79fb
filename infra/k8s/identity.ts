import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { createHash } from 'node:crypto';
import { dirname } from 'node:path';
import { ENTRY_POINTS } from '../images.js';
import { ADMIN_UPSTREAMS, UPSTREAMS } from '../routes.js';
import { LIMITS } from '../stack/common.js';
import { CLIENTS_FILE_IN_CONTAINER } from '../stack/identity.js';
import { accountsUiEnvironment, hydraSecretEnvironment, identityFiles, kratosSecretEnvironment, loginEnvironment, type IdentityAddresses } from '../stack/settings.js';
import { allow, container, environmentSecret, INTERNET, labels, NODE_UID, PART_OF, podSpec, resources, type K8sContext } from './common.js';
import { ORY_CHARTS, splitImage, type K8sImages } from './images.js';
import { declareDatabase, PG_PORT, type DatabaseSpec } from './postgres.js';
import type { K8sPlatform } from './platform.js';

/**
 * Identity on Kubernetes: the Kratos and Hydra databases (CloudNativePG, like the features database),
 * Kratos and Hydra through Ory's own Helm charts, the login app, the self-service UI and the OAuth2
 * clients sync: the same parts as infra/stack/identity.ts, with the same rendered configuration
 * (infra/stack/settings.ts identityFiles).
 *
 * What the charts do that the Docker target does by hand:
 *   migrations  `kratos.automigration` / `hydra.automigration` as Jobs (Helm pre-install and pre-upgrade
 *               hooks): a new Ory version migrates before its pods roll, and a failed migration fails
 *               the release, so `pulumi up` stops there, naming it;
 *   courier     Kratos' mail courier is a StatefulSet of exactly one replica (`courier.enabled`), apart
 *               from the Kratos Deployment, which runs `serve all` without `--watch-courier`: however
 *               many Kratos replicas run, every mail goes out once.
 * The secrets reach Ory as its own variables through two Secrets the program writes (the charts' own
 * Secret is off): the keys the charts read (dsn, secrets*) and the rest of the environment (the SMTP
 * URI, the social sign-in providers with their client secrets).
 *
 * Admin APIs: the charts' `kratos-admin` (4434) and `hydra-admin` (4445) are ClusterIP Services that no
 * Ingress and no edge route names; NetworkPolicies let only the API, the login app and the clients sync
 * reach those ports (and Hydra Kratos', to end a session on logout), as the Docker admin network does.
 */

/** Kratos' and Hydra's admin and public Services, as the charts name them with fullnameOverride. */
export const ORY_SERVICES = {
  kratosPublic: 'kratos-public',
  kratosAdmin: ADMIN_UPSTREAMS.kratosAdmin.host,
  hydraPublic: 'hydra-public',
  hydraAdmin: ADMIN_UPSTREAMS.hydraAdmin.host,
} as const;

export const IDENTITY_ADDRESSES: IdentityAddresses = {
  kratosAdmin: `http://${ORY_SERVICES.kratosAdmin}:${ADMIN_UPSTREAMS.kratosAdmin.port}`,
  hydraAdmin: `http://${ORY_SERVICES.hydraAdmin}:${ADMIN_UPSTREAMS.hydraAdmin.port}`,
  kratosPublicInternal: `http://${ORY_SERVICES.kratosPublic}:${UPSTREAMS.kratosPublic.port}`,
};

/** The chart's Secret keys → Ory's variable names (the charts read these keys into these variables). */
const CHART_SECRET_KEYS = {
  kratos: { DSN: 'dsn', SECRETS_DEFAULT: 'secretsDefault', SECRETS_COOKIE: 'secretsCookie', SECRETS_CIPHER: 'secretsCipher' },
  hydra: { DSN: 'dsn', SECRETS_SYSTEM: 'secretsSystem', SECRETS_COOKIE: 'secretsCookie' },
} as const;

/** Ory's environment split into what the chart reads by key and what goes in with envFrom. */
function splitOryEnvironment(env: pulumi.Output<Record<string, string>>, keys: Record<string, string>) {
  const chart = env.apply((e) => Object.fromEntries(Object.entries(keys).flatMap(([variable, key]) => (e[variable] === undefined ? [] : [[key, e[variable]]]))));
  const rest = env.apply((e) => Object.fromEntries(Object.entries(e).filter(([variable]) => !(variable in keys))));
  return { chart, rest };
}

const opaque = (name: string, namespace: string, data: pulumi.Input<Record<string, pulumi.Input<string>>>) =>
  new k8s.core.v1.Secret(name, { metadata: { name, namespace, labels: PART_OF }, type: 'Opaque', stringData: pulumi.secret(data) });

const IDENTITY_SCHEMA_FILE = 'identity.schema.json';

/** The login app's replicas; its limiters count in PostgreSQL, so they share one budget. */
export const LOGIN_REPLICAS = 2;
/** The login app's database and role on Kratos' cluster (its rate-limit counters only). */
export const LOGIN_DB = { database: 'login', role: 'login' } as const;

export function declareIdentity(ctx: K8sContext, platform: K8sPlatform, images: K8sImages) {
  const { cfg, secrets, ns } = ctx;
  const namespace = ns.platform;
  const files = identityFiles(cfg, IDENTITY_ADDRESSES, `file:///etc/config/${IDENTITY_SCHEMA_FILE}`);
  const oryPods = (release: string) => ({ 'app.kubernetes.io/instance': release });

  const database = (name: 'kratos' | 'hydra', password: pulumi.Input<string>, extra: Pick<DatabaseSpec, 'roles'> & { directClients?: DatabaseSpec['directClients'] } = {}) =>
    declareDatabase(
      ctx,
      {
        name: `${name}-db`,
        image: images.thirdParty.postgres,
        size: ctx.k8s.identityDbSize,
        limits: LIMITS.postgres,
        database: name,
        owner: name,
        ownerPassword: password,
        // Every pod of the release: the servers, the courier, the migration Job.
        poolerClients: [{ pods: oryPods(name) }],
        directClients: extra.directClients ?? [],
        ...(extra.roles ? { roles: extra.roles } : {}),
        backup: platform.backup,
        backupCredentials: platform.backupCredentials,
      },
      { dependsOn: [platform.namespaces.namespaces.platform] },
    );
  // The login app's rate-limit counters (docs/identity.md "Rate limits and replicas"): a database of
  // their own, `login`, owned by the role `login`, on Kratos' cluster (as on Docker's identity-db): no
  // cluster of their own for one small table, and sign-in already stops when this cluster is down. The
  // role owns nothing else and reads no table of Kratos'. Its replicas connect to the primary directly:
  // a few connections each, and no pooler lookup for a second database.
  const kratosDb = database('kratos', secrets.kratosDbPassword, {
    roles: [{ name: LOGIN_DB.role, password: secrets.loginDbPassword, comment: "the login app's rate-limit counters: owns the database login only" }],
    directClients: [{ pods: 'login' }],
  });
  const hydraDb = database('hydra', secrets.hydraDbPassword);
  const loginDatabase = new k8s.apiextensions.CustomResource(
    'login-db',
    {
      apiVersion: 'postgresql.cnpg.io/v1',
      kind: 'Database',
      metadata: { name: 'login', namespace, labels: PART_OF },
      spec: { name: LOGIN_DB.database, owner: LOGIN_DB.role, cluster: { name: 'kratos-db' }, ensure: 'present', databaseReclaimPolicy: 'retain' },
    },
    { dependsOn: [kratosDb.cluster] },
  );
  const loginDatabaseUrl = pulumi.interpolate`postgres://${LOGIN_DB.role}:${secrets.loginDbPassword}@${kratosDb.hosts.primary}:${PG_PORT}/${LOGIN_DB.database}`;
  const dsn = (name: string, password: pulumi.Input<string>, host: string) =>
    pulumi.interpolate`postgres://${name}:${password}@${host}:${PG_PORT}/${name}?sslmode=disable&max_conns=20&max_idle_conns=4`;

  const kratosEnv = splitOryEnvironment(kratosSecretEnvironment(cfg, secrets, dsn('kratos', secrets.kratosDbPassword, kratosDb.hosts.pooled)), CHART_SECRET_KEYS.kratos);
  const hydraEnv = splitOryEnvironment(hydraSecretEnvironment(cfg, secrets, dsn('hydra', secrets.hydraDbPassword, hydraDb.hosts.pooled)), CHART_SECRET_KEYS.hydra);
  const kratosSecrets = opaque('kratos-secrets', namespace, kratosEnv.chart);
  const kratosEnvironment = opaque('kratos-environment', namespace, kratosEnv.rest);
  const hydraSecrets = opaque('hydra-secrets', namespace, hydraEnv.chart);

  const oryLimits = resources(LIMITS.identity);
  const kratos = new k8s.helm.v3.Release(
    'kratos',
    {
      name: 'kratos',
      namespace,
      chart: 'kratos',
      version: ORY_CHARTS.version,
      repositoryOpts: { repo: ORY_CHARTS.repo },
      atomic: true,
      values: {
        fullnameOverride: 'kratos',
        image: splitImage(images.thirdParty.kratos),
        replicaCount: 2,
        service: { public: { port: UPSTREAMS.kratosPublic.port }, admin: { port: ADMIN_UPSTREAMS.kratosAdmin.port } },
        secret: { enabled: false, nameOverride: kratosSecrets.metadata.name },
        kratos: {
          automigration: { enabled: true, type: 'job', resources: oryLimits },
          config: files.kratos,
          identitySchemas: { [IDENTITY_SCHEMA_FILE]: files.identitySchema },
        },
        deployment: { resources: oryLimits, environmentSecretsName: kratosEnvironment.metadata.name, automountServiceAccountToken: false },
        job: { resources: oryLimits, automountServiceAccountToken: false },
        // The courier: one StatefulSet replica, its own pod (the chart fixes replicas at 1).
        courier: { enabled: true },
        pdb: { enabled: true, spec: { minAvailable: 1 } },
      },
    },
    { dependsOn: [kratosDb.pooler, kratosSecrets, kratosEnvironment] },
  );
  const hydra = new k8s.helm.v3.Release(
    'hydra',
    {
      name: 'hydra',
      namespace,
      chart: 'hydra',
      version: ORY_CHARTS.version,
      repositoryOpts: { repo: ORY_CHARTS.repo },
      atomic: true,
      values: {
        fullnameOverride: 'hydra',
        image: splitImage(images.thirdParty.hydra),
        replicaCount: 2,
        // Clients are synced by the clients-sync Job from clients.yaml, as on the Docker target.
        maester: { enabled: false },
        secret: { enabled: false, nameOverride: hydraSecrets.metadata.name },
        hydra: { automigration: { enabled: true, type: 'job', resources: oryLimits }, config: files.hydra },
        deployment: { resources: oryLimits, automountServiceAccountToken: false },
        job: { resources: oryLimits, automountServiceAccountToken: false },
        pdb: { enabled: true, spec: { minAvailable: 1 } },
      },
    },
    { dependsOn: [hydraDb.pooler, hydraSecrets] },
  );

  const login = webApp(ctx, 'login', {
    image: images.project.login,
    port: UPSTREAMS.login.port,
    env: loginEnvironment(cfg, secrets, IDENTITY_ADDRESSES, { databaseUrl: loginDatabaseUrl, replicas: LOGIN_REPLICAS }),
    health: '/health/alive',
    replicas: LOGIN_REPLICAS,
    dependsOn: [kratos, hydra, loginDatabase],
  });
  const accountsUi = cfg.selfServiceUi
    ? webApp(ctx, 'accounts-ui', {
        image: images.thirdParty.selfServiceUi,
        port: UPSTREAMS.accountsUi.port,
        env: accountsUiEnvironment(cfg, secrets, IDENTITY_ADDRESSES),
        health: '/health/alive',
        replicas: 2,
        dependsOn: [kratos],
      })
    : undefined;

  // The OAuth2 clients, synced into Hydra once its migration ran and it is up. A Job is immutable: a
  // changed clients.yaml is a Job of another name, so it runs again, as the Docker job does.
  const clientsHash = createHash('sha256').update(files.clientsYml).digest('hex').slice(0, 10);
  const clientsConfig = new k8s.core.v1.ConfigMap('clients-sync', {
    metadata: { name: `clients-sync-${clientsHash}`, namespace, labels: labels('clients-sync') },
    data: { 'clients.yaml': files.clientsYml },
  });
  const clientsEnv = environmentSecret('clients-sync', namespace, { NODE_ENV: 'production', HYDRA_ADMIN_URL: IDENTITY_ADDRESSES.hydraAdmin });
  const clientsSync = new k8s.batch.v1.Job(
    'clients-sync',
    {
      metadata: { name: `clients-sync-${clientsHash}`, namespace, labels: labels('clients-sync') },
      spec: {
        backoffLimit: 4,
        template: {
          metadata: { labels: labels('clients-sync') },
          spec: podSpec({
            ctx,
            restartPolicy: 'Never',
            containers: [
              container({
                name: 'clients-sync',
                image: images.project.login,
                limits: LIMITS.job,
                uid: NODE_UID,
                command: [...ENTRY_POINTS.clientsSync, '--file', CLIENTS_FILE_IN_CONTAINER],
                envSecret: clientsEnv.name,
                volumeMounts: [{ name: 'clients', mountPath: dirname(CLIENTS_FILE_IN_CONTAINER), readOnly: true }],
              }),
            ],
            volumes: [{ name: 'clients', configMap: { name: clientsConfig.metadata.name } }],
          }),
        },
      },
    },
    { dependsOn: [hydra, clientsConfig, clientsEnv.secret] },
  );

  const edge = { pods: 'edge' };
  const policies = [
    ...kratosDb.policies,
    ...hydraDb.policies,
    allow('kratos', namespace, { 'app.kubernetes.io/name': 'kratos' }, {
      ingress: [
        { peers: [edge, { pods: 'api' }, { pods: 'login' }, { pods: 'accounts-ui' }], ports: [UPSTREAMS.kratosPublic.port] },
        // Hydra ends the Kratos session on an OIDC logout (hydra.yml identity_provider).
        { peers: [{ pods: 'api' }, { pods: 'login' }, { pods: 'hydra' }], ports: [ADMIN_UPSTREAMS.kratosAdmin.port] },
      ],
      // Social sign-in: Kratos fetches the providers' discovery documents and exchanges codes (https).
      ...(cfg.oidcProviders.length > 0 ? { egress: [{ peers: [INTERNET], ports: [443] }] } : {}),
    }),
    allow('hydra', namespace, { 'app.kubernetes.io/name': 'hydra' }, {
      ingress: [
        { peers: [edge], ports: [UPSTREAMS.hydraPublic.port] },
        { peers: [{ pods: 'api' }, { pods: 'login' }, { pods: 'clients-sync' }], ports: [ADMIN_UPSTREAMS.hydraAdmin.port] },
      ],
      egress: [{ peers: [{ pods: 'kratos' }], ports: [ADMIN_UPSTREAMS.kratosAdmin.port] }],
    }),
    // Every pod of each release reaches its database's pooler, and nothing else.
    allow('kratos-release', namespace, oryPods('kratos'), { egress: [{ peers: [{ pods: { 'cnpg.io/poolerName': kratosDb.hosts.pooled } }], ports: [PG_PORT] }] }),
    allow('hydra-release', namespace, oryPods('hydra'), { egress: [{ peers: [{ pods: { 'cnpg.io/poolerName': hydraDb.hosts.pooled } }], ports: [PG_PORT] }] }),
    // The courier alone sends mail (the relay's submission ports).
    allow('kratos-courier', namespace, { 'app.kubernetes.io/name': 'kratos-courier' }, { egress: [{ peers: [INTERNET], ports: [25, 465, 587] }] }),
    allow('login', namespace, { 'app.kubernetes.io/name': 'login' }, {
      ingress: [{ peers: [edge], ports: [UPSTREAMS.login.port] }],
      egress: [
        { peers: [{ pods: 'kratos' }], ports: [UPSTREAMS.kratosPublic.port, ADMIN_UPSTREAMS.kratosAdmin.port] },
        { peers: [{ pods: 'hydra' }], ports: [ADMIN_UPSTREAMS.hydraAdmin.port] },
        // Its limiters' counters, in the database login on Kratos' cluster.
        { peers: [{ pods: { 'cnpg.io/cluster': 'kratos-db' } }], ports: [PG_PORT] },
      ],
    }),
    ...(accountsUi
      ? [
          allow('accounts-ui', namespace, { 'app.kubernetes.io/name': 'accounts-ui' }, {
            ingress: [{ peers: [edge], ports: [UPSTREAMS.accountsUi.port] }],
            egress: [{ peers: [{ pods: 'kratos' }], ports: [UPSTREAMS.kratosPublic.port] }],
          }),
        ]
      : []),
    allow('clients-sync', namespace, { 'app.kubernetes.io/name': 'clients-sync' }, { egress: [{ peers: [{ pods: 'hydra' }], ports: [ADMIN_UPSTREAMS.hydraAdmin.port] }] }),
  ];

  return {
    releases: { kratos, hydra },
    databases: { kratos: kratosDb, hydra: hydraDb },
    /** The login app's database on kratos-db (a CloudNativePG Database). */
    loginDatabase,
    workloads: { login: login.deployment, ...(accountsUi ? { accountsUi: accountsUi.deployment } : {}) },
    jobs: { clientsSync },
    services: { login: login.service, ...(accountsUi ? { accountsUi: accountsUi.service } : {}) },
    policies,
    rendered: files,
  };
}

/** A stateless web app of the platform: Deployment, Service, PodDisruptionBudget. */
export function webApp(
  ctx: K8sContext,
  name: string,
  spec: { image: pulumi.Input<string>; port: number; env: Record<string, pulumi.Input<string>>; health: string; replicas: number; dependsOn: pulumi.Resource[]; uid?: number },
) {
  const namespace = ctx.ns.platform;
  const env = environmentSecret(name, namespace, spec.env);
  const deployment = new k8s.apps.v1.Deployment(
    name,
    {
      metadata: { name, namespace, labels: labels(name) },
      spec: {
        replicas: spec.replicas,
        selector: { matchLabels: { 'app.kubernetes.io/name': name } },
        template: {
          metadata: { labels: labels(name), annotations: { 'geodata.example.org/environment-sha256': env.checksum } },
          spec: podSpec({
            ctx,
            containers: [
              container({
                name,
                image: spec.image,
                limits: LIMITS.node,
                uid: spec.uid ?? NODE_UID,
                envSecret: env.name,
                ports: [{ name: 'http', port: spec.port }],
                probe: { path: spec.health, port: spec.port },
              }),
            ],
          }),
        },
      },
    },
    { dependsOn: [env.secret, ...spec.dependsOn] },
  );
  const service = new k8s.core.v1.Service(name, {
    metadata: { name, namespace, labels: labels(name) },
    spec: { selector: { 'app.kubernetes.io/name': name }, ports: [{ name: 'http', port: spec.port, targetPort: spec.port, protocol: 'TCP' }] },
  });
  const pdb = new k8s.policy.v1.PodDisruptionBudget(name, {
    metadata: { name, namespace, labels: labels(name) },
    spec: { minAvailable: 1, selector: { matchLabels: { 'app.kubernetes.io/name': name } } },
  });
  return { deployment, service, pdb };
}
