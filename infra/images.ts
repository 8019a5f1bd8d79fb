import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { dockerignore } from './docker/image.js';

/**
 * Every third-party image the stack runs, pinned to a release. Upgrading is a one-line change here,
 * reviewed like code; `latest` or an untagged name is rejected by the policy tests.
 *
 * The Ory images match the vendored contracts (v26.2.0) the identity configuration is checked against.
 */
export const IMAGES = {
  /** PostGIS for the features database (PostgreSQL 16, PostGIS 3.5). */
  postgis: 'postgis/postgis:16-3.5',
  /** Plain PostgreSQL for Kratos and Hydra (separate databases and users), and pg_dump for backups. */
  postgres: 'postgres:16.9-bookworm',
  geoserver: 'docker.osgeo.org/geoserver:2.26.2',
  kratos: 'oryd/kratos:v26.2.0',
  hydra: 'oryd/hydra:v26.2.0',
  kratosSelfServiceUi: 'oryd/kratos-selfservice-ui-node:v26.2.0',
  caddy: 'caddy:2.8.4-alpine',
} as const;

/** The Node base image of the project's own Dockerfiles (kept in sync with infra/docker/*.Dockerfile). */
export const NODE_IMAGE = 'node:20.20.2-bookworm-slim';

/** A pinned reference: registry/name:tag where the tag names a version (contains a digit) and is not `latest`. */
export function isPinnedImage(reference: string): boolean {
  if (reference.includes('@sha256:')) return true;
  const lastSegment = reference.slice(reference.lastIndexOf('/') + 1);
  const colon = lastSegment.lastIndexOf(':');
  if (colon < 0) return false;
  const tag = lastSegment.slice(colon + 1);
  return tag !== 'latest' && /\d/.test(tag) && !/latest|stable|edge|main|master/i.test(tag);
}

/**
 * The fingerprint of what a project image contains: the Dockerfile itself and every file its COPY
 * lines take from the build context (not `COPY --from=<stage>`), read from the repository. The image
 * name carries it in its tag, so new code under an unchanged `imageTag` is a new image reference and
 * Pulumi replaces every container that runs it; unchanged code keeps the reference and nothing restarts.
 */
export function imageContentHash(repoRoot: string, dockerfile: string): string {
  const hash = createHash('sha256');
  const dockerfileText = readFileSync(join(repoRoot, dockerfile), 'utf8');
  hash.update(`${dockerfile}\0${dockerfileText}\0`);
  for (const file of copiedFiles(repoRoot, dockerfileText)) {
    hash.update(`${file}\0`);
    hash.update(readFileSync(join(repoRoot, file)));
    hash.update('\0');
  }
  return hash.digest('hex');
}

/**
 * The context files a Dockerfile's COPY/ADD lines take (sorted, repository-relative): exactly what
 * Docker sends and copies, so the build context filtered by the repository's .dockerignore with the
 * same matcher the image assembly uses (infra/docker/image.ts). An ignored file never reaches the
 * image, so it must not change the image's reference either.
 */
