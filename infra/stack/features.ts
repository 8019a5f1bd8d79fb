import * as pulumi from '@pulumi/pulumi';
import { job, service, succeeded } from '../containers.js';
import { ENTRY_POINTS } from '../images.js';
import { SESSION_SQL_JAVA_OPTIONS } from '../geoserver/provision.js';
import { GEOSERVER_IDENTITY, platformOrigins, UPSTREAMS } from '../routes.js';
import { env, fileUpload, https, LIMITS, nodeHttpCheck, pgReadyCheck, readRepoFile, type StackContext } from './common.js';
import type { StackIdentity } from './identity.js';
import type { StackImages } from './images.js';
import type { StackNetwork } from './network.js';

/**
 * Features: the PostGIS database and its roles, the API's migrations and the API, GeoServer and its
 * provisioning.
 *
 * Order
 *   features-db → features-db-roles (job) → api-migrate (job) → api (also waits for Hydra)
 *                                        └→ geoserver (healthy) ─→ geoserver-provision (job, after api-migrate)
 *
 * WFS-T identity: the proxy asks the API (GET /api/auth/forward) before a GeoServer write and passes
 * X-Geodata-User/X-Geodata-Role on; geoserver-provision writes GeoServer's header authentication into
 * its data directory (mounted) and the store's session SQL, so the history names the platform user.
 *
 * Access tokens: Hydra issues opaque tokens (identity/config/hydra.yml, docs/identity.md "Access
 * tokens"), so the API checks them by introspection on Hydra's admin API (HYDRA_ADMIN_URL) and session
 * cookies by whoami on Kratos (KRATOS_PUBLIC_URL); it is on the admin network to reach Hydra and Kratos admin.
 */
/** The uid and gid GeoServer runs as (RUN_UNPRIVILEGED) and the provisioning job writes its data directory as. */
const GEOSERVER_UID = '999';

