/**
 * systemd units for the host: `webhook-server.service` and one `astro-<key>.service` per target,
 * plus the privilege rule (sudoers or polkit) that lets a non-root deploy user restart exactly those
 * site units and nothing else (only needed with DEPLOY_ISOLATION=none, where the deploys run as
 * that user; with isolation the deploy script runs as root and restarts units itself).
 *
 * Privilege separation (docs/webhook.md): the webhook unit starts as root, forks the deploy
 * launcher, and the server gives up root for `user` (WEBHOOK_USER) before it reads a secret or
 * listens. Builds run as each target's `wb-…` user, each step in a transient unit with the site
 * units' sandbox (DEPLOY_BUILD_SANDBOX=systemd); each site unit runs as its `ws-…` user.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serviceNameOf, siteUserOf, type Target } from '../../../../shared/targets.js';

export interface HostLayout {
  /** The system user the webhook server runs as once started (WEBHOOK_USER); owns the secrets file. */
  user: string;
  group: string;
  /** Checkout of this repository on the host (node_modules installed). */
  appDir: string;
  nodePath: string;
  deployRoot: string;
  /** Non-secret settings for the webhook server (KEY=value), optional. */
  envFile: string;
  secretsFile: string;
  stateDir: string;
  /** How a release is started inside its directory (absolute executable first). */
  siteExec: string;
  webhookPort: number;
  shutdownGraceSeconds: number;
  /** Addresses (CIDR) a site may connect to besides loopback, e.g. the API's when it runs elsewhere. */
  siteAllowedAddresses: readonly string[];
  siteMemoryMax: string;
  siteTasksMax: number;
  siteCpuQuota: string;
}

export const defaultLayout: HostLayout = {
  user: 'deploy',
  group: 'deploy',
  appDir: '/opt/platform',
  nodePath: '/usr/bin/node',
  deployRoot: '/srv/sites',
  envFile: '/etc/webhook-server/webhook.env',
  secretsFile: '/etc/webhook-server/secrets.env',
  stateDir: '/var/lib/webhook-server',
  siteExec: '/usr/bin/node dist/server/entry.mjs',
  webhookPort: 9321,
  shutdownGraceSeconds: 120,
  siteAllowedAddresses: [],
  siteMemoryMax: '512M',
  siteTasksMax: 64,
  siteCpuQuota: '100%',
};

export function renderWebhookUnit(targets: readonly Target[], layout: HostLayout): string {
  return `# Rendered by \`npm run host -- systemd\`. Deployment webhook server (POST /webhook, port ${layout.webhookPort}).
[Unit]
Description=Deployment webhook server
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
# Starts as root: the deploy launcher stays root (it runs the deploy script, which runs each build
# as the target's own user); the server itself becomes WEBHOOK_USER before reading any secret.
WorkingDirectory=${layout.appDir}
EnvironmentFile=-${layout.envFile}
Environment=NODE_ENV=production
Environment=WEBHOOK_USER=${layout.user}
Environment=DEPLOY_ISOLATION=users
# Every build step a transient unit with the site units' sandbox (scripts/host/lib/build-sandbox.sh).
Environment=DEPLOY_BUILD_SANDBOX=systemd
Environment="RESTART_COMMAND=/usr/bin/systemctl restart"
Environment=WEBHOOK_PORT=${layout.webhookPort}
Environment=WEBHOOK_SECRETS_FILE=${layout.secretsFile}
Environment=WEBHOOK_STATE_DIR=${layout.stateDir}
Environment=DEPLOY_ROOT=${layout.deployRoot}
Environment=DEPLOY_SCRIPT=${join(layout.appDir, 'scripts/deploy-branch.sh')}
Environment=WEBHOOK_SHUTDOWN_GRACE_SECONDS=${layout.shutdownGraceSeconds}
ExecStart=${layout.nodePath} --import tsx services/webhook/src/server.ts
# SIGHUP re-reads the secrets file (secret rotation without a restart).
ExecReload=/bin/kill -HUP $MAINPID
# Only the server gets SIGTERM; it lets a running deploy finish within the grace period, so the
# deploy's processes must not be signalled at the same time (they are in the same cgroup).
KillMode=mixed
TimeoutStopSec=${layout.shutdownGraceSeconds + 30}
Restart=on-failure
RestartSec=2
StateDirectory=webhook-server
StateDirectoryMode=0700
# The journal belongs to the server's user (it writes it after giving up root).
ExecStartPre=/bin/chown -R ${layout.user}:${layout.group} ${layout.stateDir}
CacheDirectory=webhook-server
ProtectSystem=full
ProtectHome=read-only
PrivateTmp=yes
ReadWritePaths=${layout.deployRoot}
UMask=0027

[Install]
WantedBy=multi-user.target
# Targets deployed by this server: ${targets.map((t) => t.key).join(', ')}
`;
}

