import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The Ory Helm charts' default values (0.62.1), the one upstream input of the Kubernetes checks that no
 * package on the npm registry carries: the charts ship no values schema, so the Kratos and Hydra
 * releases' values are checked key by key against these (infra/k8s/schemas/charts.ts). Each file is
 * pinned to an upstream commit and a sha256, like the Ory and GeoServer contracts
 * (services/shared/contracts.ts): a copy from anywhere is the same bytes, and none is committed here.
 * (The objects themselves are checked against the models from the npm registry: validate.ts.)
 *
 * Where they are found, first complete folder wins:
 *   1. K8S_SCHEMAS_DIR;
 *   2. `.cache/k8s-schemas/` in the repository, git-ignored, filled by
 *      `node --import tsx infra/k8s/schemas/fetch-cli.ts [--from DIR]`;
 *   3. `../shared/vendor/k8s-schemas/` beside the repository (the workspace's shared folder, which CI's
 *      clean clone has beside it too: files placed there are checked on CI as well).
 */

export interface PinnedSchema {
  file: string;
  url: string;
  sha256: string;
}

const raw = (repo: string, commit: string, path: string) => `https://raw.githubusercontent.com/${repo}/${commit}/${path}`;
const ORY_K8S = 'c3dbb7e9c4e2d7439cf24befa91e7c37968c41ee';

export const PINNED_SCHEMAS = {
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
  "the pinned Ory charts' default values were not found: set K8S_SCHEMAS_DIR to a copy, " +
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
