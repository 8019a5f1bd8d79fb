import { REPO_ROOT, type StackConfig } from '../config.js';
import { IMAGES, PROJECT_IMAGES, projectImageName } from '../images.js';
import type { KubernetesSettings } from './config.js';

/**
 * The Kubernetes target's images: the same pinned third-party images as the Docker target
 * (infra/images.ts), the CloudNativePG operands for the databases, and the project's own images under the
 * configured registry with the same content-hash tags.
 *
 * Nothing is built in the cluster for the platform itself. The project images are built outside it, from
 * the same Dockerfiles (infra/docker/*.Dockerfile), and pushed by CI or the operator under exactly the
 * references the stack output `images` lists (`<registry>/<name>:<imageTag>-<content hash>`), before
 * `pulumi up`; a reference that is not in the registry leaves the pods in ImagePullBackOff and `pulumi up`
 * waiting on them, naming the Deployment. Site builds (team code) are the one thing built in the cluster:
 * infra/k8s/sites.ts.
 */

/**
 * CloudNativePG's operand images (ghcr.io/cloudnative-pg/postgis-containers and postgres-containers), the
 * `standard` flavour: without Barman Cloud in the image, which the Barman Cloud plugin brings as a sidecar.
 * PostgreSQL 16 and PostGIS 3.5, as postgis/postgis:16-3.5 and postgres:16.9 on the Docker target.
 */
export const CNPG_IMAGES = {
  postgis: 'ghcr.io/cloudnative-pg/postgis:16-3.5-standard-bookworm',
  postgres: 'ghcr.io/cloudnative-pg/postgresql:16.9-standard-bookworm',
} as const;

/** Ory's Helm charts (github.com/ory/k8s), the release whose appVersion is the Ory images' v26.2.0. */
export const ORY_CHARTS = { repo: 'https://k8s.ory.sh/helm/charts', version: '0.62.1' } as const;

/** A third-party image as registry, repository and tag (what the Ory charts take). */
export function splitImage(reference: string): { registry: string; repository: string; tag: string } {
  const colon = reference.lastIndexOf(':');
  const name = reference.slice(0, colon);
  const tag = reference.slice(colon + 1);
  const first = name.split('/')[0] ?? '';
  const hasRegistry = name.includes('/') && (first.includes('.') || first.includes(':'));
  return { registry: hasRegistry ? first : 'docker.io', repository: hasRegistry ? name.slice(first.length + 1) : name, tag };
}

export function kubernetesImages(cfg: StackConfig, settings: KubernetesSettings) {
  const project = (name: keyof typeof PROJECT_IMAGES) => projectImageName(REPO_ROOT, settings.registry, name, cfg.imageTag);
  return {
    thirdParty: { geoserver: IMAGES.geoserver, kratos: IMAGES.kratos, hydra: IMAGES.hydra, selfServiceUi: IMAGES.kratosSelfServiceUi, caddy: IMAGES.caddy, ...CNPG_IMAGES },
    project: { api: project('api'), webhook: project('webhook'), login: project('login'), ops: project('ops') },
  };
}

export type K8sImages = ReturnType<typeof kubernetesImages>;