export function copiedFiles(repoRoot: string, dockerfileText: string): string[] {
  const ignorePath = join(repoRoot, '.dockerignore');
  const ignored = dockerignore(existsSync(ignorePath) ? readFileSync(ignorePath, 'utf8') : '');
  const files = new Set<string>();
  // Continuation lines joined first: `COPY a \` newline `b ./`.
  for (const line of dockerfileText.replace(/\\\r?\n/g, ' ').split(/\r?\n/)) {
    const match = /^\s*(?:COPY|ADD)\s+(.*)$/i.exec(line);
    if (!match?.[1]) continue;
    const words = match[1].trim().split(/\s+/);
    if (words.some((w) => /^--from=/i.test(w))) continue;
    const args = words.filter((w) => !w.startsWith('--'));
    for (const source of args.slice(0, -1)) {
      for (const file of expand(repoRoot, source.replace(/^\.\//, '').replace(/\/$/, ''), ignored)) files.add(file);
    }
  }
  return [...files].sort();
}

type Ignored = (relativePath: string) => boolean;

function expand(repoRoot: string, source: string, ignored: Ignored): string[] {
  if (source === '' || source === '.') return walk(repoRoot, '', ignored);
  if (source.includes('*')) {
    const dir = dirname(source);
    const pattern = new RegExp(`^${basename(source).replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*')}$`);
    const base = join(repoRoot, dir);
    if (!existsSync(base)) return [];
    return readdirSync(base).filter((name) => pattern.test(name)).flatMap((name) => expand(repoRoot, dir === '.' ? name : `${dir}/${name}`, ignored));
  }
  const path = join(repoRoot, source);
  // Docker refuses to COPY an excluded source; the assembly fails on it too, so it adds nothing here.
  if (!existsSync(path) || ignored(source)) return [];
  return statSync(path).isDirectory() ? walk(repoRoot, source, ignored) : [source];
}

function walk(repoRoot: string, dir: string, ignored: Ignored): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(repoRoot, dir))) {
    const relative = dir === '' ? name : `${dir}/${name}`;
    // An excluded folder is not descended into (as Docker does), so node_modules costs nothing.
    if (ignored(relative)) continue;
    const stats = statSync(join(repoRoot, relative));
    if (stats.isDirectory()) out.push(...walk(repoRoot, relative, ignored));
    else if (stats.isFile()) out.push(relative);
  }
  return out;
}

/** The project's own images: Dockerfile under infra/docker and the image's short name. */
export const PROJECT_IMAGES = {
  api: 'api.Dockerfile',
  webhook: 'webhook.Dockerfile',
  login: 'identity.Dockerfile',
  ops: 'ops.Dockerfile',
} as const;

/** `<prefix>/<name>:<imageTag>-<first 12 hex digits of the content hash>`. */
export function projectImageName(repoRoot: string, prefix: string, name: keyof typeof PROJECT_IMAGES, imageTag: string): string {
  return `${prefix}/${name}:${imageTag}-${imageContentHash(repoRoot, `infra/docker/${PROJECT_IMAGES[name]}`).slice(0, 12)}`;
}

/**
 * The commands the stack runs in the project images, in one place (the image's CMD is the long-running
 * service; jobs and the sites supervisor name their entry point here). The images hold compiled
 * JavaScript at the sources' paths (infra/docker/build.ts) and no TypeScript runner.
 */
export const ENTRY_POINTS = {
  apiMigrate: ['node', 'services/api/src/db/migrate-cli.js'],
  /** The QC worker (approvals' mails and exports) in the api image, and its health check. */
  qcWorker: ['node', 'services/api/src/qc/worker-main.js'],
  qcWorkerHealth: ['node', 'services/api/src/qc/worker-main.js', '--health'],
  geoserverProvision: ['node', 'infra/geoserver/cli.js'],
  clientsSync: ['node', 'identity/src/clients/sync-cli.js'],
  /** One target's site under the supervisor (infra/sites), in the site container. */
  site: ['node', 'infra/sites/main.js'],
  /** One target's builder (infra/builder), and its health check. */
  builder: ['node', 'infra/builder/main.js'],
  builderHealth: ['node', 'infra/builder/main.js', '--health'],
  /** The builds' egress proxy (infra/egress). */
  egress: ['node', 'infra/egress/main.js'],
  /** The image's CMD (webhook.Dockerfile). */
  webhook: ['node', 'services/webhook/src/server.js'],
} as const;

/** Commands the webhook image installs in /usr/local/bin (webhook.Dockerfile). */
export const IMAGE_COMMANDS = {
  /** Asks a site container to restart its site (infra/sites/restart-client.ts); the site's health check with --ping. */
  sitesRestart: '/usr/local/bin/sites-restart',
  /** The webhook's DEPLOY_SCRIPT: hands a deploy to the target's builder (infra/builder/submit.ts). */
  buildSubmit: '/usr/local/bin/build-submit',
} as const;
