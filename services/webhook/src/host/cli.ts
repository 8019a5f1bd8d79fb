/**
 * Host integration CLI (`npm run host -- <command>`): secrets file, systemd units and privilege
 * rules, Caddyfile, and manual deploy / rollback of a target.
 *
 *   secrets init [--file F] [--force]     a new secrets file: 32 random bytes (hex) per target, mode 600
 *   secrets add [--file F]                add secrets for targets that have none yet
 *   secrets rotate <NAME|key> [--file F]  new current secret, old one kept as <NAME>_PREVIOUS
 *   secrets finish <NAME|key> [--file F]  drop <NAME>_PREVIOUS once the Git host sends the new secret
 *   users [--apply] [--webhook-user U]    the Unix users of privilege separation (printed, or created as root)
 *   systemd --out DIR [layout options]    webhook-server.service, astro-*.service, sudoers, polkit rule;
 *                                         --site-allow A,B (addresses a site may reach besides loopback),
 *                                         --site-memory-max 512M, --site-tasks-max 64, --site-cpu-quota 100%
 *   caddy [--out F] [--webhook-domain D] [--email E]
 *   deploy <key> [<branch>]               run scripts/deploy-branch.sh for a target (the branch head)
 *   rollback <key> [<release>]            put the previous (or the named) release back live; the only
 *                                         way back to an older commit (pushes never roll back)
 *
 * Targets come from TARGETS_FILE (default config/targets.yaml), the secrets file from --file or
 * WEBHOOK_SECRETS_FILE (default /etc/webhook-server/secrets.env), deploy directories from
 * DEPLOY_ROOT (default /srv/sites). Deploy and rollback isolate builds and sites like the server
 * does when DEPLOY_ISOLATION=users (needs root), and pass only the variables invocation.ts allows.
 * Exit codes: 0 ok, 1 failure, 2 usage; deploy and rollback pass on the script's exit code.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ConfigError } from '../../../shared/config.js';
import { loadTargets, resolveTarget, type ResolvedTarget } from '../../../shared/targets.js';
import { deployInvocation, rollbackInvocation, scriptEnvironment, type DeploySettings, type Invocation } from '../deployments/invocation.js';
import {
  finishRotation,
  generateSecrets,
  newSecret,
  previousSecretName,
  readSecretsFile,
  rotateSecret,
  writeSecretsFile,
} from '../secrets.js';
import { renderCaddyfile } from './render/caddy.js';
import { defaultLayout, renderSystemdFiles, type HostLayout } from './render/systemd.js';
import { ensureUsers, useraddArgs, usersOf } from './users.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');

class UsageError extends Error {}

function usage(message: string): never {
  throw new UsageError(message);
}

const deployRootOf = (env: NodeJS.ProcessEnv): string => resolve(env.DEPLOY_ROOT ?? '/srv/sites');

function targetsFrom(env: NodeJS.ProcessEnv): ResolvedTarget[] {
  const targets = loadTargets(env.TARGETS_FILE ? resolve(env.TARGETS_FILE) : join(repoRoot, 'config/targets.yaml'));
  return targets.map((t) => resolveTarget(t, deployRootOf(env)));
}

function targetNamed(targets: ResolvedTarget[], key: string | undefined): ResolvedTarget {
  const target = targets.find((t) => t.key === key);
  if (!target) usage(`unknown target ${key ?? '(none)'}; targets: ${targets.map((t) => t.key).join(', ')}`);
  return target;
}

/** A secret variable name given directly or through its target's key. */
function secretNameOf(targets: ResolvedTarget[], nameOrKey: string | undefined): string {
  const target = targets.find((t) => t.secret === nameOrKey || t.key === nameOrKey);
  if (!target) usage(`unknown secret or target ${nameOrKey ?? '(none)'}`);
  return target.secret;
}