/**
 * The sandbox of a unit that runs a team's code (the sites here; the builds through systemd-run in
 * scripts/deploy-branch.sh): one property per line of scripts/host/lib/team-code-sandbox.conf, the
 * one list both read (why each line is there is said in that file). Read when a unit is rendered.
 */
export const teamCodeSandboxFile = fileURLToPath(new URL('../../../../../scripts/host/lib/team-code-sandbox.conf', import.meta.url));

export function teamCodeSandbox(file = teamCodeSandboxFile): string[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
}

export function renderSiteUnit(target: Target, layout: HostLayout): string {
  const deployDir = join(layout.deployRoot, target.deployPath);
  return `# Rendered by \`npm run host -- systemd\`. Site of ${target.key} (${target.domain}).
[Unit]
Description=Site ${target.key} on port ${target.port}
After=network.target

[Service]
Type=simple
# The target's own site user: it may read this target's live release and nothing else.
User=${siteUserOf(target)}
Group=${siteUserOf(target)}
# live is a symlink switched by each deploy; a restart resolves it again. The site's folder (siteDir)
# inside the release is where it runs from.
WorkingDirectory=${join(deployDir, 'live', target.siteDir ?? '')}
Environment=NODE_ENV=production
Environment=HOST=127.0.0.1
Environment=PORT=${target.port}
ExecStart=${layout.siteExec}
Restart=on-failure
RestartSec=2
# The site's sandbox: it binds its own port and no other (not another target's, not the webhook's),
# talks to loopback and the addresses in layout.siteAllowedAddresses only, and has bounded resources.
${teamCodeSandbox().join('\n')}
SocketBindAllow=tcp:${target.port}
SocketBindDeny=any
IPAddressDeny=any
IPAddressAllow=localhost${layout.siteAllowedAddresses.length ? ` ${layout.siteAllowedAddresses.join(' ')}` : ''}
MemoryMax=${layout.siteMemoryMax}
TasksMax=${layout.siteTasksMax}
CPUQuota=${layout.siteCpuQuota}

[Install]
WantedBy=multi-user.target
`;
}

/** sudoers drop-in: the service user may run `systemctl restart <unit>` for the site units only. */
export function renderSudoers(targets: readonly Target[], layout: Pick<HostLayout, 'user'>, systemctl = '/usr/bin/systemctl'): string {
  const commands = targets.map((t) => `${systemctl} restart ${serviceNameOf(t)}`);
  return `# Rendered by \`npm run host -- systemd\`. Install as /etc/sudoers.d/webhook-deploy (mode 440).
# ${layout.user} may restart exactly the site units, nothing else (no arguments beyond these).
Cmnd_Alias SITE_RESTARTS = ${commands.join(', \\\n    ')}
${layout.user} ALL=(root) NOPASSWD: SITE_RESTARTS
`;
}

/** polkit alternative (no sudo): RESTART_COMMAND="systemctl restart" then works for these units. */
export function renderPolkitRule(targets: readonly Target[], layout: Pick<HostLayout, 'user'>): string {
  const units = targets.map((t) => `${serviceNameOf(t)}.service`);
  return `// Rendered by \`npm run host -- systemd\`. Install as /etc/polkit-1/rules.d/50-webhook-deploy.rules.
// ${layout.user} may restart exactly the site units, nothing else.
polkit.addRule(function (action, subject) {
  var units = ${JSON.stringify(units)};
  if (action.id === "org.freedesktop.systemd1.manage-units" &&
      subject.user === ${JSON.stringify(layout.user)} &&
      action.lookup("verb") === "restart" &&
      units.indexOf(action.lookup("unit")) >= 0) {
    return polkit.Result.YES;
  }
  return polkit.Result.NOT_HANDLED;
});
`;
}

/** Every file of the systemd rendering, by file name. */
export function renderSystemdFiles(targets: readonly Target[], layout: HostLayout): Record<string, string> {
  return {
    'webhook-server.service': renderWebhookUnit(targets, layout),
    ...Object.fromEntries(targets.map((t) => [`${serviceNameOf(t)}.service`, renderSiteUnit(t, layout)])),
    'webhook-deploy.sudoers': renderSudoers(targets, layout),
    '50-webhook-deploy.rules': renderPolkitRule(targets, layout),
  };
}