export function declareFeatures(ctx: StackContext, { networks, volumes }: StackNetwork, images: StackImages, identity: StackIdentity) {
  const { cfg, secrets, n } = ctx;
  const { app, admin, geo } = networks;
  const domains = cfg.domains;
  const origins = platformOrigins(domains, cfg.targets, cfg.parentDomain);

  const featuresDb = service('features-db', n('features-db'), {
    image: images.remote.postgis.imageId,
    limits: LIMITS.postgres,
    // On `geo` too: GeoServer's store reads and writes the feature table.
    networks: [
      { network: app, aliases: ['features-db'] },
      { network: geo, aliases: ['features-db'] },
    ],
    envs: env({ POSTGRES_USER: 'postgres', POSTGRES_DB: 'features', POSTGRES_PASSWORD: secrets.featuresDbSuperuserPassword }),
    volumes: [{ volumeName: volumes.featuresDb.name, containerPath: '/var/lib/postgresql/data' }],
    healthcheck: { test: pgReadyCheck('postgres'), interval: '10s', startPeriod: '30s' },
    waitHealthy: true,
  });
  const featuresDbRoles = job('features-db-roles', n('features-db-roles'), {
    image: images.remote.postgres.imageId,
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

  // services/api/src/db/migrate-cli.ts needs exactly these (it validates only what it uses).
  const apiMigrate = job('api-migrate', n('api-migrate'), {
    image: images.built.api.imageName,
    limits: LIMITS.job,
    networks: [{ network: app }],
    command: [...ENTRY_POINTS.apiMigrate],
    envs: env({ NODE_ENV: 'production', DATABASE_URL: databaseUrl }),
    user: 'node',
    labels: { 'platform.after': succeeded('features-db-roles', featuresDbRoles) },
    dependsOn: [featuresDbRoles],
  });
  // services/api/src/config.ts owns these names.
  const api = service('api', n('api'), {
    image: images.built.api.imageName,
    limits: LIMITS.node,
    networks: [
      { network: app, aliases: [UPSTREAMS.api.host] },
      { network: admin },
    ],
    envs: env({
      NODE_ENV: 'production',
      PORT: String(UPSTREAMS.api.port),
      DATABASE_URL: databaseUrl,
      AUTH_AUDIENCE: cfg.apiAudience,
      HYDRA_ADMIN_URL: identity.urls.hydraAdmin,
      KRATOS_PUBLIC_URL: identity.urls.kratosPublicInternal,
      KRATOS_ADMIN_URL: identity.urls.kratosAdmin,
      // Browsers may call the API with the session cookie only from the platform's own sites.
      CORS_ORIGINS: origins.join(','),
      // Every request comes from the proxy, on the internal app network (Docker's private pools): its
      // X-Forwarded-For names the client, the change limit's key for callers without credentials
      // (Caddy sets the header itself and drops what a client sent).
      API_TRUST_PROXY: 'uniquelocal',
      DATA_DIR: '/var/lib/api',
      // The QC worker runs in a container of its own (infra/stack/worker.ts), the only one with a way out.
      WORKER_ENABLED: 'false',
      // A sign-out (its tokens revoked, its Kratos session ended) holds at the API within 10 s.
      INTROSPECTION_CACHE_SECONDS: '10',
      SESSION_CACHE_SECONDS: '10',
      LOG_LEVEL: cfg.logLevel,
    }),
    user: 'node',
    readOnly: true,
    tmpfs: { '/tmp': 'rw,noexec,nosuid,size=64m' },
    // Export journals and other state the API keeps between restarts.
    volumes: [{ volumeName: volumes.apiData.name, containerPath: '/var/lib/api' }],
    labels: { 'platform.after': succeeded('api-migrate', apiMigrate) },
    healthcheck: { test: nodeHttpCheck(UPSTREAMS.api.port, '/healthz'), interval: '15s' },
    waitHealthy: true,
    dependsOn: [apiMigrate, identity.containers.hydra, identity.containers.kratos],
  });

  const geoserver = service('geoserver', n('geoserver'), {
    image: images.remote.geoserver.imageId,
    limits: LIMITS.geoserver,
    // Only on `geo`: no platform service but the proxy (and the provisioning job) talks to GeoServer.
    networks: [{ network: geo, aliases: [UPSTREAMS.geoserver.host] }],
    envs: env({
      GEOSERVER_ADMIN_USER: cfg.geoserverAdminUser,
      GEOSERVER_ADMIN_PASSWORD: secrets.geoserverAdminPassword,
      SKIP_DEMO_DATA: 'true',
      RUN_UNPRIVILEGED: 'true',
      // Named, not left to the image's default: the provisioning job writes into the data directory as this user.
      RUN_WITH_USER_UID: GEOSERVER_UID,
      RUN_WITH_USER_GID: GEOSERVER_UID,
      CHANGE_OWNERSHIP_ON_FOLDERS: '/opt/geoserver_data',
      PROXY_BASE_URL: `${https(domains.geo)}/geoserver`,
      // CORS is a web.xml filter in the official image; its startup script writes it from these.
      CORS_ENABLED: 'true',
      CORS_ALLOWED_ORIGINS: origins.join(','),
      CORS_ALLOWED_METHODS: 'GET,POST,PUT,DELETE,HEAD,OPTIONS',
      CORS_ALLOWED_HEADERS: 'Authorization,Content-Type,Accept,Origin,X-Requested-With',
      CORS_ALLOW_CREDENTIALS: 'true',
      EXTRA_JAVA_OPTS: '-Xms512m -Xmx1536m',
      // Lets the PostGIS store run the session SQL that names WFS-T users in the history (provision.ts).
      JAVA_TOOL_OPTIONS: SESSION_SQL_JAVA_OPTIONS.join(' '),
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
    image: images.built.ops.imageName,
    limits: LIMITS.job,
    networks: [{ network: geo }],
    command: [...ENTRY_POINTS.geoserverProvision],
    // GeoServer's own user: the files it writes into the data directory stay GeoServer's.
    user: `${GEOSERVER_UID}:${GEOSERVER_UID}`,
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
      // WFS-T writers are platform users with these roles (the API's forward-auth answer, X-Geodata-Role).
      GEOSERVER_WRITE_ROLES: 'ROLE_CONTRIBUTOR,ROLE_REVIEWER,ROLE_ADMIN',
      GEOSERVER_DATA_DIR: '/opt/geoserver_data',
      GEOSERVER_USER_HEADER: GEOSERVER_IDENTITY.userHeader,
      GEOSERVER_ROLE_HEADER: GEOSERVER_IDENTITY.roleHeader,
    }),
    // GeoServer's data directory: the header authentication filter and chain are files there (security.ts).
    volumes: [{ volumeName: volumes.geoserverData.name, containerPath: '/opt/geoserver_data' }],
    // The feature table must exist (API migrations) before GeoServer can publish it.
    labels: { 'platform.after': succeeded('api-migrate', apiMigrate) },
    dependsOn: [geoserver, apiMigrate],
  });

  return {
    containers: { featuresDb, api, geoserver },
    jobs: { featuresDbRoles, apiMigrate, geoserverProvision },
    origins,
    databaseUrl,
  };
}

export type StackFeatures = ReturnType<typeof declareFeatures>;
