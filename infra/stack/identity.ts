import * as pulumi from '@pulumi/pulumi';
import { job, service, succeeded, type Limits } from '../containers.js';
import { ENTRY_POINTS } from '../images.js';
import { ADMIN_UPSTREAMS, UPSTREAMS } from '../routes.js';
import { env, fileUpload, LIMITS, nodeHttpCheck, pgReadyCheck, readRepoFile, wgetCheck, type StackContext } from './common.js';
import type { StackImages } from './images.js';
import type { StackNetwork } from './network.js';
import { accountsUiEnvironment, hydraSecretEnvironment, identityFiles, kratosSecretEnvironment, loginEnvironment } from './settings.js';

/**
 * Identity: its database and roles, the Kratos and Hydra migrations and servers, the login/consent
 * app, the optional self-service UI, and the OAuth2 clients synced into Hydra.
 *
 * Order
 *   identity-db → identity-db-roles (job) → kratos-migrate (job) → kratos ─┐
 *                                         → hydra-migrate (job)  → hydra  ─┴→ login, accounts-ui
 *                                                                   hydra → clients-sync (job)
 */

/** A fixed address in the admin /24 (the network's gateway is .1). */
function adminAddress(subnet: string, host: number): string {
  return subnet.replace(/0\/24$/, String(host));
}

export const CLIENTS_FILE_IN_CONTAINER = '/etc/config/identity/clients.yaml';

