import * as pulumi from '@pulumi/pulumi';
import { job, service, succeeded } from '../containers.js';
import { ENTRY_POINTS } from '../images.js';
import { platformOrigins, UPSTREAMS } from '../routes.js';
import { env, fileUpload, LIMITS, nodeHttpCheck, pgReadyCheck, readRepoFile, type StackContext } from './common.js';
import type { StackIdentity } from './identity.js';
import type { StackImages } from './images.js';
import type { StackNetwork } from './network.js';
import { apiEnvironment, GEOSERVER_UID, geoserverEnvironment, geoserverProvisionEnvironment } from './settings.js';

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
    envs: env(apiEnvironment(cfg, { databaseUrl, identity: identity.urls, origins })),
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
    envs: env(geoserverEnvironment(cfg, secrets, origins, 'image-drops-root')),
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
    envs: env(
      geoserverProvisionEnvironment(cfg, secrets, {
        geoserverUrl: `http://${UPSTREAMS.geoserver.host}:${UPSTREAMS.geoserver.port}/geoserver`,
        dbHost: 'features-db',
        dbPort: '5432',
      }),
    ),
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