function secrets(args: string[], env: NodeJS.ProcessEnv, out: (line: string) => void): number {
  const { values, positionals } = parseArgs({
    args,
    options: { file: { type: 'string' }, force: { type: 'boolean', default: false } },
    allowPositionals: true,
  });
  const [action, name] = positionals;
  const file = resolve(values.file ?? env.WEBHOOK_SECRETS_FILE ?? '/etc/webhook-server/secrets.env');
  const targets = targetsFrom(env);
  switch (action) {
    case 'init': {
      if (existsSync(file) && !values.force) usage(`${file} exists; use --force to replace every secret`);
      mkdirSync(dirname(file), { recursive: true });
      writeSecretsFile(file, generateSecrets(targets));
      out(`wrote ${targets.length} secrets to ${file} (mode 600); put each into its Git host's webhook settings`);
      return 0;
    }
    case 'add': {
      const current = readSecretsFile(file);
      const missing = targets.filter((t) => !current[t.secret]);
      writeSecretsFile(file, { ...current, ...Object.fromEntries(missing.map((t) => [t.secret, newSecret()])) });
      out(missing.length ? `added ${missing.map((t) => t.secret).join(', ')}` : 'every target already has a secret');
      return 0;
    }
    case 'rotate': {
      const secretName = secretNameOf(targets, name);
      writeSecretsFile(file, rotateSecret(readSecretsFile(file), secretName));
      out(`${secretName} rotated; ${previousSecretName(secretName)} is still accepted. Reload the server (systemctl reload webhook-server),`);
      out(`set the new secret in the Git host, then run: npm run host -- secrets finish ${secretName}`);
      return 0;
    }
    case 'finish': {
      const secretName = secretNameOf(targets, name);
      writeSecretsFile(file, finishRotation(readSecretsFile(file), secretName));
      out(`${previousSecretName(secretName)} removed; reload the server (systemctl reload webhook-server)`);
      return 0;
    }
    default:
      usage('secrets init|add|rotate|finish');
  }
}

function systemd(args: string[], env: NodeJS.ProcessEnv, out: (line: string) => void): number {
  const { values } = parseArgs({
    args,
    options: {
      out: { type: 'string' },
      user: { type: 'string' },
      group: { type: 'string' },
      'app-dir': { type: 'string' },
      node: { type: 'string' },
      'deploy-root': { type: 'string' },
      'site-exec': { type: 'string' },
      'secrets-file': { type: 'string' },
      'shutdown-grace': { type: 'string' },
      'site-allow': { type: 'string' },
      'site-memory-max': { type: 'string' },
      'site-tasks-max': { type: 'string' },
      'site-cpu-quota': { type: 'string' },
    },
  });
  if (!values.out) usage('systemd --out DIR');
  const layout: HostLayout = {
    ...defaultLayout,
    user: values.user ?? defaultLayout.user,
    group: values.group ?? values.user ?? defaultLayout.group,
    appDir: values['app-dir'] ?? defaultLayout.appDir,
    nodePath: values.node ?? defaultLayout.nodePath,
    deployRoot: values['deploy-root'] ?? env.DEPLOY_ROOT ?? defaultLayout.deployRoot,
    siteExec: values['site-exec'] ?? defaultLayout.siteExec,
    secretsFile: values['secrets-file'] ?? defaultLayout.secretsFile,
    shutdownGraceSeconds: values['shutdown-grace'] ? Number(values['shutdown-grace']) : defaultLayout.shutdownGraceSeconds,
    siteAllowedAddresses: values['site-allow'] ? values['site-allow'].split(',').map((a) => a.trim()) : defaultLayout.siteAllowedAddresses,
    siteMemoryMax: values['site-memory-max'] ?? defaultLayout.siteMemoryMax,
    siteTasksMax: values['site-tasks-max'] ? Number(values['site-tasks-max']) : defaultLayout.siteTasksMax,
    siteCpuQuota: values['site-cpu-quota'] ?? defaultLayout.siteCpuQuota,
  };
  // What a site may reach besides loopback: IPv4 or IPv6 addresses or CIDR blocks only.
  for (const address of layout.siteAllowedAddresses) {
    if (!/^[0-9a-fA-F:.]{2,45}(\/\d{1,3})?$/.test(address)) usage(`--site-allow takes addresses or CIDR blocks, comma-separated: ${address}`);
  }
  if (!/^\d+[KMG]$/.test(layout.siteMemoryMax)) usage('--site-memory-max takes a size such as 512M');
  if (!Number.isInteger(layout.siteTasksMax) || layout.siteTasksMax <= 0) usage('--site-tasks-max takes a number of tasks');
  if (!/^\d{1,4}%$/.test(layout.siteCpuQuota)) usage('--site-cpu-quota takes a percentage such as 100%');
  for (const [name, path] of Object.entries({ user: layout.user, group: layout.group })) {
    if (!/^[a-z_][a-z0-9_-]*$/.test(path)) usage(`--${name} must be a plain user or group name`);
  }
  for (const path of [layout.appDir, layout.nodePath, layout.deployRoot, layout.secretsFile]) {
    if (!/^\/[\w./-]*$/.test(path)) usage(`not an absolute path of plain characters: ${path}`);
  }
  if (!Number.isInteger(layout.shutdownGraceSeconds) || layout.shutdownGraceSeconds <= 0) usage('--shutdown-grace takes seconds');
  mkdirSync(values.out, { recursive: true });
  for (const [name, content] of Object.entries(renderSystemdFiles(targetsFrom(env), layout))) {
    writeFileSync(join(values.out, name), content);
    out(join(values.out, name));
  }
  return 0;
}

