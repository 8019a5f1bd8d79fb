import type * as docker from '@pulumi/docker';
import * as pulumi from '@pulumi/pulumi';
import { readFileSync } from 'node:fs';
import { service } from '../containers.js';
import { destinationOf } from '../egress/proxy.js';
import { ENTRY_POINTS, IMAGE_COMMANDS } from '../images.js';
import { siteSettings, UPSTREAMS } from '../routes.js';
import { env, fileUpload, LIMITS, nodeHttpCheck, type StackContext } from './common.js';
import type { StackImages } from './images.js';
import type { StackNetwork } from './network.js';

/**
 * The branch sites, their builders, the builds' egress proxy and the deployment webhook: one trust
 * boundary per deploy target (docs/infra.md, "Trust boundaries").
 *
 * Per target (infra/stack/targets.ts):
 *   site-<dp>     runs the target's live release, and nothing else: its own container, network
 *                 namespace, network (shared with the proxy alone) and volume (read-only here); read-only
 *                 root, no capabilities, no new privileges, its own uid; memory, CPU, processes, /dev/shm.
 *   builder-<dp>  takes the target's deploy requests from its spool and runs the deploy script
 *                 (scripts/deploy-branch.sh): each build as the target's build user, in a process group
 *                 of its own with a deadline and a disk budget, reaching only the egress proxy; writes
 *                 the release into the site volume and restarts the site over the site's control
 *                 socket. It starts as root with the six capabilities that needs and no others.
 * Shared:
 *   egress        the builds' only way out: CONNECT to the package registry (and, with the builders'
 *                 credential, to the git hosts for the deploy script's fetch).
 *   webhook       verifies pushes and queues deploys; a deploy is a request in the target's spool
 *                 (build-submit), so it runs no build, holds no Docker socket, shares no namespace and
 *                 no network with any site. It runs as node with no capabilities.
 *
 * Nothing here joins app, admin, geo, egress (Kratos' SMTP) or any network holding a database,
 * GeoServer or Ory, and nothing mounts the Docker socket; the policies are infra/test/stack.boundaries.test.ts.
 */

const TARGETS_FILE = '/etc/geodata/targets.yaml';
const STATE_DIR = '/var/lib/webhook';
/** The webhook's DEPLOY_ROOT: each target's spool is mounted at <SPOOL_ROOT>/<deployPath>. */
const SPOOL_ROOT = '/srv/spool';
/** Paths inside a builder and a site container (one target each). */
const SITE_DIR = '/srv/site';
const CONTROL_DIR = '/run/site';
const CONTROL_SOCKET = `${CONTROL_DIR}/control.sock`;
const DEPLOY_SCRIPT = '/app/scripts/deploy-branch.sh';

/** A builder's capabilities: switching to the build user, owning and sealing releases, ending the build user's processes. */
export const BUILDER_CAPABILITIES = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID', 'KILL'] as const;
/** The webhook's deploy deadline, and the builder's, shorter, so the builder's own stop (and rollback) comes first. */
const DEPLOY_TIMEOUT_SECONDS = 900;
const BUILD_TIMEOUT_SECONDS = 840;
/** How much a deploy may grow its target's directory (the release, its node_modules, the npm cache). */
const BUILD_DISK_LIMIT_MB = 4096;

const tmpfs = (sizeMb: number) => ({ '/tmp': `rw,nosuid,nodev,size=${sizeMb}m,mode=1777` });

