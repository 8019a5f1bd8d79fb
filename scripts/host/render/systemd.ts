/**
 * systemd units for the host: `webhook-server.service` and one `astro-<key>.service` per target,
 * plus the privilege rule (sudoers or polkit) that lets the service user restart exactly those
 * site units and nothing else.
 */
import { join } from 'node:path';
import { serviceNameOf, type Target } from '../../../services/shared/targets.js';

export interface HostLayout {
  /** The system user running the webhook server, the deploys and the sites. */
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
};

export function renderWebhookUnit(targets: readonly Target[], layout: HostLayout): string {
  return `# Rendered by \`npm run host -- systemd\`. Deployment webhook server (POST /webhook, port ${layout.webhookPort}).
[Unit]
Description=Deployment webhook server
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User=${layout.user}
Group=${layout.group}
WorkingDirectory=${layout.appDir}
EnvironmentFile=-${layout.envFile}
Environment=NODE_ENV=production
Environment=WEBHOOK_PORT=${layout.webhookPort}
Environment=WEBHOOK_SECRETS_FILE=${layout.secretsFile}
Environment=WEBHOOK_STATE_DIR=${layout.stateDir}
Environment=DEPLOY_ROOT=${layout.deployRoot}
Environment=DEPLOY_SCRIPT=${join(layout.appDir, 'scripts/deploy-branch.sh')}
Environment=WEBHOOK_SHUTDOWN_GRACE_SECONDS=${layout.shutdownGraceSeconds}
Environment=npm_config_cache=/var/cache/webhook-server/npm
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

export function renderSiteUnit(target: Target, layout: HostLayout): string {
  const deployDir = join(layout.deployRoot, target.deployPath);
  return `# Rendered by \`npm run host -- systemd\`. Site of ${target.key} (${target.domain}).
[Unit]
Description=Site ${target.key} on port ${target.port}
After=network.target

[Service]
Type=simple
User=${layout.user}
Group=${layout.group}
# live is a symlink switched by each deploy; a restart resolves it again.
WorkingDirectory=${join(deployDir, 'live')}
Environment=NODE_ENV=production
Environment=HOST=127.0.0.1
Environment=PORT=${target.port}
ExecStart=${layout.siteExec}
Restart=on-failure
RestartSec=2
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ReadWritePaths=${deployDir}

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
