import { serviceNameOf, type Target } from '../../services/shared/targets.js';

/**
 * One trust boundary per deploy target: everything the stack declares for a target, named in one
 * place. A target has
 *
 *   site-<deployPath>         its site container (own network namespace, read-only root, no capabilities),
 *                             alias of the same name on its own network, listening on the target's port;
 *   builder-<deployPath>      its builder container: takes deploy jobs from the target's spool, runs
 *                             each build as the target's build user, writes releases into the site volume;
 *   network site-<dp>         internal, a /28 of sitesSubnet: the site and the proxy, nothing else;
 *   network build-<dp>        internal: the builder and the egress proxy (the package registry, the git host);
 *   volume site-<dp>          the releases (read-only in the site container);
 *   volume site-control-<dp>  the site supervisor's control socket, shared by the site and its builder only;
 *   volume build-spool-<dp>   deploy jobs and their logs, shared by the webhook and this builder only.
 *
 * Uids: the site runs as `siteUid` (also the target group's gid), the build as `buildUid`. They are
 * derived from the deploy path, not from the target's position in the file, so reordering targets
 * changes nobody's files; distinct uids per target make the per-uid process limit (RLIMIT_NPROC, the
 * stack's pids limit) a per-target one, and no target's process can signal or own another's files
 * even outside its container.
 */

export interface StackTarget {
  target: Target;
  /** astro-<key with / as -> (the supervisor's and the deploy script's service name). */
  service: string;
  /** Resource names (the Docker names are `<namePrefix>-<name>`). */
  site: string;
  builder: string;
  siteNetwork: string;
  buildNetwork: string;
  siteVolume: string;
  controlVolume: string;
  spoolVolume: string;
  /** Host name of the site on its network: the proxy's upstream is `<siteHost>:<target.port>`. */
  siteHost: string;
  /** The site network's subnet, a /28 inside sitesSubnet. */
  siteSubnet: string;
  siteUid: number;
  buildUid: number;
  /** Unix names of the two users inside the builder container. */
  siteUser: string;
  buildUser: string;
}

/** A /24 holds sixteen /28 site networks (site, proxy, gateway: three addresses of fourteen). */
export const MAX_TARGETS = 16;

const UID_BASE = 20_000;
const UID_SLOTS = 15_000;

/** FNV-1a, 32 bit: a stable number from the deploy path. */
function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/** The site uid (even) and build uid (odd, next to it) of a deploy path: 20000–49999. */
export function targetUids(deployPath: string): { siteUid: number; buildUid: number } {
  const siteUid = UID_BASE + 2 * (fnv1a(deployPath) % UID_SLOTS);
  return { siteUid, buildUid: siteUid + 1 };
}

/** a.b.c.0/24 → the i-th /28 inside it. */
function subnetOf(sitesSubnet: string, index: number): string {
  const base = sitesSubnet.replace(/\.0\/24$/, '');
  return `${base}.${index * 16}/28`;
}

/** The site's host name on its network (an alias): `site-<deployPath>` in DNS-safe letters. */
export const siteHostOf = (target: Pick<Target, 'deployPath'>): string => `site-${target.deployPath.toLowerCase().replace(/[^a-z0-9-]/g, '-')}`;

const unixName = (prefix: string, deployPath: string) => `${prefix}${deployPath.toLowerCase().replace(/[^a-z0-9_-]/g, '-')}`.slice(0, 32);

export function stackTargets(targets: readonly Target[], sitesSubnet: string): StackTarget[] {
  if (targets.length > MAX_TARGETS) {
    throw new Error(`invalid stack configuration: ${targets.length} deploy targets; sitesSubnet (a /24) holds the networks of at most ${MAX_TARGETS}`);
  }
  const byUid = new Map<number, string>();
  return targets.map((target, index) => {
    const { siteUid, buildUid } = targetUids(target.deployPath);
    const clash = byUid.get(siteUid);
    if (clash) throw new Error(`invalid stack configuration: deploy paths ${clash} and ${target.deployPath} map to the same uids (${siteUid}); rename one`);
    byUid.set(siteUid, target.deployPath);
    const dp = target.deployPath;
    return {
      target,
      service: serviceNameOf(target),
      site: `site-${dp}`,
      builder: `builder-${dp}`,
      siteNetwork: `site-${dp}`,
      buildNetwork: `build-${dp}`,
      siteVolume: `site-${dp}`,
      controlVolume: `site-control-${dp}`,
      spoolVolume: `build-spool-${dp}`,
      siteHost: siteHostOf(target),
      siteSubnet: subnetOf(sitesSubnet, index),
      siteUid,
      buildUid,
      siteUser: unixName('siteuser-', dp),
      buildUser: unixName('builduser-', dp),
    };
  });
}
