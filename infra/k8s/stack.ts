import * as pulumi from '@pulumi/pulumi';
import { loadBackupOffsite, type StackConfig } from '../config.js';
import type { StackSecrets } from '../secrets.js';
import { k8sContext } from './common.js';
import { loadKubernetesSettings } from './config.js';
import { declareEdge } from './edge.js';
import { declareFeatures } from './features.js';
import { declareIdentity } from './identity.js';
import { kubernetesImages } from './images.js';
import { declareNamespaces } from './network.js';
import type { K8sPlatform } from './platform.js';
import { backupCredentials } from './postgres.js';
import { declareSites } from './sites.js';
import { declareWorker } from './worker.js';

/**
 * The platform on a Kubernetes cluster (the kubeconfig's current context, or the `kubernetes:context`
 * config), declared from the same parts as the Docker target (infra/stack.ts), each in its own module
 * under infra/k8s/, told the same variables (infra/stack/settings.ts), routed by the same table
 * (infra/routes.ts):
 *
 *   network   namespaces, default-deny NetworkPolicies, DNS        (infra/k8s/network.ts)
 *   images    pinned third-party images, the project images in the registry (infra/k8s/images.ts)
 *   identity  Kratos, Hydra (Ory's Helm charts), their databases, login app, self-service UI, clients sync
 *   features  features database (CloudNativePG, PostGIS), api-migrate, API, GeoServer, its provisioning
 *   worker    the QC worker, the only platform pods with a way out
 *   sites     per deploy target a site Deployment (previews apart, on their own pool), build Job
 *             templates, the builds' egress proxy, the webhook (replicas on its database in features-db)
 *   backups   in each database part: WAL and nightly base backups to the object store (backupOffsite)
 *   edge      Caddy with the same routes behind an Ingress with cert-manager's certificates
 *
 * What the cluster must already run (docs/infra.md "Kubernetes: quick start"): a CSI driver with a
 * default (or named) StorageClass, an ingress controller, cert-manager, the CloudNativePG operator with
 * the Barman Cloud plugin, and a NetworkPolicy-enforcing CNI.
 */

export function declareKubernetesStack(cfg: StackConfig, secrets: StackSecrets, config: pulumi.Config = new pulumi.Config()) {
  const settings = loadKubernetesSettings(config);
  const ctx = k8sContext(cfg, secrets, settings);
  const backup = loadBackupOffsite(config);
  if (!backup) {
    throw new Error('invalid stack configuration: target kubernetes keeps its backups in an object store: set backupOffsite (docs/infra.md "Kubernetes: databases and backups")');
  }
  const namespaces = declareNamespaces(ctx);
  const platform: K8sPlatform = {
    namespaces,
    backup,
    backupCredentials: backupCredentials(ctx, config.requireSecret('backupOffsiteSecretAccessKey'), backup),
  };
  const images = kubernetesImages(cfg, settings);
  const identity = declareIdentity(ctx, platform, images);
  const features = declareFeatures(ctx, platform, images, identity);
  const worker = declareWorker(ctx, images, features);
  const sites = declareSites(ctx, platform, images, features.webhookDatabase);
  // The entrance opens once every Job has completed, as the Docker proxy waits for every job's exit code.
  const jobs = { ...identity.jobs, ...features.jobs };
  const edge = declareEdge(ctx, images, sites, [...Object.values(jobs), ...Object.values(identity.releases)]);

  return {
    ctx,
    namespaces,
    images,
    identity,
    features,
    worker,
    sites,
    edge,
    jobs,
    workloads: { ...identity.workloads, ...features.workloads, ...worker.workloads, ...sites.workloads, edge: edge.deployment },
    routes: edge.routes,
    caddyfile: edge.caddyfile,
    policies: [...namespaces.policies, ...identity.policies, ...features.policies, ...worker.policies, ...sites.policies, ...edge.policies],
  };
}

export type KubernetesStack = ReturnType<typeof declareKubernetesStack>;
