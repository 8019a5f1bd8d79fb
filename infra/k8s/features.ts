import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { createHash } from 'node:crypto';
import { ENTRY_POINTS } from '../images.js';
import { platformOrigins, UPSTREAMS } from '../routes.js';
import { LIMITS } from '../stack/common.js';
import { apiEnvironment, GEOSERVER_DATA_DIR, GEOSERVER_UID, geoserverEnvironment, geoserverProvisionEnvironment } from '../stack/settings.js';
import { allow, container, environmentSecret, labels, NODE_UID, podSpec, type K8sContext } from './common.js';
import { IDENTITY_ADDRESSES } from './identity.js';
import type { K8sImages } from './images.js';
import { declareDatabase, PG_PORT } from './postgres.js';
import type { K8sPlatform } from './platform.js';

/**
 * Features on Kubernetes: the PostGIS database (CloudNativePG), the API's migrations (a Job) and the API
 * (a Deployment with replicas, probes, a PodDisruptionBudget and a HorizontalPodAutoscaler), GeoServer (a
 * StatefulSet of one, its data directory on a volume) and its provisioning (a Job): the parts of
 * infra/stack/features.ts, told the same variables (infra/stack/settings.ts).
 *
 * Order (Pulumi waits for each Job to complete, as it waits for the Docker jobs' exit codes)
 *   features-db (Cluster, Pooler) → api-migrate (Job) → api
 *                                 └→ geoserver (ready) → geoserver-provision (Job, after api-migrate)
 *
 * Roles: the database's owner is `features` (the API, its migrations); `geoserver` is a login role the
 * operator keeps, created without rights here and granted on the feature table by migration 020, as
 * infra/jobs/features-db-roles.sh does on the Docker target; `webhook` owns the database `webhook` and
 * nothing else (WEBHOOK_DB below; the Docker webhook keeps its file journal instead).
 *
 * GeoServer stays one replica: its provisioning writes into one data directory and reloads one instance
 * (docs/infra.md "Kubernetes: more GeoServers" says what more would take).
 */

export const API_REPLICA_CPU_TARGET = 70;

/**
 * The webhook's shared state (journal, queue, delivery ids, failed-authentication counts; docs/webhook.md
 * "More than one replica") on this cluster: the database `webhook`, owned by the role `webhook`, which
 * owns nothing else, and in it the schema `webhook` the webhook migrates. Why this cluster (least
 * privilege): its application database is closed to PUBLIC (`REVOKE ALL ON DATABASE features FROM
 * PUBLIC` below), so the role can connect to its own database and to none of the features' — on
 * kratos-db or hydra-db it could connect to `kratos` or `hydra`, and the webhook, which the git hosts
 * reach from the internet, would have a network path to the clusters holding credentials and sessions.
 * Its replicas open at most 5 connections each (services/webhook/src/database.ts), 15 during a rolling
 * update; the role may hold 20, so a webhook gone wrong cannot take this cluster's connections.
 */
export const WEBHOOK_DB = { database: 'webhook', role: 'webhook', schema: 'webhook', connectionLimit: 20 } as const;

/** Job names carry a digest of what they run: a Job is immutable, so new code or settings is a new Job that runs again. */
const digest = (...parts: string[]) => createHash('sha256').update(parts.join('\0')).digest('hex').slice(0, 10);

