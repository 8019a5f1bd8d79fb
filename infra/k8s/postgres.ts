import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import type { BackupOffsite } from '../config.js';
import type { Limits } from '../containers.js';
import { allow, INTERNET, PART_OF, resources, type K8sContext, type Peer } from './common.js';

/**
 * A PostgreSQL database as CloudNativePG runs it: a `Cluster` (a primary and streaming replicas, failover
 * by the operator), a `Pooler` (PgBouncer) the applications connect through, WAL archiving and nightly
 * base backups to the object store by the Barman Cloud plugin (`ObjectStore`, `ScheduledBackup`), and the
 * NetworkPolicies that let exactly the named clients in.
 *
 * The pooler runs in **session** mode, and must: graphile-worker (the QC queue) LISTENs for new jobs on
 * its connection, and node-postgres' named prepared statements live on the server connection that
 * prepared them; in transaction mode a later query could land on a connection that never saw either.
 * Session pooling still bounds the connections PostgreSQL sees (one per client connection, at most
 * `max_client_conn`), which is what the replicas need (docs/infra.md "Kubernetes: databases").
 */

export const BARMAN_PLUGIN = 'barman-cloud.cloudnative-pg.io';
export const PG_PORT = 5432;

export interface DatabaseSpec {
  /** Cluster name: its Services are <name>-rw / -ro / -r, its pooler's <name>-pooler. */
  name: string;
  image: string;
  size: string;
  limits: Limits;
  database: string;
  owner: string;
  ownerPassword: pulumi.Input<string>;
  /**
   * Further login roles the operator keeps (their passwords as Secrets); `connectionLimit` caps the
   * connections the role may hold at once on the whole cluster (unset: no limit).
   */
  roles?: { name: string; password: pulumi.Input<string>; comment: string; connectionLimit?: number }[];
  /** SQL run once as the superuser in the new database (extensions, grants the owner may not give). */
  postInitApplicationSQL?: string[];
  /** Workloads that connect through the pooler. */
  poolerClients: Peer[];
  /** Workloads that connect to the primary directly. */
  directClients: Peer[];
  backup: BackupOffsite;
  backupCredentials: k8s.core.v1.Secret;
}

const basicAuth = (ctx: K8sContext, name: string, username: string, password: pulumi.Input<string>) =>
  new k8s.core.v1.Secret(name, {
    metadata: { name, namespace: ctx.ns.platform, labels: { ...PART_OF, 'cnpg.io/reload': 'true' } },
    type: 'kubernetes.io/basic-auth',
    stringData: { username, password: pulumi.secret(password) },
  });

/** The bucket key CloudNativePG's Barman Cloud plugin writes with (the Docker target's off-host copy uses the same key). */
export function backupCredentials(ctx: K8sContext, secretAccessKey: pulumi.Input<string>, backup: BackupOffsite) {
  return new k8s.core.v1.Secret('backup-object-store', {
    metadata: { name: 'backup-object-store', namespace: ctx.ns.platform, labels: PART_OF },
    type: 'Opaque',
    stringData: { ACCESS_KEY_ID: backup.accessKeyId, ACCESS_SECRET_KEY: pulumi.secret(secretAccessKey), ACCESS_REGION: backup.region },
  });
}

