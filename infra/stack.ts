import * as docker from '@pulumi/docker';
import * as pulumi from '@pulumi/pulumi';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { containerEnvironment, renderTemplate, type ServiceName } from '../identity/src/config/render.js';
import { serviceNameOf } from '../services/shared/targets.js';
import { renderCaddyfile } from './caddy.js';
import { REPO_ROOT, type StackConfig } from './config.js';
import { job, service, succeeded, type Limits } from './containers.js';
import { IMAGES } from './images.js';
import { ADMIN_UPSTREAMS, platformOrigins, proxyRoutes, UPSTREAMS } from './routes.js';
import type { StackSecrets } from './secrets.js';

/**
 * Every container of the platform on one Docker host (the provider's DOCKER_HOST), declared once.
 *
 * Networks
 *   edge    the proxy only; publishes 80 and 443; has a route out (ACME).
 *   app     internal: true. Every service talks to the others here; nothing on it reaches the internet.
 *   admin   internal: true. Kratos 4434 and Hydra 4445 listen on their fixed addresses in this network
 *           and nowhere else; only the API, the login app and Hydra (Kratos as identity provider) join it.
 *   egress  a plain bridge for the few containers that must reach the outside: Kratos (SMTP) and the
 *           sites/webhook pair (git clone, npm ci).
 *
 * Order (what waits for what)
 *   features-db → features-db-roles (job) → api-migrate (job) → api
 *                                                       └→ geoserver (healthy) → geoserver-provision (job)
 *   identity-db → identity-db-roles (job) → kratos-migrate (job) → kratos → login, accounts-ui
 *                                         → hydra-migrate (job)  → hydra  → login, api
 *   webhook + sites share the deploy volume and the sites control socket; the proxy starts last.
 */

const LIMITS = {
  // The seed's limits for the identity containers: exactly 2 GB, 2 cores, CPU shares 1024.
  identity: { memoryMb: 2048, cpus: 2, cpuShares: 1024 },
  postgres: { memoryMb: 1024, cpus: 1 },
  geoserver: { memoryMb: 2048, cpus: 1.5 },
  node: { memoryMb: 512, cpus: 1 },
  sites: { memoryMb: 1536, cpus: 1.5 },
  webhook: { memoryMb: 1536, cpus: 1.5 },
  proxy: { memoryMb: 256, cpus: 0.5 },
  job: { memoryMb: 256, cpus: 0.5 },
  backup: { memoryMb: 512, cpus: 0.5, cpuShares: 256 },
} satisfies Record<string, Limits>;

/** Node-based images: the health check is Node's own fetch, so the images need neither curl nor wget. */
function nodeHttpCheck(port: number, path: string, expectedStatus?: number): string[] {
  const healthy = expectedStatus === undefined ? 'r.ok' : `r.status===${expectedStatus}`;
  const script = `fetch('http://127.0.0.1:${port}${path}').then(r=>process.exit(${healthy}?0:1),()=>process.exit(1))`;
  return ['CMD', 'node', '-e', script];
}

/** Ory images ship busybox wget; the health endpoints answer 200 when the service is ready. */
function wgetCheck(url: string): string[] {
  return ['CMD', 'wget', '-q', '-T', '3', '-O', '/dev/null', url];
}

function pgReadyCheck(user: string): string[] {
  return ['CMD', 'pg_isready', '-q', '-h', '127.0.0.1', '-U', user];
}

function env(values: Record<string, pulumi.Input<string>>): pulumi.Output<string[]> {
  return pulumi.all(values).apply((resolved) => Object.entries(resolved).map(([k, v]) => `${k}=${v}`));
}

function fileUpload(path: string, content: pulumi.Input<string>, executable = false): docker.types.input.ContainerUpload {
  return { file: path, content, executable };
}

function readRepoFile(relative: string): string {
  return readFileSync(join(REPO_ROOT, relative), 'utf8');
}

/** A fixed address in the admin /24 (the network's gateway is .1). */
function adminAddress(subnet: string, host: number): string {
  return subnet.replace(/0\/24$/, String(host));
}

