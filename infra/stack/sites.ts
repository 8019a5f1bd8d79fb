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
 *
 * Privilege separation (docs/webhook.md, "Users and modes"): both containers start as root (user "0")
 * with Docker's default capabilities (setuid, setgid, chown, kill and dac_override are needed; no
 * cap_drop ALL). The webhook's deploy launcher stays root and runs each build as its target's build
 * user; the server gives up root for WEBHOOK_USER=node before it reads a secret. The supervisor starts
 * each site as its target's site user. Both first create the users of the uploaded targets file
 * (`users --apply`, idempotent): the operator's targets may differ from the image's
 * config/targets.yaml, and both containers start from the same image and add the same users in the
 * same order, so they agree on the uids of the files they share.
 */

const DEPLOY_ROOT = '/srv/sites';
const STATE_DIR = '/var/lib/webhook';
const TARGETS_FILE = '/etc/geodata/targets.yaml';

const shellWord = (word: string): string => `'${word.replace(/'/g, `'\\''`)}'`;
const shellCommand = (words: readonly string[]): string => words.map(shellWord).join(' ');

/**
 * `sh -c` running the preparation steps as root, then exec'ing the service (so it is PID 1 and gets
 * Docker's SIGTERM). The service's words are passed as arguments, never spliced into the script.
 */
function startCommand(steps: readonly string[], serviceCommand: readonly string[]): string[] {
  return ['/bin/sh', '-c', ['set -eu', ...steps, 'exec "$@"'].join('; '), 'container-start', ...serviceCommand];
}
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
    command: startCommand([shellCommand(ENTRY_POINTS.usersApply)], ENTRY_POINTS.sites),
    user: '0',
    envs: env({
      NODE_ENV: 'production',
      TARGETS_FILE,
      DEPLOY_ROOT,
      SITES_ISOLATION: 'users',
      SITES_CONTROL_SOCKET: sitesSocket,
      SITES_HOST: '0.0.0.0',
      LOG_LEVEL: cfg.logLevel,
    }),
    uploads: [fileUpload(TARGETS_FILE, targetsYaml)],
    volumes: [
      // The sites only read releases; building and switching `live` happens in the webhook container.
      { volumeName: volumes.deployRoot.name, containerPath: DEPLOY_ROOT, readOnly: true },
      { volumeName: volumes.sitesControl.name, containerPath: '/run/sites' },
    ],
    healthcheck: { test: ['CMD', '/usr/local/bin/sites-restart', '--ping'], interval: '30s' },
  });
  const webhook = service('webhook', n('webhook'), {
    image: images.built.webhook.imageName,
    limits: LIMITS.webhook,
    networks: [],
    shareNetworkWith: sites,
    // A volume keeps the owner and mode it was first created with (from the image's mount point), so
    // they are set here on every start: the deploy root belongs to root (the launcher) and only its
    // top is traversable by the per-target users (0711); the state directory belongs to node.
    command: startCommand(
      [
        `chown 0:0 ${shellWord(DEPLOY_ROOT)}`,
        `chmod 0711 ${shellWord(DEPLOY_ROOT)}`,
        `chown node:node ${shellWord(STATE_DIR)}`,
        shellCommand(ENTRY_POINTS.usersApply),
      ],
      ENTRY_POINTS.webhook,
    ),
    user: '0',
    envs: pulumi.all([secrets.webhookPreviousSecrets, env({
      NODE_ENV: 'production',
      WEBHOOK_USER: 'node',
      DEPLOY_ISOLATION: 'users',
      WEBHOOK_PORT: String(UPSTREAMS.webhook.port),
      WEBHOOK_HOST: '0.0.0.0',
      // Only the proxy reaches it (internal network): its X-Forwarded-For is the client address.
      WEBHOOK_TRUST_PROXY: 'uniquelocal',
      TARGETS_FILE,
      DEPLOY_ROOT,
      WEBHOOK_STATE_DIR: STATE_DIR,
      WEBHOOK_ADMIN_TOKEN: secrets.webhookAdminToken,
      // No Docker socket: a restart is a request on the sites container's control socket (infra/sites).
      RESTART_COMMAND: '/usr/local/bin/sites-restart',
      SITES_CONTROL_SOCKET: sitesSocket,
      // The deploy script runs the restart command with an allow-listed environment: the socket's path
      // must be passed on, or sites-restart falls back to its built-in default.
      DEPLOY_ENV_PASS: 'SITES_CONTROL_SOCKET',
      LOG_LEVEL: cfg.logLevel,
      ...webhookSecretEnv,
    })]).apply(([previous, current]) => [...current, ...Object.entries(previous).map(([k, v]) => `${k}=${v}`)]),
    uploads: [fileUpload(TARGETS_FILE, targetsYaml)],
    volumes: [
      { volumeName: volumes.deployRoot.name, containerPath: DEPLOY_ROOT },
      { volumeName: volumes.sitesControl.name, containerPath: '/run/sites' },
      { volumeName: volumes.webhookState.name, containerPath: STATE_DIR },
    ],
    healthcheck: { test: nodeHttpCheck(UPSTREAMS.webhook.port, '/health'), interval: '15s' },
    dependsOn: [sites],
  });
  return { containers: { sites, webhook } };
}

export type StackSites = ReturnType<typeof declareSites>;