function caddy(args: string[], env: NodeJS.ProcessEnv, out: (line: string) => void): number {
  const { values } = parseArgs({
    args,
    options: { out: { type: 'string' }, 'webhook-domain': { type: 'string' }, email: { type: 'string' } },
  });
  const webhookDomain = values['webhook-domain'];
  if (webhookDomain !== undefined && !/^[a-z0-9.-]+$/i.test(webhookDomain)) usage('--webhook-domain must be a host name');
  if (values.email !== undefined && !/^[^\s{}]+@[^\s{}]+$/.test(values.email)) usage('--email must be an e-mail address');
  const text = renderCaddyfile(targetsFrom(env), { webhookDomain, email: values.email });
  if (values.out) {
    writeFileSync(values.out, text);
    out(values.out);
  } else out(text);
  return 0;
}

function runScript({ script, args, env }: Invocation): number {
  const result = spawnSync(script, args, { stdio: 'inherit', env });
  if (result.error) throw result.error;
  return result.status ?? 1;
}

function deploySettings(env: NodeJS.ProcessEnv): DeploySettings {
  const isolation = env.DEPLOY_ISOLATION ?? 'none';
  if (isolation !== 'users' && isolation !== 'none') usage('DEPLOY_ISOLATION is users or none');
  return {
    script: env.DEPLOY_SCRIPT ? resolve(env.DEPLOY_SCRIPT) : join(repoRoot, 'scripts/deploy-branch.sh'),
    rollbackScript: join(repoRoot, 'scripts/host/rollback.sh'),
    isolation,
    env: scriptEnvironment(env, env.DEPLOY_ENV_PASS?.split(/[ ,]+/).filter(Boolean)),
  };
}

/** A manual deploy: the branch head (no commit), so it may go anywhere the operator wants. */
function deploy(args: string[], env: NodeJS.ProcessEnv): number {
  const target = targetNamed(targetsFrom(env), args[0]);
  return runScript(deployInvocation(deploySettings(env), target, args[1] ?? target.key));
}

function rollback(args: string[], env: NodeJS.ProcessEnv): number {
  const target = targetNamed(targetsFrom(env), args[0]);
  return runScript(rollbackInvocation(deploySettings(env), target, args[1]));
}

function users(args: string[], env: NodeJS.ProcessEnv, out: (line: string) => void): number {
  const { values } = parseArgs({ args, options: { apply: { type: 'boolean', default: false }, 'webhook-user': { type: 'string' } } });
  const wanted = usersOf(targetsFrom(env), values['webhook-user']);
  if (!values.apply) {
    for (const user of wanted) out(`useradd ${useraddArgs(user).join(' ')}`);
    return 0;
  }
  const created = ensureUsers(wanted);
  out(created.length ? `created ${created.join(', ')}` : 'every user exists');
  return 0;
}

export function runHostCli(argv: string[], env: NodeJS.ProcessEnv = process.env, out: (line: string) => void = console.log): number {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'secrets':
        return secrets(rest, env, out);
      case 'systemd':
        return systemd(rest, env, out);
      case 'caddy':
        return caddy(rest, env, out);
      case 'users':
        return users(rest, env, out);
      case 'deploy':
        return deploy(rest, env);
      case 'rollback':
        return rollback(rest, env);
      default:
        usage('usage: host secrets|users|systemd|caddy|deploy|rollback … (see services/webhook/src/host/cli.ts)');
    }
  } catch (error) {
    if (error instanceof UsageError || (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      console.error((error as Error).message);
      return 2;
    }
    if (error instanceof ConfigError) {
      console.error(`error: ${error.message}`);
      return 1;
    }
    throw error;
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = runHostCli(process.argv.slice(2));
}