export function declareStack(cfg: StackConfig, secrets: StackSecrets) {
  const prefix = cfg.namePrefix;
  const n = (name: string) => `${prefix}-${name}`;
  const label = (name: string) => [{ label: 'platform.network', value: name }];

  // ---------------------------------------------------------------- networks and volumes
  const edge = new docker.Network('edge', {
    name: n('edge'),
    internal: false,
    ipamConfigs: [{ subnet: cfg.edgeSubnet }],
    labels: label('edge'),
  });
  const app = new docker.Network('app', { name: n('app'), internal: true, labels: label('app') });
  const admin = new docker.Network('admin', {
    name: n('admin'),
    internal: true,
    ipamConfigs: [{ subnet: cfg.adminSubnet }],
    labels: label('admin'),
  });
  const egress = new docker.Network('egress', { name: n('egress'), internal: false, labels: label('egress') });

  // Volumes holding data survive `pulumi destroy` (retainOnDelete): tearing the stack down must not
  // delete the databases, the backups or the certificates. docs/infra.md says how to remove them.
  const volume = (name: string, holdsData: boolean) =>
    new docker.Volume(name, { name: n(name), labels: [{ label: 'platform.volume', value: name }] }, { retainOnDelete: holdsData });
  const volumes = {
    featuresDb: volume('features-db-data', true),
    identityDb: volume('identity-db-data', true),
    geoserverData: volume('geoserver-data', true),
    caddyData: volume('caddy-data', true),
    caddyConfig: volume('caddy-config', false),
    deployRoot: volume('deploy-root', true),
    sitesControl: volume('sites-control', false),
    webhookState: volume('webhook-state', true),
    apiData: volume('api-data', true),
    backups: volume('backups', true),
  };

  // ---------------------------------------------------------------- images
  const remote = (name: string, reference: string) => new docker.RemoteImage(name, { name: reference, keepLocally: true });
  const images = {
    postgis: remote('image-postgis', IMAGES.postgis),
    postgres: remote('image-postgres', IMAGES.postgres),
    geoserver: remote('image-geoserver', IMAGES.geoserver),
    kratos: remote('image-kratos', IMAGES.kratos),
    hydra: remote('image-hydra', IMAGES.hydra),
    caddy: remote('image-caddy', IMAGES.caddy),
  };
  const selfServiceUiImage = cfg.selfServiceUi ? remote('image-kratos-selfservice-ui', IMAGES.kratosSelfServiceUi) : undefined;
  // The project's own images, built from the repository root (the Dockerfiles copy what they need).
  const build = (name: string, dockerfile: string) =>
    new docker.Image(name, {
      imageName: `${prefix}/${name}:${cfg.imageTag}`,
      build: { context: REPO_ROOT, dockerfile: join(REPO_ROOT, 'infra/docker', dockerfile), platform: 'linux/amd64' },
      // The images run on the Docker host that builds them; there is no registry to push to.
      skipPush: true,
    });
  const built = {
    api: build('api', 'api.Dockerfile'),
    webhook: build('webhook', 'webhook.Dockerfile'),
    login: build('login', 'identity.Dockerfile'),
    ops: build('ops', 'ops.Dockerfile'),
  };

  const domains = cfg.domains;
  const https = (host: string) => `https://${host}`;
  const origins = platformOrigins(domains, cfg.targets);

  // ---------------------------------------------------------------- features database (PostGIS)
  const featuresDb = service('features-db', n('features-db'), {
    image: images.postgis.imageId,
    limits: LIMITS.postgres,
    networks: [{ network: app, aliases: ['features-db'] }],
    envs: env({ POSTGRES_USER: 'postgres', POSTGRES_DB: 'features', POSTGRES_PASSWORD: secrets.featuresDbSuperuserPassword }),
    volumes: [{ volumeName: volumes.featuresDb.name, containerPath: '/var/lib/postgresql/data' }],
    healthcheck: { test: pgReadyCheck('postgres'), interval: '10s', startPeriod: '30s' },
    waitHealthy: true,
  });
  const featuresDbRoles = job('features-db-roles', n('features-db-roles'), {
    image: images.postgres.imageId,
    limits: LIMITS.job,
    networks: [{ network: app }],
    entrypoints: ['/bin/sh', '/jobs/features-db-roles.sh'],
    uploads: [fileUpload('/jobs/features-db-roles.sh', readRepoFile('infra/jobs/features-db-roles.sh'), true)],
    envs: env({
      PGHOST: 'features-db',
      PGPORT: '5432',
      PGUSER: 'postgres',
      PGDATABASE: 'features',
      PGPASSWORD: secrets.featuresDbSuperuserPassword,
      FEATURES_DB_PASSWORD: secrets.featuresDbPassword,
      GEOSERVER_DB_PASSWORD: secrets.geoserverDbPassword,
    }),
    dependsOn: [featuresDb],
  });
  const databaseUrl = pulumi.interpolate`postgres://features:${secrets.featuresDbPassword}@features-db:5432/features`;

  // ---------------------------------------------------------------- identity database, migrations, Kratos, Hydra
  const identityLimits: Limits = {
    ...LIMITS.identity,
    ...(cfg.identityDiskLimit ? { diskSize: cfg.identityDiskSize } : {}),
  };
  const identityDb = service('identity-db', n('identity-db'), {
    image: images.postgres.imageId,
    limits: identityLimits,
    networks: [{ network: app, aliases: ['identity-db'] }],
    envs: env({ POSTGRES_USER: 'postgres', POSTGRES_DB: 'postgres', POSTGRES_PASSWORD: secrets.identityDbSuperuserPassword }),
    volumes: [{ volumeName: volumes.identityDb.name, containerPath: '/var/lib/postgresql/data' }],
    healthcheck: { test: pgReadyCheck('postgres'), interval: '10s', startPeriod: '30s' },
    waitHealthy: true,
  });
  const identityDbRoles = job('identity-db-roles', n('identity-db-roles'), {
    image: images.postgres.imageId,
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
    }),
    dependsOn: [identityDb],
  });

  const kratosAdminAddress = adminAddress(cfg.adminSubnet, 10);
  const hydraAdminAddress = adminAddress(cfg.adminSubnet, 11);
  const kratosAdminUrl = `http://${ADMIN_UPSTREAMS.kratosAdmin.host}:${ADMIN_UPSTREAMS.kratosAdmin.port}`;
  const hydraAdminUrl = `http://${ADMIN_UPSTREAMS.hydraAdmin.host}:${ADMIN_UPSTREAMS.hydraAdmin.port}`;
  const kratosPublicInternal = `http://${UPSTREAMS.kratosPublic.host}:${UPSTREAMS.kratosPublic.port}`;
  const hydraPublicInternal = `http://${UPSTREAMS.hydraPublic.host}:${UPSTREAMS.hydraPublic.port}`;
  // Non-secret values of the identity templates (identity/config/*.yml); secrets go in as Ory's env vars.
  const templateEnv = {
    IDENTITY_PARENT_DOMAIN: cfg.parentDomain,
    IDENTITY_AUTH_URL: https(domains.auth),
    IDENTITY_ACCOUNTS_URL: cfg.selfServiceUi ? https(domains.accounts) : https(domains.auth),
    IDENTITY_APP_URL: cfg.appUrl,
    KRATOS_PUBLIC_URL: `${https(domains.kratos)}/`,
    KRATOS_ADMIN_URL: `${kratosAdminUrl}/`,
    HYDRA_PUBLIC_URL: `${https(domains.hydra)}/`,
    HYDRA_ADMIN_URL: `${hydraAdminUrl}/`,
    IDENTITY_SMTP_FROM: cfg.smtpFrom,
    KRATOS_IDENTITY_SCHEMA_URL: 'file:///etc/config/kratos/identity.schema.json',
  };
  const renderedConfig = (svc: ServiceName) => toYaml(renderTemplate(svc, templateEnv, cfg.identityConfigDir));
  const kratosDsn = pulumi.interpolate`postgres://kratos:${secrets.kratosDbPassword}@identity-db:5432/kratos?sslmode=disable&max_conns=20&max_idle_conns=4`;
  const hydraDsn = pulumi.interpolate`postgres://hydra:${secrets.hydraDbPassword}@identity-db:5432/hydra?sslmode=disable&max_conns=20&max_idle_conns=4`;
  /** Ory's own variable names for the secrets (identity/src/config/render.ts owns the mapping). */
  const oryEnv = (svc: ServiceName, values: Record<string, pulumi.Input<string>>) =>
    pulumi.all(values).apply((resolved) => containerEnvironment(svc, resolved));
  const kratosSecretsEnv = oryEnv('kratos', {
    KRATOS_DSN: kratosDsn,
    KRATOS_SECRETS_DEFAULT: secrets.kratosDefaultSecret,
    KRATOS_SECRETS_COOKIE: secrets.kratosCookieSecret,
    KRATOS_SECRETS_CIPHER: secrets.kratosCipherSecret,
    KRATOS_SMTP_URI: secrets.smtpConnectionUri,
  });
  const hydraSecretsEnv = oryEnv('hydra', {
    HYDRA_DSN: hydraDsn,
    HYDRA_SECRETS_SYSTEM: secrets.hydraSystemSecret,
    HYDRA_SECRETS_COOKIE: secrets.hydraCookieSecret,
  });
  const kratosUploads = [
    fileUpload('/etc/config/kratos/kratos.yml', renderedConfig('kratos')),
    fileUpload('/etc/config/kratos/identity.schema.json', readFileSync(join(cfg.identityConfigDir, 'identity.schema.json'), 'utf8')),
  ];
  const hydraUploads = [fileUpload('/etc/config/hydra/hydra.yml', renderedConfig('hydra'))];
  const withEnv = (secretEnv: pulumi.Output<Record<string, string>>, extra: Record<string, string>) =>
    secretEnv.apply((s) => Object.entries({ ...s, ...extra }).map(([k, v]) => `${k}=${v}`));

  const kratosMigrate = job('kratos-migrate', n('kratos-migrate'), {
    image: images.kratos.imageId,
    limits: identityLimits,
    networks: [{ network: app }],
    command: ['migrate', 'sql', 'up', '-e', '--yes', '-c', '/etc/config/kratos/kratos.yml'],
    uploads: kratosUploads,
    envs: withEnv(kratosSecretsEnv, {}),
    labels: { 'platform.after': succeeded('identity-db-roles', identityDbRoles) },
    dependsOn: [identityDbRoles],
  });
  const hydraMigrate = job('hydra-migrate', n('hydra-migrate'), {
    image: images.hydra.imageId,
    limits: identityLimits,
    networks: [{ network: app }],
    command: ['migrate', 'sql', 'up', '-e', '--yes', '-c', '/etc/config/hydra/hydra.yml'],
    uploads: hydraUploads,
    envs: withEnv(hydraSecretsEnv, {}),
    labels: { 'platform.after': succeeded('identity-db-roles', identityDbRoles) },
    dependsOn: [identityDbRoles],
  });

  const kratos = service('kratos', n('kratos'), {
    image: images.kratos.imageId,
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
    image: images.hydra.imageId,
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

  // ---------------------------------------------------------------- login/consent app, self-service UI
  const login = service('login', n('login'), {
    image: built.login.imageName,
    limits: identityLimits,
    networks: [
      { network: app, aliases: [UPSTREAMS.login.host] },
      { network: admin },
    ],
    // identity/src/app/config.ts (docs/identity.md) owns these names.
    envs: env({
      NODE_ENV: 'production',
      IDENTITY_PORT: String(UPSTREAMS.login.port),
      IDENTITY_AUTH_URL: https(domains.auth),
      IDENTITY_APP_URL: cfg.appUrl,
      KRATOS_PUBLIC_URL: https(domains.kratos),
      KRATOS_PUBLIC_INTERNAL_URL: kratosPublicInternal,
      KRATOS_ADMIN_URL: kratosAdminUrl,
      HYDRA_ADMIN_URL: hydraAdminUrl,
      IDENTITY_COOKIE_SECRET: secrets.loginCookieSecret,
      ...(cfg.selfServiceUi ? { IDENTITY_ACCOUNTS_URL: https(domains.accounts) } : {}),
      // Only the proxy reaches the app (internal network): trust its X-Forwarded-For for rate limits.
      IDENTITY_TRUST_PROXY: 'uniquelocal',
      LOG_LEVEL: cfg.logLevel,
    }),
    user: 'node',
    readOnly: true,
    tmpfs: { '/tmp': 'rw,noexec,nosuid,size=64m' },
    healthcheck: { test: nodeHttpCheck(UPSTREAMS.login.port, '/health/alive'), interval: '15s' },
    waitHealthy: true,
    dependsOn: [kratos, hydra],
  });
  const accountsUi = selfServiceUiImage
    ? service('accounts-ui', n('accounts-ui'), {
        image: selfServiceUiImage.imageId,
        limits: identityLimits,
        networks: [{ network: app, aliases: [UPSTREAMS.accountsUi.host] }],
        envs: env({
          PORT: String(UPSTREAMS.accountsUi.port),
          KRATOS_PUBLIC_URL: kratosPublicInternal,
          KRATOS_BROWSER_URL: https(domains.kratos),
          COOKIE_SECRET: secrets.accountsUiSecret,
          CSRF_COOKIE_NAME: '__Host-accounts-csrf',
          CSRF_COOKIE_SECRET: secrets.accountsUiSecret,
        }),
        healthcheck: { test: nodeHttpCheck(UPSTREAMS.accountsUi.port, '/health/alive'), interval: '15s' },
        dependsOn: [kratos],
      })
    : undefined;

  // ---------------------------------------------------------------- API
  // services/api/src/config.ts owns these names.
  const apiEnv = {
    NODE_ENV: 'production',
    PORT: String(UPSTREAMS.api.port),
    DATABASE_URL: databaseUrl,
    AUTH_ISSUER: `${https(domains.hydra)}/`,
    AUTH_JWKS_URL: `${hydraPublicInternal}/.well-known/jwks.json`,
    AUTH_AUDIENCE: cfg.apiAudience,
    DATA_DIR: '/var/lib/api',
    LOG_LEVEL: cfg.logLevel,
  };
  const apiMigrate = job('api-migrate', n('api-migrate'), {
    image: built.api.imageName,
    limits: LIMITS.job,
    networks: [{ network: app }],
    command: ['node', '--import', 'tsx', 'services/api/src/db/migrate-cli.ts'],
    envs: env({ NODE_ENV: 'production', DATABASE_URL: databaseUrl }),
    user: 'node',
    labels: { 'platform.after': succeeded('features-db-roles', featuresDbRoles) },
    dependsOn: [featuresDbRoles],
  });
  const api = service('api', n('api'), {
    image: built.api.imageName,
    limits: LIMITS.node,
    networks: [
      { network: app, aliases: [UPSTREAMS.api.host] },
      { network: admin },
    ],
    envs: env(apiEnv),
    user: 'node',
    readOnly: true,
    tmpfs: { '/tmp': 'rw,noexec,nosuid,size=64m' },
    // Export journals and other state the API keeps between restarts.
    volumes: [{ volumeName: volumes.apiData.name, containerPath: '/var/lib/api' }],
    labels: { 'platform.after': succeeded('api-migrate', apiMigrate) },
    healthcheck: { test: nodeHttpCheck(UPSTREAMS.api.port, '/healthz'), interval: '15s' },
    waitHealthy: true,
    dependsOn: [apiMigrate, hydra],
  });

  // ---------------------------------------------------------------- GeoServer and its provisioning
  const geoserver = service('geoserver', n('geoserver'), {
    image: images.geoserver.imageId,
    limits: LIMITS.geoserver,
    networks: [{ network: app, aliases: [UPSTREAMS.geoserver.host] }],
    envs: env({
      GEOSERVER_ADMIN_USER: cfg.geoserverAdminUser,
      GEOSERVER_ADMIN_PASSWORD: secrets.geoserverAdminPassword,
      SKIP_DEMO_DATA: 'true',
      RUN_UNPRIVILEGED: 'true',
      CHANGE_OWNERSHIP_ON_FOLDERS: '/opt/geoserver_data',
      PROXY_BASE_URL: `${https(domains.geo)}/geoserver`,
      // CORS is a web.xml filter in the official image; its startup script writes it from these.
      CORS_ENABLED: 'true',
      CORS_ALLOWED_ORIGINS: origins.join(','),
      CORS_ALLOWED_METHODS: 'GET,POST,PUT,DELETE,HEAD,OPTIONS',
      CORS_ALLOWED_HEADERS: 'Authorization,Content-Type,Accept,Origin,X-Requested-With',
      CORS_ALLOW_CREDENTIALS: 'true',
      EXTRA_JAVA_OPTS: '-Xms512m -Xmx1536m',
    }),
    volumes: [{ volumeName: volumes.geoserverData.name, containerPath: '/opt/geoserver_data' }],
    healthcheck: {
      test: ['CMD', 'curl', '-fsS', '-o', '/dev/null', 'http://127.0.0.1:8080/geoserver/web/wicket/resource/org.geoserver.web.GeoServerBasePage/img/logo.png'],
      interval: '30s',
      timeout: '10s',
      startPeriod: '120s',
      retries: 5,
    },
    waitHealthy: true,
    waitTimeoutSeconds: 600,
    dependsOn: [featuresDbRoles],
  });
  const geoserverProvision = job('geoserver-provision', n('geoserver-provision'), {
    image: built.ops.imageName,
    limits: LIMITS.job,
    networks: [{ network: app }],
    command: ['node', '--import', 'tsx', 'infra/geoserver/cli.ts'],
    user: 'node',
    envs: env({
      GEOSERVER_URL: `http://${UPSTREAMS.geoserver.host}:${UPSTREAMS.geoserver.port}/geoserver`,
      GEOSERVER_ADMIN_USER: cfg.geoserverAdminUser,
      GEOSERVER_ADMIN_PASSWORD: secrets.geoserverAdminPassword,
      GEOSERVER_DB_HOST: 'features-db',
      GEOSERVER_DB_PORT: '5432',
      GEOSERVER_DB_NAME: 'features',
      GEOSERVER_DB_USER: 'geoserver',
      GEOSERVER_DB_PASSWORD: secrets.geoserverDbPassword,
      GEOSERVER_NAMESPACE_URI: `${https(domains.geo)}/features`,
    }),
    // The feature table must exist (API migrations) before GeoServer can publish it.
    labels: { 'platform.after': succeeded('api-migrate', apiMigrate) },
    dependsOn: [geoserver, apiMigrate],
  });

  // ---------------------------------------------------------------- webhook server and branch sites
  const targetsYaml = readFileSync(cfg.targetsFile, 'utf8');
  const webhookSecretEnv = Object.fromEntries(Object.entries(secrets.webhookTargetSecrets));
  const sitesSocket = '/run/sites/control.sock';
  // The sites container owns the network namespace the webhook server joins: the deploy script's
  // health check (http://127.0.0.1:<port>) then reaches the site it just restarted, while process
  // control stays with the sites container (separate PID namespaces; the control socket is the only
  // way in). The namespace has egress for the webhook's git clone and npm ci.
  const sites = service('sites', n('sites'), {
    image: built.webhook.imageName,
    limits: LIMITS.sites,
    networks: [
      { network: app, aliases: [UPSTREAMS.sites.host, UPSTREAMS.webhook.host] },
      { network: egress },
    ],
    command: ['node', '--import', 'tsx', 'infra/sites/main.ts'],
    user: 'node',
    envs: env({
      NODE_ENV: 'production',
      TARGETS_FILE: '/etc/geodata/targets.yaml',
      DEPLOY_ROOT: '/srv/sites',
      SITES_CONTROL_SOCKET: sitesSocket,
      SITES_HOST: '0.0.0.0',
      LOG_LEVEL: cfg.logLevel,
    }),
    uploads: [fileUpload('/etc/geodata/targets.yaml', targetsYaml)],
    volumes: [
      // The sites only read releases; building and switching `live` happens in the webhook container.
      { volumeName: volumes.deployRoot.name, containerPath: '/srv/sites', readOnly: true },
      { volumeName: volumes.sitesControl.name, containerPath: '/run/sites' },
    ],
    healthcheck: { test: ['CMD', '/usr/local/bin/sites-restart', '--ping'], interval: '30s' },
  });
  const webhook = service('webhook', n('webhook'), {
    image: built.webhook.imageName,
    limits: LIMITS.webhook,
    networks: [],
    shareNetworkWith: sites,
    user: 'node',
    envs: pulumi.all([secrets.webhookPreviousSecrets, env({
      NODE_ENV: 'production',
      WEBHOOK_PORT: String(UPSTREAMS.webhook.port),
      WEBHOOK_HOST: '0.0.0.0',
      // Only the proxy reaches it (internal network): its X-Forwarded-For is the client address.
      WEBHOOK_TRUST_PROXY: 'uniquelocal',
      TARGETS_FILE: '/etc/geodata/targets.yaml',
      DEPLOY_ROOT: '/srv/sites',
      WEBHOOK_STATE_DIR: '/var/lib/webhook',
      WEBHOOK_ADMIN_TOKEN: secrets.webhookAdminToken,
      // No Docker socket: a restart is a request on the sites container's control socket (infra/sites).
      RESTART_COMMAND: '/usr/local/bin/sites-restart',
      SITES_CONTROL_SOCKET: sitesSocket,
      LOG_LEVEL: cfg.logLevel,
      ...webhookSecretEnv,
    })]).apply(([previous, current]) => [...current, ...Object.entries(previous).map(([k, v]) => `${k}=${v}`)]),
    uploads: [fileUpload('/etc/geodata/targets.yaml', targetsYaml)],
    volumes: [
      { volumeName: volumes.deployRoot.name, containerPath: '/srv/sites' },
      { volumeName: volumes.sitesControl.name, containerPath: '/run/sites' },
      { volumeName: volumes.webhookState.name, containerPath: '/var/lib/webhook' },
    ],
    healthcheck: { test: nodeHttpCheck(UPSTREAMS.webhook.port, '/health'), interval: '15s' },
    dependsOn: [sites],
  });

  // ---------------------------------------------------------------- backups
  const backup = service('backup', n('backup'), {
    image: images.postgres.imageId,
    limits: LIMITS.backup,
    networks: [{ network: app }],
    entrypoints: ['/bin/sh', '/jobs/backup.sh'],
    uploads: [fileUpload('/jobs/backup.sh', readRepoFile('infra/jobs/backup.sh'), true)],
    envs: env({
      BACKUP_DIR: '/backups',
      BACKUP_INTERVAL_HOURS: String(cfg.backupIntervalHours),
      BACKUP_RETENTION_DAYS: String(cfg.backupRetentionDays),
      BACKUP_DATABASES: 'features=features-db:5432:features:postgres kratos=identity-db:5432:kratos:postgres hydra=identity-db:5432:hydra:postgres',
      PGPASSWORD_FEATURES: secrets.featuresDbSuperuserPassword,
      PGPASSWORD_KRATOS: secrets.identityDbSuperuserPassword,
      PGPASSWORD_HYDRA: secrets.identityDbSuperuserPassword,
    }),
    volumes: [{ volumeName: volumes.backups.name, containerPath: '/backups' }],
    healthcheck: {
      // Healthy while the last complete round is younger than two intervals.
      test: ['CMD-SHELL', `test -f /backups/last-success && test $(( $(date +%s) - $(cat /backups/last-success) )) -lt ${cfg.backupIntervalHours * 2 * 3600}`],
      interval: '5m',
      startPeriod: '10m',
    },
    dependsOn: [featuresDb, identityDb, identityDbRoles],
  });

  // ---------------------------------------------------------------- reverse proxy (the only published ports)
  const routes = proxyRoutes(domains, cfg.targets, { selfServiceUi: cfg.selfServiceUi });
  const caddyfile = renderCaddyfile({ acmeEmail: cfg.acmeEmail, internalCidrs: cfg.internalCidrs, routes });
  const proxy = service('proxy', n('proxy'), {
    image: images.caddy.imageId,
    limits: LIMITS.proxy,
    networks: [
      { network: edge, aliases: ['proxy'] },
      { network: app },
    ],
    ports: [
      { internal: 80, external: 80, protocol: 'tcp' },
      { internal: 443, external: 443, protocol: 'tcp' },
      { internal: 443, external: 443, protocol: 'udp' },
    ],
    uploads: [fileUpload('/etc/caddy/Caddyfile', caddyfile)],
    volumes: [
      { volumeName: volumes.caddyData.name, containerPath: '/data' },
      { volumeName: volumes.caddyConfig.name, containerPath: '/config' },
    ],
    healthcheck: { test: wgetCheck('http://127.0.0.1:2019/config/'), interval: '30s' },
    dependsOn: [api, geoserver, login, kratos, hydra, webhook, sites, ...(accountsUi ? [accountsUi] : [])],
  });

  return {
    networks: { edge, app, admin, egress },
    volumes,
    containers: { featuresDb, identityDb, kratos, hydra, login, accountsUi, api, geoserver, sites, webhook, backup, proxy },
    jobs: { featuresDbRoles, identityDbRoles, kratosMigrate, hydraMigrate, apiMigrate, geoserverProvision },
    routes,
    caddyfile,
    siteServices: cfg.targets.map((t) => ({ service: serviceNameOf(t), domain: t.domain, port: t.port })),
  };
}