export function declareSites(ctx: StackContext, { networks, volumes, targets }: StackNetwork, images: StackImages) {
  const { cfg, secrets, n } = ctx;
  const image = images.built.webhook.imageName;
  const egressUrl = `http://${UPSTREAMS.egress.host}:${UPSTREAMS.egress.port}`;

  const gitHosts = [...new Set(cfg.targets.map((t) => destinationOf(t.repo)).filter((d): d is string => d !== undefined))];
  const egress = service('egress', n('egress'), {
    image,
    limits: LIMITS.egress,
    networks: [...targets.map((t) => ({ network: t.networks.build, aliases: [UPSTREAMS.egress.host] })), { network: networks.outbound }],
    command: [...ENTRY_POINTS.egress],
    user: 'node',
    readOnly: true,
    tmpfs: tmpfs(16),
    capabilities: { keep: [] },
    envs: env({
      NODE_ENV: 'production',
      EGRESS_PORT: String(UPSTREAMS.egress.port),
      EGRESS_OPEN: destinationOf(cfg.npmRegistry) as string,
      EGRESS_WITH_CREDENTIAL: gitHosts.join(','),
      EGRESS_GIT_TOKEN: secrets.egressGitToken,
      LOG_LEVEL: cfg.logLevel,
    }),
    healthcheck: { test: nodeHttpCheck(UPSTREAMS.egress.port, '/health'), interval: '30s' },
  });

  const perTarget = targets.map((t) => {
    const labels = { 'platform.target': t.target.key, 'platform.runs': 'team-code' };
    const builder = service(t.builder, n(t.builder), {
      image,
      limits: LIMITS.builder,
      networks: [{ network: t.networks.build }],
      command: [...ENTRY_POINTS.builder],
      user: '0',
      capabilities: { keep: BUILDER_CAPABILITIES },
      tmpfs: tmpfs(512),
      envs: env({
        NODE_ENV: 'production',
        BUILDER_TARGET: t.target.key,
        BUILDER_MATCH: t.target.matchPattern,
        BUILDER_REPO: t.target.repo,
        BUILDER_PORT: String(t.target.port),
        BUILDER_SERVICE: t.service,
        ...(t.target.siteDir ? { BUILDER_SITE_DIR: t.target.siteDir } : {}),
        BUILDER_DEPLOY_DIR: SITE_DIR,
        BUILDER_SPOOL: SPOOL_ROOT,
        BUILDER_SPOOL_OWNER: 'node',
        BUILDER_CONTROL_DIR: CONTROL_DIR,
        BUILDER_SITE_USER: t.siteUser,
        BUILDER_SITE_UID: String(t.siteUid),
        BUILDER_BUILD_USER: t.buildUser,
        BUILDER_BUILD_UID: String(t.buildUid),
        DEPLOY_SCRIPT,
        RESTART_COMMAND: IMAGE_COMMANDS.sitesRestart,
        BUILD_TIMEOUT_SECONDS: String(BUILD_TIMEOUT_SECONDS),
        BUILD_DISK_LIMIT_MB: String(BUILD_DISK_LIMIT_MB),
        EGRESS_PROXY_URL: egressUrl,
        EGRESS_GIT_TOKEN: secrets.egressGitToken,
        NPM_REGISTRY: cfg.npmRegistry,
        LOG_LEVEL: cfg.logLevel,
      }),
      volumes: [
        { volumeName: t.volumes.site.name, containerPath: SITE_DIR },
        { volumeName: t.volumes.control.name, containerPath: CONTROL_DIR },
        { volumeName: t.volumes.spool.name, containerPath: SPOOL_ROOT },
      ],
      labels,
      healthcheck: { test: ['CMD', ...ENTRY_POINTS.builderHealth], interval: '30s' },
      // The site's control directory and the spool get their owners when the builder starts.
      waitHealthy: true,
    });
    const site = service(t.site, n(t.site), {
      image,
      limits: LIMITS.site,
      networks: [{ network: t.networks.site, aliases: [t.siteHost] }],
      command: [...ENTRY_POINTS.site],
      user: `${t.siteUid}:${t.siteUid}`,
      readOnly: true,
      tmpfs: tmpfs(64),
      capabilities: { keep: [] },
      envs: env({
        NODE_ENV: 'production',
        SITE_SERVICE: t.service,
        SITE_PORT: String(t.target.port),
        SITE_DEPLOY_DIR: SITE_DIR,
        ...(t.target.siteDir ? { SITE_DIR: t.target.siteDir } : {}),
        SITES_CONTROL_SOCKET: CONTROL_SOCKET,
        SITES_HOST: '0.0.0.0',
        HOME: '/tmp',
        LOG_LEVEL: cfg.logLevel,
        // The site's own settings (the web app's API and sign-in URLs), passed on by the supervisor.
        ...Object.fromEntries(Object.entries(siteSettings(cfg.domains, t.target, cfg.parentDomain)).map(([k, v]) => [`SITE_ENV_${k}`, v])),
      }),
      volumes: [
        { volumeName: t.volumes.site.name, containerPath: SITE_DIR, readOnly: true },
        { volumeName: t.volumes.control.name, containerPath: CONTROL_DIR },
      ],
      labels,
      healthcheck: { test: ['CMD', IMAGE_COMMANDS.sitesRestart, '--ping'], interval: '30s' },
      dependsOn: [builder],
    });
    return { t, builder, site };
  });

  const targetsYaml = readFileSync(cfg.targetsFile, 'utf8');
  const webhookSecretEnv = Object.fromEntries(Object.entries(secrets.webhookTargetSecrets));
  const webhook = service('webhook', n('webhook'), {
    image,
    limits: LIMITS.webhook,
    networks: [{ network: networks.hooks, aliases: [UPSTREAMS.webhook.host] }],
    user: 'node',
    // Not read-only: Docker copies no upload (the operator's targets file) into a read-only root.
    tmpfs: tmpfs(64),
    capabilities: { keep: [] },
    envs: pulumi.all([secrets.webhookPreviousSecrets, env({
      NODE_ENV: 'production',
      // No build runs here: a deploy is a request to the target's builder, which isolates the build.
      DEPLOY_ISOLATION: 'none',
      DEPLOY_SCRIPT: IMAGE_COMMANDS.buildSubmit,
      DEPLOY_TIMEOUT_SECONDS: String(DEPLOY_TIMEOUT_SECONDS),
      WEBHOOK_PORT: String(UPSTREAMS.webhook.port),
      WEBHOOK_HOST: '0.0.0.0',
      // Only the proxy reaches it (internal network): its X-Forwarded-For is the client address.
      WEBHOOK_TRUST_PROXY: 'uniquelocal',
      TARGETS_FILE,
      DEPLOY_ROOT: SPOOL_ROOT,
      WEBHOOK_STATE_DIR: STATE_DIR,
      WEBHOOK_ADMIN_TOKEN: secrets.webhookAdminToken,
      LOG_LEVEL: cfg.logLevel,
      ...webhookSecretEnv,
    })]).apply(([previous, current]) => [...current, ...Object.entries(previous).map(([k, v]) => `${k}=${v}`)]),
    uploads: [fileUpload(TARGETS_FILE, targetsYaml)],
    volumes: [
      { volumeName: volumes.webhookState.name, containerPath: STATE_DIR },
      ...perTarget.map(({ t }) => ({ volumeName: t.volumes.spool.name, containerPath: `${SPOOL_ROOT}/${t.target.deployPath}` })),
    ],
    healthcheck: { test: nodeHttpCheck(UPSTREAMS.webhook.port, '/health'), interval: '15s' },
    dependsOn: perTarget.map(({ builder }) => builder),
  });

  const containers: { webhook: docker.Container; egress: docker.Container } & Record<string, docker.Container> = {
    webhook,
    egress,
    ...Object.fromEntries(perTarget.flatMap(({ t, builder, site }) => [[t.builder, builder], [t.site, site]])),
  };
  return { containers, webhook, egress, sites: perTarget.map(({ site }) => site), builders: perTarget.map(({ builder }) => builder) };
}

export type StackSites = ReturnType<typeof declareSites>;
