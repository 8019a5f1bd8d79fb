import { serviceNameOf } from '../services/shared/targets.js';
import { allSucceeded } from './containers.js';
import type { StackConfig } from './config.js';
import type { StackSecrets } from './secrets.js';
import { declareBackups } from './stack/backups.js';
import { stackContext } from './stack/common.js';
import { declareEdge } from './stack/edge.js';
import { declareFeatures } from './stack/features.js';
import { declareIdentity } from './stack/identity.js';
import { declareImages } from './stack/images.js';
import { declareNetwork } from './stack/network.js';
import { declareSites } from './stack/sites.js';
import { declareWorker } from './stack/worker.js';

/**
 * Every container of the platform on one Docker host (the provider's DOCKER_HOST), declared once, part
 * by part, each part in its own module under infra/stack/ declaring its containers in dependency order
 * and returning what the later parts need:
 *
 *   network   networks and volumes                       (infra/stack/network.ts)
 *   images    pinned third-party images, project builds  (infra/stack/images.ts)
 *   identity  identity-db, Kratos, Hydra, login app, self-service UI, clients-sync job
 *   features  features-db, api-migrate job, API, GeoServer, geoserver-provision job
 *   worker    the QC worker, the only container with a way out for approvals (mail, OSM, Wikibase, agency)
 *   sites     per deploy target a site and a builder (own containers, networks, volumes), the builds'
 *             egress proxy, the deployment webhook
 *   backups   pg_dump of every database
 *   edge      the proxy, last, the only published ports
 */
export function declareStack(cfg: StackConfig, secrets: StackSecrets) {
  const ctx = stackContext(cfg, secrets);
  const network = declareNetwork(ctx);
  const images = declareImages(ctx);
  const identity = declareIdentity(ctx, network, images);
  const features = declareFeatures(ctx, network, images, identity);
  const worker = declareWorker(ctx, network, images, features);
  const sites = declareSites(ctx, network, images);
  const backups = declareBackups(ctx, network, images, {
    databases: [features.containers.featuresDb, identity.containers.identityDb],
    migrations: {
      'api-migrate': features.jobs.apiMigrate,
      'kratos-migrate': identity.jobs.kratosMigrate,
      'hydra-migrate': identity.jobs.hydraMigrate,
    },
  });
  const { accountsUi, ...identityServices } = identity.containers;
  // Every one-shot job (migrations, the clients sync, GeoServer's provisioning) must have exited 0
  // before the proxy opens the platform: a failed one stops `pulumi up` there, naming the job.
  const jobs = { ...identity.jobs, ...features.jobs };
  const jobsSucceeded = allSucceeded(Object.entries(jobs).map(([key, container]) => [key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`), container] as const));
  const edge = declareEdge(ctx, network, images, jobsSucceeded, [
    features.containers.api,
    features.containers.geoserver,
    identityServices.login,
    identityServices.kratos,
    identityServices.hydra,
    sites.webhook,
    ...sites.sites,
    ...(accountsUi ? [accountsUi] : []),
  ]);

  return {
    networks: network.networks,
    volumes: network.volumes,
    containers: { ...identity.containers, ...features.containers, ...worker.containers, ...sites.containers, ...backups.containers, ...edge.containers },
    jobs,
    jobsSucceeded,
    routes: edge.routes,
    caddyfile: edge.caddyfile,
    /** The identity files exactly as the containers receive them. */
    rendered: identity.rendered,
    siteServices: cfg.targets.map((t) => ({ service: serviceNameOf(t), domain: t.domain, port: t.port })),
  };
}
