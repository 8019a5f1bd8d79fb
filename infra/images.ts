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