export function declareIdentity(ctx: StackContext, { networks, volumes }: StackNetwork, images: StackImages) {
  const { cfg, secrets, n } = ctx;
  const { app, admin, egress } = networks;
  const identityLimits: Limits = { ...LIMITS.identity, ...(cfg.identityDiskLimit ? { diskSize: cfg.identityDiskSize } : {}) };
  const identityDb = service('identity-db', n('identity-db'), {
    image: images.remote.postgres.imageId,
    limits: identityLimits,
    networks: [{ network: app, aliases: ['identity-db'] }],
    envs: env({ POSTGRES_USER: 'postgres', POSTGRES_DB: 'postgres', POSTGRES_PASSWORD: secrets.identityDbSuperuserPassword }),
    volumes: [{ volumeName: volumes.identityDb.name, containerPath: '/var/lib/postgresql/data' }],
    healthcheck: { test: pgReadyCheck('postgres'), interval: '10s', startPeriod: '30s' },
    waitHealthy: true,
  });
  const identityDbRoles = job('identity-db-roles', n('identity-db-roles'), {
    image: images.remote.postgres.imageId,
    limits: LIMITS.job,
    networks: [{ network: app }],
    entrypoints: ['/bin/sh', '/jobs/identity-db-roles.sh'],
    uploads: [fileUpload('/jobs/identity-db-roles.sh', readRepoFile('infra/jobs/identity-db-roles.sh'), true)],
    envs: env({
      PGHOST: 'identity-db',
      PGPORT: '5432',
      PGUSER: 'postgres',
      PGPASSWORD: secrets.identityDbSuperuserPassword,
      KRATOS_DB_PASSWORD: secrets.kratosDbPassword,
      HYDRA_DB_PASSWORD: secrets.hydraDbPassword,
      LOGIN_DB_PASSWORD: secrets.loginDbPassword,
    }),
    dependsOn: [identityDb],
  });

  const kratosAdminAddress = adminAddress(cfg.adminSubnet, 10);
  const hydraAdminAddress = adminAddress(cfg.adminSubnet, 11);
  const kratosAdminUrl = `http://${ADMIN_UPSTREAMS.kratosAdmin.host}:${ADMIN_UPSTREAMS.kratosAdmin.port}`;
  const hydraAdminUrl = `http://${ADMIN_UPSTREAMS.hydraAdmin.host}:${ADMIN_UPSTREAMS.hydraAdmin.port}`;
  const kratosPublicInternal = `http://${UPSTREAMS.kratosPublic.host}:${UPSTREAMS.kratosPublic.port}`;
  const urls = { kratosAdmin: kratosAdminUrl, hydraAdmin: hydraAdminUrl, kratosPublicInternal };
  // The identity templates rendered with the stack's values (shared with the Kubernetes target).
  const files = identityFiles(cfg, urls, 'file:///etc/config/kratos/identity.schema.json');
  const { kratosYml, hydraYml, clientsYml } = files;
  const kratosDsn = pulumi.interpolate`postgres://kratos:${secrets.kratosDbPassword}@identity-db:5432/kratos?sslmode=disable&max_conns=20&max_idle_conns=4`;
  const hydraDsn = pulumi.interpolate`postgres://hydra:${secrets.hydraDbPassword}@identity-db:5432/hydra?sslmode=disable&max_conns=20&max_idle_conns=4`;
  const kratosSecretsEnv = kratosSecretEnvironment(cfg, secrets, kratosDsn);
  const hydraSecretsEnv = hydraSecretEnvironment(cfg, secrets, hydraDsn);
  const kratosUploads = [
    fileUpload('/etc/config/kratos/kratos.yml', kratosYml),
    fileUpload('/etc/config/kratos/identity.schema.json', files.identitySchema),
  ];
  const hydraUploads = [fileUpload('/etc/config/hydra/hydra.yml', hydraYml)];
  const withEnv = (secretEnv: pulumi.Output<Record<string, string>>, extra: Record<string, string>) =>
    secretEnv.apply((s) => Object.entries({ ...s, ...extra }).map(([k, v]) => `${k}=${v}`));

  const kratosMigrate = job('kratos-migrate', n('kratos-migrate'), {
    image: images.remote.kratos.imageId,
    limits: identityLimits,
    networks: [{ network: app }],
    command: ['migrate', 'sql', 'up', '-e', '--yes', '-c', '/etc/config/kratos/kratos.yml'],
    uploads: kratosUploads,
    envs: withEnv(kratosSecretsEnv, {}),
    labels: { 'platform.after': succeeded('identity-db-roles', identityDbRoles) },
    dependsOn: [identityDbRoles],
  });
  const hydraMigrate = job('hydra-migrate', n('hydra-migrate'), {
    image: images.remote.hydra.imageId,
    limits: identityLimits,
    networks: [{ network: app }],
    command: ['migrate', 'sql', 'up', '-e', '--yes', '-c', '/etc/config/hydra/hydra.yml'],
    uploads: hydraUploads,
    envs: withEnv(hydraSecretsEnv, {}),
    labels: { 'platform.after': succeeded('identity-db-roles', identityDbRoles) },
    dependsOn: [identityDbRoles],
  });

  const kratos = service('kratos', n('kratos'), {
    image: images.remote.kratos.imageId,
    limits: identityLimits,
    networks: [
      { network: app, aliases: [UPSTREAMS.kratosPublic.host] },
      { network: admin, aliases: [ADMIN_UPSTREAMS.kratosAdmin.host], ipv4Address: kratosAdminAddress },
      { network: egress },
    ],
    command: ['serve', '-c', '/etc/config/kratos/kratos.yml', '--watch-courier'],
    uploads: kratosUploads,
    // The admin API listens on the admin-network address only: joining `app` does not reach it.
    envs: withEnv(kratosSecretsEnv, { SERVE_ADMIN_HOST: kratosAdminAddress, SERVE_PUBLIC_HOST: '0.0.0.0' }),
    labels: { 'platform.after': succeeded('kratos-migrate', kratosMigrate) },
    healthcheck: { test: wgetCheck(`http://127.0.0.1:${UPSTREAMS.kratosPublic.port}/health/ready`), interval: '15s' },
    waitHealthy: true,
    dependsOn: [kratosMigrate],
  });
  const hydra = service('hydra', n('hydra'), {
    image: images.remote.hydra.imageId,
    limits: identityLimits,
    networks: [
      { network: app, aliases: [UPSTREAMS.hydraPublic.host] },
      { network: admin, aliases: [ADMIN_UPSTREAMS.hydraAdmin.host], ipv4Address: hydraAdminAddress },
    ],
    command: ['serve', 'all', '-c', '/etc/config/hydra/hydra.yml'],
    uploads: hydraUploads,
    envs: withEnv(hydraSecretsEnv, { SERVE_ADMIN_HOST: hydraAdminAddress, SERVE_PUBLIC_HOST: '0.0.0.0' }),
    labels: { 'platform.after': succeeded('hydra-migrate', hydraMigrate) },
    healthcheck: { test: wgetCheck(`http://127.0.0.1:${UPSTREAMS.hydraPublic.port}/health/ready`), interval: '15s' },
    waitHealthy: true,
    dependsOn: [hydraMigrate],
  });

  // OAuth2 clients: created or updated in Hydra once Hydra (after its migrations) is healthy. A new
  // confidential client's secret is printed once by the job; the job's log is a secret stack output
  // (`pulumi stack output oauth2ClientsSync --show-secrets`). Re-runs whenever clients.yaml changes.
  const clientsSync = job('clients-sync', n('clients-sync'), {
    image: images.built.login.imageName,
    limits: LIMITS.job,
    networks: [{ network: admin }],
    command: [...ENTRY_POINTS.clientsSync, '--file', CLIENTS_FILE_IN_CONTAINER],
    // identity/src/clients/sync-cli.ts reads exactly this variable.
    envs: env({ NODE_ENV: 'production', HYDRA_ADMIN_URL: hydraAdminUrl }),
    uploads: [fileUpload(CLIENTS_FILE_IN_CONTAINER, clientsYml)],
    user: 'node',
    labels: { 'platform.after': succeeded('hydra-migrate', hydraMigrate) },
    dependsOn: [hydra],
  });

  const login = service('login', n('login'), {
    image: images.built.login.imageName,
    limits: identityLimits,
    networks: [
      { network: app, aliases: [UPSTREAMS.login.host] },
      { network: admin },
    ],
    // identity/src/app/config.ts (docs/identity.md) owns these names. Its limiters count in its own
    // database on identity-db (role `login`, made by identity-db-roles): one container here, and the
    // counters outlive a restart of it.
    envs: env(loginEnvironment(cfg, secrets, urls, { databaseUrl: pulumi.interpolate`postgres://login:${secrets.loginDbPassword}@identity-db:5432/login`, replicas: 1 })),
    user: 'node',
    readOnly: true,
    tmpfs: { '/tmp': 'rw,noexec,nosuid,size=64m' },
    healthcheck: { test: nodeHttpCheck(UPSTREAMS.login.port, '/health/alive'), interval: '15s' },
    waitHealthy: true,
    dependsOn: [kratos, hydra],
  });
  const accountsUi = images.selfServiceUi
    ? service('accounts-ui', n('accounts-ui'), {
        image: images.selfServiceUi.imageId,
        limits: identityLimits,
        networks: [{ network: app, aliases: [UPSTREAMS.accountsUi.host] }],
        envs: env(accountsUiEnvironment(cfg, secrets, urls)),
        healthcheck: { test: nodeHttpCheck(UPSTREAMS.accountsUi.port, '/health/alive'), interval: '15s' },
        dependsOn: [kratos],
      })
    : undefined;

  return {
    containers: { identityDb, kratos, hydra, login, accountsUi },
    jobs: { identityDbRoles, kratosMigrate, hydraMigrate, clientsSync },
    /** What the API and the proxy need to reach identity. */
    urls,
    /** The rendered files exactly as the containers receive them (the config checks read these). */
    rendered: { kratosYml, hydraYml, clientsYml },
  };
}

export type StackIdentity = ReturnType<typeof declareIdentity>;