export function declareFeatures(ctx: K8sContext, platform: K8sPlatform, images: K8sImages, identity: { releases: { kratos: pulumi.Resource; hydra: pulumi.Resource } }) {
  const { cfg, secrets, ns, k8s: settings } = ctx;
  const namespace = ns.platform;
  const origins = platformOrigins(cfg.domains, cfg.targets, cfg.parentDomain);

  const db = declareDatabase(
    ctx,
    {
      name: 'features-db',
      image: images.thirdParty.postgis,
      size: settings.featuresDbSize,
      limits: LIMITS.postgres,
      database: 'features',
      owner: 'features',
      ownerPassword: secrets.featuresDbPassword,
      roles: [
        { name: 'geoserver', password: secrets.geoserverDbPassword, comment: 'GeoServer: the feature table only (migration 020), no DDL' },
        {
          name: WEBHOOK_DB.role,
          password: secrets.webhookDbPassword,
          comment: "the deployment webhook's shared state: owns the database webhook only",
          connectionLimit: WEBHOOK_DB.connectionLimit,
        },
      ],
      postInitApplicationSQL: [
        // As the Docker target's postgis image does for its database: the extensions the migrations use.
        'CREATE EXTENSION IF NOT EXISTS postgis',
        'CREATE EXTENSION IF NOT EXISTS pg_trgm',
        'REVOKE ALL ON DATABASE features FROM PUBLIC',
      ],
      poolerClients: [{ pods: 'api' }, { pods: 'qc-worker' }, { pods: 'geoserver' }],
      // The webhook's replicas too (as the login app on kratos-db): a few connections each, to their
      // own database, and no pooler lookup for a second database.
      directClients: [{ pods: 'api-migrate' }, { pods: 'webhook' }],
      backup: platform.backup,
      backupCredentials: platform.backupCredentials,
    },
    { dependsOn: [platform.namespaces.namespaces.platform] },
  );
  const webhookDatabase = new k8s.apiextensions.CustomResource(
    'webhook-db',
    {
      apiVersion: 'postgresql.cnpg.io/v1',
      kind: 'Database',
      metadata: { name: WEBHOOK_DB.database, namespace, labels: labels('webhook') },
      spec: {
        name: WEBHOOK_DB.database,
        owner: WEBHOOK_DB.role,
        cluster: { name: 'features-db' },
        ensure: 'present',
        databaseReclaimPolicy: 'retain',
        // Declared, so the webhook's migration finds it (it would create it as the database's owner).
        schemas: [{ name: WEBHOOK_DB.schema, owner: WEBHOOK_DB.role, ensure: 'present' }],
      },
    },
    { dependsOn: [db.cluster] },
  );
  const webhookDatabaseUrl = pulumi.interpolate`postgres://${WEBHOOK_DB.role}:${secrets.webhookDbPassword}@${db.hosts.primary}:${PG_PORT}/${WEBHOOK_DB.database}`;
  const pooledUrl = pulumi.interpolate`postgres://features:${secrets.featuresDbPassword}@${db.hosts.pooled}:${PG_PORT}/features`;
  const primaryUrl = pulumi.interpolate`postgres://features:${secrets.featuresDbPassword}@${db.hosts.primary}:${PG_PORT}/features`;

  // Migrations connect to the primary (DDL, graphile-worker's schema, the migration lock).
  const migrateEnv = environmentSecret('api-migrate', namespace, { NODE_ENV: 'production', DATABASE_URL: primaryUrl });
  const apiMigrate = new k8s.batch.v1.Job(
    'api-migrate',
    {
      metadata: { name: `api-migrate-${digest(images.project.api)}`, namespace, labels: labels('api-migrate') },
      spec: {
        backoffLimit: 3,
        template: {
          metadata: { labels: labels('api-migrate') },
          spec: podSpec({
            ctx,
            restartPolicy: 'Never',
            containers: [container({ name: 'api-migrate', image: images.project.api, limits: LIMITS.job, uid: NODE_UID, command: [...ENTRY_POINTS.apiMigrate], envSecret: migrateEnv.name })],
          }),
        },
      },
    },
    { dependsOn: [db.cluster, migrateEnv.secret] },
  );

  const apiEnv = environmentSecret('api', namespace, apiEnvironment(cfg, { databaseUrl: pooledUrl, identity: IDENTITY_ADDRESSES, origins }));
  const apiLabels = labels('api');
  const api = new k8s.apps.v1.Deployment(
    'api',
    {
      metadata: { name: 'api', namespace, labels: apiLabels },
      spec: {
        // The autoscaler owns the count from here on; this is the first one.
        replicas: settings.apiReplicas.min,
        strategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } },
        selector: { matchLabels: { 'app.kubernetes.io/name': 'api' } },
        template: {
          metadata: { labels: apiLabels, annotations: { 'geodata.example.org/environment-sha256': apiEnv.checksum } },
          spec: {
            ...podSpec({
              ctx,
              containers: [
                container({
                  name: 'api',
                  image: images.project.api,
                  limits: LIMITS.node,
                  uid: NODE_UID,
                  envSecret: apiEnv.name,
                  ports: [{ name: 'http', port: UPSTREAMS.api.port }],
                  probe: { path: '/healthz', port: UPSTREAMS.api.port },
                  volumeMounts: [{ name: 'data', mountPath: '/var/lib/api' }],
                }),
              ],
              volumes: [{ name: 'data', emptyDir: { sizeLimit: '256Mi' } }],
            }),
            topologySpreadConstraints: [{ maxSkew: 1, topologyKey: 'kubernetes.io/hostname', whenUnsatisfiable: 'ScheduleAnyway', labelSelector: { matchLabels: { 'app.kubernetes.io/name': 'api' } } }],
          },
        },
      },
    },
    // The autoscaler changes spec.replicas; `pulumi up` must not reset it.
    { dependsOn: [apiMigrate, apiEnv.secret, identity.releases.kratos, identity.releases.hydra], ignoreChanges: ['spec.replicas'] },
  );
  const apiService = new k8s.core.v1.Service('api', {
    metadata: { name: 'api', namespace, labels: apiLabels },
    spec: { selector: { 'app.kubernetes.io/name': 'api' }, ports: [{ name: 'http', port: UPSTREAMS.api.port, targetPort: UPSTREAMS.api.port, protocol: 'TCP' }] },
  });
  const apiPdb = new k8s.policy.v1.PodDisruptionBudget('api', {
    metadata: { name: 'api', namespace, labels: apiLabels },
    spec: { minAvailable: 1, selector: { matchLabels: { 'app.kubernetes.io/name': 'api' } } },
  });
  const apiHpa = new k8s.autoscaling.v2.HorizontalPodAutoscaler('api', {
    metadata: { name: 'api', namespace, labels: apiLabels },
    spec: {
      scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'api' },
      minReplicas: settings.apiReplicas.min,
      maxReplicas: settings.apiReplicas.max,
      metrics: [{ type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: API_REPLICA_CPU_TARGET } } }],
      behavior: { scaleDown: { stabilizationWindowSeconds: 300 } },
    },
  });

  const geoserverUid = Number(GEOSERVER_UID);
  const geoEnv = environmentSecret('geoserver', namespace, geoserverEnvironment(cfg, secrets, origins, 'already-unprivileged'));
  const geoLabels = labels('geoserver');
  const geoPort = UPSTREAMS.geoserver.port;
  const tomcat = '/usr/local/tomcat';
  const geoserver = new k8s.apps.v1.StatefulSet(
    'geoserver',
    {
      metadata: { name: 'geoserver', namespace, labels: geoLabels },
      spec: {
        // One: the provisioning writes one data directory and reloads one instance.
        replicas: 1,
        serviceName: 'geoserver',
        selector: { matchLabels: { 'app.kubernetes.io/name': 'geoserver' } },
        template: {
          metadata: { labels: geoLabels, annotations: { 'geodata.example.org/environment-sha256': geoEnv.checksum } },
          spec: podSpec({
            ctx,
            fsGroup: geoserverUid,
            tmpMb: 512,
            // The image's start script writes web.xml (CORS) and Tomcat's work files: Tomcat is copied into
            // a volume first, so the root file system stays read-only.
            initContainers: [
              container({
                name: 'tomcat',
                image: images.thirdParty.geoserver,
                limits: LIMITS.job,
                uid: geoserverUid,
                command: ['sh', '-c', `cp -R ${tomcat}/. /seed/`],
                volumeMounts: [{ name: 'tomcat', mountPath: '/seed' }],
              }),
            ],
            containers: [
              container({
                name: 'geoserver',
                image: images.thirdParty.geoserver,
                limits: LIMITS.geoserver,
                uid: geoserverUid,
                envSecret: geoEnv.name,
                ports: [{ name: 'http', port: geoPort }],
                probe: { path: '/geoserver/web/wicket/resource/org.geoserver.web.GeoServerBasePage/img/logo.png', port: geoPort, initialDelaySeconds: 60, failureThreshold: 10 },
                volumeMounts: [
                  { name: 'data', mountPath: GEOSERVER_DATA_DIR },
                  { name: 'tomcat', mountPath: tomcat },
                ],
              }),
            ],
            volumes: [{ name: 'tomcat', emptyDir: { sizeLimit: '1Gi' } }],
          }),
        },
        volumeClaimTemplates: [
          {
            metadata: { name: 'data', labels: geoLabels },
            spec: {
              accessModes: ['ReadWriteOnce'],
              ...(settings.storageClass ? { storageClassName: settings.storageClass } : {}),
              resources: { requests: { storage: settings.geoserverDataSize } },
            },
          },
        ],
      },
    },
    { dependsOn: [db.pooler, geoEnv.secret] },
  );
  const geoserverService = new k8s.core.v1.Service('geoserver', {
    metadata: { name: 'geoserver', namespace, labels: geoLabels },
    spec: { selector: { 'app.kubernetes.io/name': 'geoserver' }, ports: [{ name: 'http', port: geoPort, targetPort: geoPort, protocol: 'TCP' }] },
  });

  // GeoServer's header authentication is files in its data directory (infra/geoserver/security.ts): the
  // Job mounts the same volume, so it runs on geoserver-0's node (a ReadWriteOnce volume is per node).
  const provisionEnv = environmentSecret(
    'geoserver-provision',
    namespace,
    geoserverProvisionEnvironment(cfg, secrets, { geoserverUrl: `http://geoserver:${geoPort}/geoserver`, dbHost: db.hosts.pooled, dbPort: String(PG_PORT) }),
  );
  const provision = new k8s.batch.v1.Job(
    'geoserver-provision',
    {
      metadata: { name: `geoserver-provision-${digest(images.project.ops, images.project.api)}`, namespace, labels: labels('geoserver-provision') },
      spec: {
        backoffLimit: 6,
        template: {
          metadata: { labels: labels('geoserver-provision') },
          spec: {
            ...podSpec({
              ctx,
              restartPolicy: 'Never',
              fsGroup: geoserverUid,
              containers: [
                container({
                  name: 'geoserver-provision',
                  image: images.project.ops,
                  limits: LIMITS.job,
                  uid: geoserverUid,
                  command: [...ENTRY_POINTS.geoserverProvision],
                  envSecret: provisionEnv.name,
                  volumeMounts: [{ name: 'data', mountPath: GEOSERVER_DATA_DIR }],
                }),
              ],
              volumes: [{ name: 'data', persistentVolumeClaim: { claimName: 'data-geoserver-0' } }],
            }),
            affinity: {
              podAffinity: {
                requiredDuringSchedulingIgnoredDuringExecution: [{ topologyKey: 'kubernetes.io/hostname', labelSelector: { matchLabels: { 'app.kubernetes.io/name': 'geoserver' } } }],
              },
            },
          },
        },
      },
    },
    { dependsOn: [geoserver, apiMigrate, provisionEnv.secret] },
  );

  const edge = { pods: 'edge' };
  const pooler = { pods: { 'cnpg.io/poolerName': db.hosts.pooled } };
  const policies = [
    ...db.policies,
    allow('api', namespace, { 'app.kubernetes.io/name': 'api' }, {
      ingress: [{ peers: [edge], ports: [UPSTREAMS.api.port] }],
      egress: [
        { peers: [pooler], ports: [PG_PORT] },
        { peers: [{ pods: 'kratos' }], ports: [UPSTREAMS.kratosPublic.port, 4434] },
        { peers: [{ pods: 'hydra' }], ports: [4445] },
      ],
    }),
    allow('api-migrate', namespace, { 'app.kubernetes.io/name': 'api-migrate' }, { egress: [{ peers: [{ pods: { 'cnpg.io/cluster': 'features-db' } }], ports: [PG_PORT] }] }),
    allow('geoserver', namespace, { 'app.kubernetes.io/name': 'geoserver' }, {
      // The edge (with the API's answer for writes) and the provisioning job; nothing else.
      ingress: [{ peers: [edge, { pods: 'geoserver-provision' }], ports: [geoPort] }],
      egress: [{ peers: [pooler], ports: [PG_PORT] }],
    }),
    allow('geoserver-provision', namespace, { 'app.kubernetes.io/name': 'geoserver-provision' }, { egress: [{ peers: [{ pods: 'geoserver' }], ports: [geoPort] }] }),
  ];

  return {
    database: db,
    /** The webhook's database on this cluster (a CloudNativePG Database) and its URL (a secret). */
    webhookDatabase: { database: webhookDatabase, url: webhookDatabaseUrl, cluster: 'features-db' },
    workloads: { api, geoserver },
    services: { api: apiService, geoserver: geoserverService },
    autoscaling: { apiPdb, apiHpa },
    jobs: { apiMigrate, geoserverProvision: provision },
    policies,
    urls: { pooled: pooledUrl },
    origins,
  };
}

export type K8sFeatures = ReturnType<typeof declareFeatures>;