export function declareDatabase(ctx: K8sContext, spec: DatabaseSpec, opts: pulumi.CustomResourceOptions = {}) {
  const { k8s: settings, ns } = ctx;
  const namespace = ns.platform;
  const ownerSecret = basicAuth(ctx, `${spec.name}-owner`, spec.owner, spec.ownerPassword);
  const roleSecrets = (spec.roles ?? []).map((role) => ({ role, secret: basicAuth(ctx, `${spec.name}-role-${role.name}`, role.name, role.password) }));

  const prefix = spec.backup.prefix ? `${spec.backup.prefix}/` : '';
  const store = new k8s.apiextensions.CustomResource(
    `${spec.name}-store`,
    {
      apiVersion: 'barmancloud.cnpg.io/v1',
      kind: 'ObjectStore',
      metadata: { name: `${spec.name}-store`, namespace, labels: PART_OF },
      spec: {
        configuration: {
          destinationPath: `s3://${spec.backup.bucket}/${prefix}cnpg`,
          endpointURL: spec.backup.endpoint,
          s3Credentials: {
            accessKeyId: { name: spec.backupCredentials.metadata.name, key: 'ACCESS_KEY_ID' },
            secretAccessKey: { name: spec.backupCredentials.metadata.name, key: 'ACCESS_SECRET_KEY' },
            region: { name: spec.backupCredentials.metadata.name, key: 'ACCESS_REGION' },
          },
          wal: { compression: 'gzip' },
          data: { compression: 'gzip', jobs: 2 },
        },
        retentionPolicy: `${settings.backupRetentionDays}d`,
      },
    },
    opts,
  );

  const cluster = new k8s.apiextensions.CustomResource(
    spec.name,
    {
      apiVersion: 'postgresql.cnpg.io/v1',
      kind: 'Cluster',
      metadata: { name: spec.name, namespace, labels: PART_OF },
      spec: {
        instances: settings.databaseInstances,
        imageName: spec.image,
        primaryUpdateStrategy: 'unsupervised',
        // No superuser password exists: nothing outside the operator logs in as postgres.
        enableSuperuserAccess: false,
        storage: { size: spec.size, ...(settings.storageClass ? { storageClass: settings.storageClass } : {}) },
        resources: resources(spec.limits),
        affinity: { podAntiAffinityType: 'preferred', topologyKey: 'kubernetes.io/hostname' },
        bootstrap: {
          initdb: {
            database: spec.database,
            owner: spec.owner,
            secret: { name: ownerSecret.metadata.name },
            ...(spec.postInitApplicationSQL ? { postInitApplicationSQL: spec.postInitApplicationSQL } : {}),
          },
        },
        ...(roleSecrets.length
          ? {
              managed: {
                roles: roleSecrets.map(({ role, secret }) => ({
                  name: role.name,
                  ensure: 'present',
                  comment: role.comment,
                  login: true,
                  superuser: false,
                  createdb: false,
                  createrole: false,
                  inherit: true,
                  ...(role.connectionLimit !== undefined ? { connectionLimit: role.connectionLimit } : {}),
                  passwordSecret: { name: secret.metadata.name },
                })),
              },
            }
          : {}),
        plugins: [{ name: BARMAN_PLUGIN, isWALArchiver: true, parameters: { barmanObjectName: `${spec.name}-store` } }],
      },
    },
    { ...opts, dependsOn: [ownerSecret, store, ...roleSecrets.map((r) => r.secret), ...toArray(opts.dependsOn)] },
  );

  const poolerName = `${spec.name}-pooler`;
  const pooler = new k8s.apiextensions.CustomResource(
    poolerName,
    {
      apiVersion: 'postgresql.cnpg.io/v1',
      kind: 'Pooler',
      metadata: { name: poolerName, namespace, labels: PART_OF },
      spec: {
        cluster: { name: spec.name },
        instances: 2,
        type: 'rw',
        pgbouncer: {
          // Session mode: LISTEN and named prepared statements need their server connection (above).
          poolMode: 'session',
          parameters: { max_client_conn: '400', default_pool_size: '40' },
        },
        template: {
          metadata: { labels: PART_OF },
          spec: { containers: [{ name: 'pgbouncer', resources: resources({ memoryMb: 128, cpus: 0.5 }) }] },
        },
      },
    },
    { ...opts, dependsOn: [cluster] },
  );

  const backups = new k8s.apiextensions.CustomResource(
    `${spec.name}-daily`,
    {
      apiVersion: 'postgresql.cnpg.io/v1',
      kind: 'ScheduledBackup',
      metadata: { name: `${spec.name}-daily`, namespace, labels: PART_OF },
      spec: {
        // Seconds first (CloudNativePG's six-field cron): 03:00 every day, and one right away.
        schedule: '0 0 3 * * *',
        immediate: true,
        backupOwnerReference: 'self',
        cluster: { name: spec.name },
        method: 'plugin',
        pluginConfiguration: { name: BARMAN_PLUGIN },
      },
    },
    { ...opts, dependsOn: [cluster] },
  );

  const instances = { 'cnpg.io/cluster': spec.name };
  const poolerPods = { 'cnpg.io/poolerName': poolerName };
  const apiServer: Peer = { cidrs: ctx.k8s.apiServerCidrs };
  const operator: Peer = { namespace: ctx.k8s.cnpgNamespace };
  const policies = [
    allow(`${spec.name}-instances`, namespace, instances, {
      ingress: [
        { peers: [{ pods: poolerPods }, { pods: instances }, ...spec.directClients], ports: [PG_PORT] },
        // The operator asks each instance for its status; instances ask each other during failover.
        { peers: [operator, { pods: instances }], ports: [8000] },
      ],
      egress: [
        { peers: [{ pods: instances }], ports: [PG_PORT, 8000] },
        // The instance manager watches its Cluster and Secrets through the API server.
        { peers: [apiServer], ports: [443, 6443] },
        // The Barman Cloud sidecar ships WAL and base backups to the bucket (https).
        { peers: [INTERNET], ports: [443] },
      ],
    }),
    allow(`${spec.name}-pooler`, namespace, poolerPods, {
      ingress: [{ peers: spec.poolerClients, ports: [PG_PORT] }],
      egress: [
        { peers: [{ pods: instances }], ports: [PG_PORT] },
        { peers: [apiServer], ports: [443, 6443] },
      ],
    }),
  ];

  return {
    cluster,
    pooler,
    store,
    backups,
    policies,
    /** Where the applications connect (session pooling) and where migrations do (the primary). */
    hosts: { pooled: poolerName, primary: `${spec.name}-rw` },
  };
}

function toArray(value: pulumi.Input<pulumi.Input<pulumi.Resource>[]> | pulumi.Input<pulumi.Resource> | undefined): pulumi.Resource[] {
  if (value === undefined) return [];
  if (Array.isArray(value)) return value as pulumi.Resource[];
  return [value as pulumi.Resource];
}
