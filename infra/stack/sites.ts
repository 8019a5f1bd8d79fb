import * as pulumi from '@pulumi/pulumi';
import { readFileSync } from 'node:fs';
import { service } from '../containers.js';
import { ENTRY_POINTS } from '../images.js';
import { UPSTREAMS } from '../routes.js';
import { env, fileUpload, LIMITS, nodeHttpCheck, type StackContext } from './common.js';
import type { StackImages } from './images.js';
import type { StackNetwork } from './network.js';

/**
 * The branch sites and the deployment webhook.
 *
 * The sites run code from team pushes: untrusted. Their container joins only the `sites` network
 * (shared with the proxy and nothing else) and `sites-egress` (alone), never `app` or `admin`: no path
 * to the databases, GeoServer or Ory except through the proxy, like any browser on the internet.
 *
 * The sites container owns the network namespace the webhook server joins: the deploy script's health
 * check (http://127.0.0.1:<port>) then reaches the site it just restarted, while process control stays
 * with the sites container (separate PID namespaces; the control socket is the only way in).
 */
export function declareSites(ctx: StackContext, { networks, volumes }: StackNetwork, images: StackImages) {
  const { cfg, secrets, n } = ctx;
  const targetsYaml = readFileSync(cfg.targetsFile, 'utf8');
  const webhookSecretEnv = Object.fromEntries(Object.entries(secrets.webhookTargetSecrets));
  const sitesSocket = '/run/sites/control.sock';

  const sites = service('sites', n('sites'), {
    image: images.built.webhook.imageName,
    limits: LIMITS.sites,
    networks: [
      { network: networks.sites, aliases: [UPSTREAMS.sites.host, UPSTREAMS.webhook.host] },
      { network: networks.sitesEgress },
    ],
    command: [...ENTRY_POINTS.sites],
    user: 'node',
    envs: env({
      NODE_ENV: 'production',
      TARGETS_FILE: '/etc/geodata/targets.yaml',
      DEPLOY_ROOT: '/srv/sites',
      SITES_CONTROL_SOCKET: sitesSocket,
      SITES_HOST: '0.0.0.0',
      LOG_LEVEL: cfg.logLevel,
    }),
    uploads: [fileUpload('/etc/geodata/targets.yaml', targetsYaml)],
    volumes: [
      // The sites only read releases; building and switching `live` happens in the webhook container.
      { volumeName: volumes.deployRoot.name, containerPath: '/srv/sites', readOnly: true },
      { volumeName: volumes.sitesControl.name, containerPath: '/run/sites' },
    ],
    healthcheck: { test: ['CMD', '/usr/local/bin/sites-restart', '--ping'], interval: '30s' },
  });
  const webhook = service('webhook', n('webhook'), {
    image: images.built.webhook.imageName,
    limits: LIMITS.webhook,
    networks: [],
    shareNetworkWith: sites,
    user: 'node',
    envs: pulumi.all([secrets.webhookPreviousSecrets, env({
      NODE_ENV: 'production',
      WEBHOOK_PORT: String(UPSTREAMS.webhook.port),
      WEBHOOK_HOST: '0.0.0.0',
      // Only the proxy reaches it (internal network): its X-Forwarded-For is the client address.
      WEBHOOK_TRUST_PROXY: 'uniquelocal',
      TARGETS_FILE: '/etc/geodata/targets.yaml',
      DEPLOY_ROOT: '/srv/sites',
      WEBHOOK_STATE_DIR: '/var/lib/webhook',
      WEBHOOK_ADMIN_TOKEN: secrets.webhookAdminToken,
      // No Docker socket: a restart is a request on the sites container's control socket (infra/sites).
      RESTART_COMMAND: '/usr/local/bin/sites-restart',
      SITES_CONTROL_SOCKET: sitesSocket,
      LOG_LEVEL: cfg.logLevel,
      ...webhookSecretEnv,
    })]).apply(([previous, current]) => [...current, ...Object.entries(previous).map(([k, v]) => `${k}=${v}`)]),
    uploads: [fileUpload('/etc/geodata/targets.yaml', targetsYaml)],
    volumes: [
      { volumeName: volumes.deployRoot.name, containerPath: '/srv/sites' },
      { volumeName: volumes.sitesControl.name, containerPath: '/run/sites' },
      { volumeName: volumes.webhookState.name, containerPath: '/var/lib/webhook' },
    ],
    healthcheck: { test: nodeHttpCheck(UPSTREAMS.webhook.port, '/health'), interval: '15s' },
    dependsOn: [sites],
  });
  return { containers: { sites, webhook } };
}

export type StackSites = ReturnType<typeof declareSites>;
