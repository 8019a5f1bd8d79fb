import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The upstream schemas the Kubernetes target is checked against (infra/stack.k8s-schemas.test.ts), each
 * pinned to an upstream commit and a sha256, like the Ory and GeoServer contracts
 * (services/shared/contracts.ts): a copy from anywhere is the same bytes, and none is committed here.
 *
 *   Kubernetes 1.33.1   the API's OpenAPI (v2) definitions, as kubernetes-client/python 33.1.0 took them
 *                       from kubernetes/kubernetes api/openapi-spec/swagger.json (release-1.33)
 *   CloudNativePG 1.30.0  the Cluster, Pooler and ScheduledBackup CRDs
 *   Barman Cloud plugin 0.14.0  the ObjectStore CRD
 *   cert-manager 1.21.1  the ClusterIssuer CRD
 *   Ory charts 0.62.1    Kratos' and Hydra's default values (the charts ship no values schema: the
 *                        release's values are checked key by key against these)
 *
 * Where they are found, first complete folder wins:
 *   1. K8S_SCHEMAS_DIR;
 *   2. `.cache/k8s-schemas/` in the repository, git-ignored, filled by
 *      `node --import tsx infra/k8s/schemas/fetch-cli.ts [--from DIR]`;
 *   3. `../shared/vendor/k8s-schemas/` beside the repository (the development workspace, and CI's copy).
 */

export interface PinnedSchema {
  file: string;
  url: string;
  sha256: string;
}

const raw = (repo: string, commit: string, path: string) => `https://raw.githubusercontent.com/${repo}/${commit}/${path}`;
const CNPG = '4b5e244a7d031f67e025c83c1555e7726ecbbfa1';
const ORY_K8S = 'c3dbb7e9c4e2d7439cf24befa91e7c37968c41ee';

export const PINNED_SCHEMAS = {
  kubernetes: {
    file: 'kubernetes-v1.33.1/swagger.json',
    url: raw('kubernetes-client/python', '8f5578ee6845d33b3fb54867e2ea88349df6d07e', 'kubernetes/swagger.json.unprocessed'),
    sha256: '07855fb227fcede0acdfff1d7e52fdc4bfd98e99bf2c042c745f68719ade2876',
  },
  cnpgClusters: {
    file: 'cloudnative-pg-v1.30.0/postgresql.cnpg.io_clusters.yaml',
    url: raw('cloudnative-pg/cloudnative-pg', CNPG, 'config/crd/bases/postgresql.cnpg.io_clusters.yaml'),
    sha256: 'ae47f4a00f6e998faef57e480f9a3960cd48ea16a79270861fc7442601507472',
  },
  cnpgPoolers: {
    file: 'cloudnative-pg-v1.30.0/postgresql.cnpg.io_poolers.yaml',
    url: raw('cloudnative-pg/cloudnative-pg', CNPG, 'config/crd/bases/postgresql.cnpg.io_poolers.yaml'),
    sha256: '9e0dad05355f72dceb154a12b43ebe8a410d470133ad228bf711c1fdee221124',
  },
  cnpgScheduledBackups: {
    file: 'cloudnative-pg-v1.30.0/postgresql.cnpg.io_scheduledbackups.yaml',
    url: raw('cloudnative-pg/cloudnative-pg', CNPG, 'config/crd/bases/postgresql.cnpg.io_scheduledbackups.yaml'),
    sha256: '1dffb969a92ed6b09abe59d9c848ff97c6646c7824e75f8e0b8379df8473a145',
  },
  barmanObjectStores: {
    file: 'plugin-barman-cloud-v0.14.0/barmancloud.cnpg.io_objectstores.yaml',
    url: raw('cloudnative-pg/plugin-barman-cloud', '1e13020fe5f09fd8fc29ea03828f7b61375b3721', 'config/crd/bases/barmancloud.cnpg.io_objectstores.yaml'),
    sha256: '7c98720494253421339acd03aa77487869326ea20d4768a0c3aef8ff076daaef',
  },
  certManagerClusterIssuers: {
    file: 'cert-manager-v1.21.1/cert-manager.io_clusterissuers.yaml',
    url: raw('cert-manager/cert-manager', '24e33194fb39488eff2bbf10c6dc640f407cad44', 'deploy/crds/cert-manager.io_clusterissuers.yaml'),
    sha256: '30008001b78aafb8e110af61359561104b5fafc3a4dc6ac0013245d0ee3fe4ca',
  },
  kratosValues: {
    file: 'ory-k8s-v0.62.1/kratos-values.yaml',
    url: raw('ory/k8s', ORY_K8S, 'helm/charts/kratos/values.yaml'),
    sha256: '9f2575e3157f800b2faede2bc30ee32752596b66f08779d3b344ac294f90ade2',
  },
  hydraValues: {
    file: 'ory-k8s-v0.62.1/hydra-values.yaml',
    url: raw('ory/k8s', ORY_K8S, 'helm/charts/hydra/values.yaml'),
    sha256: 'e4a9e8ce2faec0e3da0965b266d6eb755e7dccdc06bb11641a3c79ddf1bbb5c1',
  },
} as const satisfies Record<string, PinnedSchema>;

export type SchemaName = keyof typeof PINNED_SCHEMAS;

const REPOSITORY_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const SCHEMAS_CACHE_DIR = join(REPOSITORY_ROOT, '.cache', 'k8s-schemas');
const WORKSPACE_VENDOR_DIR = resolve(REPOSITORY_ROOT, '..', 'shared', 'vendor', 'k8s-schemas');

export const SCHEMAS_HINT =
  'the pinned Kubernetes, CloudNativePG, cert-manager and Ory chart schemas were not found: set K8S_SCHEMAS_DIR to a copy, ' +
  'run `node --import tsx infra/k8s/schemas/fetch-cli.ts` (downloads them), or place them in ../shared/vendor/k8s-schemas/ (infra/k8s/schemas/pins.ts lists them)';

export type SchemasLocation = { ok: true; dir: string } | { ok: false; reason: string };

const complete = (dir: string) => Object.values(PINNED_SCHEMAS).every((pin) => existsSync(join(dir, pin.file)));

/** The first complete schemas folder, in the order K8S_SCHEMAS_DIR → cache → ../shared/vendor/k8s-schemas. */
export function locateSchemas(env: NodeJS.ProcessEnv = process.env): SchemasLocation {
  const candidates = [env.K8S_SCHEMAS_DIR, SCHEMAS_CACHE_DIR, WORKSPACE_VENDOR_DIR].filter((dir): dir is string => Boolean(dir));
  for (const dir of candidates) if (complete(dir)) return { ok: true, dir };
  if (env.K8S_SCHEMAS_DIR) return { ok: false, reason: `K8S_SCHEMAS_DIR=${env.K8S_SCHEMAS_DIR} lacks some pinned files; ${SCHEMAS_HINT}` };
  return { ok: false, reason: SCHEMAS_HINT };
}

/** The sha256 of a file against its pin: undefined when it matches, otherwise what was found. */
export function checkPin(pin: PinnedSchema, dir: string): string | undefined {
  const actual = createHash('sha256').update(readFileSync(join(dir, pin.file))).digest('hex');
  return actual === pin.sha256 ? undefined : actual;
}
