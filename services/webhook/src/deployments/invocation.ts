/**
 * The one place that says how the deploy and rollback scripts are called: their arguments, their
 * environment, and where a deploy's log goes. The webhook server (through the launcher plan) and
 * the host CLI (`npm run host -- deploy|rollback`) both call these.
 *
 * Environment: built from an allow-list, never copied from the caller. A build runs code from a
 * pushed branch, so nothing secret may reach the script: no webhook secret, no admin token, no
 * path to the secrets file. The script narrows it once more for the build itself.
 */
import { join } from 'node:path';
import type { ResolvedTarget } from '../../../shared/targets.js';

export interface DeploySettings {
  /** scripts/deploy-branch.sh (DEPLOY_SCRIPT). */
  script: string;
  /** scripts/host/rollback.sh. */
  rollbackScript: string;
  /**
   * users: each build runs as the target's build user and the site reads only its live release
   * (the script runs as root for that); none: everything as the launcher's user (development).
   */
  isolation: 'users' | 'none';
  /** The script's environment for every target (see scriptEnvironment). */
  env: Readonly<Record<string, string>>;
}

/** Taken from the server's environment when set: what any process needs to run at all. */
const BASE_VARIABLES = ['PATH', 'LANG', 'LC_ALL', 'TZ', 'HOME', 'TMPDIR', 'npm_config_cache', 'npm_config_registry'] as const;

/**
 * The deploy script's own settings (see the header of scripts/deploy-branch.sh), the build sandbox's
 * among them (scripts/host/lib/build-sandbox.sh; DEPLOY_BUILD_SANDBOX itself is checked by the
 * server's config, which refuses `none` in production).
 */
export const SCRIPT_VARIABLES = [
  'RESTART_COMMAND',
  'KEEP_RELEASES',
  'HEALTH_TIMEOUT_SECONDS',
  'HEALTH_PATH',
  'LOCK_WAIT_SECONDS',
  'BUILD_ENV_ALLOW',
  'DEPLOY_BUILD_SANDBOX',
  'DEPLOY_BUILD_TIMEOUT_SECONDS',
  'DEPLOY_BUILD_MEMORY_MAX',
  'DEPLOY_BUILD_TASKS_MAX',
  'DEPLOY_BUILD_CPU_QUOTA',
  'DEPLOY_BUILD_FILE_SIZE_MAX',
  'DEPLOY_BUILD_DISK_MAX',
  'DEPLOY_BUILD_PROXY_SOCKET',
  'DEPLOY_BUILD_NETNS',
  'DEPLOY_BUILD_ALLOWED_ADDRESSES',
] as const;

/**
 * The script environment: the base and script variables, plus the operator's extra pass-through
 * names (DEPLOY_ENV_PASS), taken from `env`. Anything else, secrets included, stays behind.
 */
export function scriptEnvironment(env: NodeJS.ProcessEnv, passThrough: readonly string[] = []): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of [...BASE_VARIABLES, ...SCRIPT_VARIABLES, ...passThrough]) {
    const value = env[name];
    if (value !== undefined && value !== '') out[name] = value;
  }
  return out;
}

/** Placeholders of the argument template that the launcher fills per deploy. */
export const BRANCH_PLACEHOLDER = '{branch}';
export const COMMIT_PLACEHOLDER = '{commit}';

/** deploy-branch.sh <branch> <deployDir> <port> <repoUrl> [<commit>]; the repository always from config. */
export function deployArgs(target: ResolvedTarget, branch: string, commit?: string): string[] {
  return [branch, target.deployDir, String(target.port), target.repo, ...(commit ? [commit] : [])];
}

/**
 * The script environment of one target: the common one plus its service, its site folder
 * (SITE_DIR, from the target's siteDir only) and (isolated) users.
 */
export function deployEnv(settings: Pick<DeploySettings, 'env' | 'isolation'>, target: ResolvedTarget): Record<string, string> {
  return {
    ...settings.env,
    SERVICE_NAME: target.serviceName,
    ...(target.siteDir ? { SITE_DIR: target.siteDir } : {}),
    ...(settings.isolation === 'users' ? { BUILD_USER: target.buildUser, SITE_USER: target.siteUser } : {}),
  };
}

/** `<deployDir>/logs/deploy-<UTC stamp>-<id>.log`: the stamp lets the script prune it with its release. */
export function deployLogPath(target: Pick<ResolvedTarget, 'deployDir'>, deploymentId: string, at: Date): string {
  const stamp = at.toISOString().replace(/\D/g, '').slice(0, 14);
  return join(target.deployDir, 'logs', `deploy-${stamp}-${deploymentId}.log`);
}

export interface Invocation {
  script: string;
  args: string[];
  env: Record<string, string>;
}

/** A manual deploy (no commit: the branch head) or a pushed one (exactly that commit). */
export function deployInvocation(settings: DeploySettings, target: ResolvedTarget, branch: string, commit?: string): Invocation {
  return { script: settings.script, args: deployArgs(target, branch, commit), env: deployEnv(settings, target) };
}

/** rollback.sh <deployDir> <port> <service> [<release>]. */
export function rollbackInvocation(settings: DeploySettings, target: ResolvedTarget, release?: string): Invocation {
  const { SITE_USER, ...env } = deployEnv(settings, target);
  return {
    script: settings.rollbackScript,
    args: [target.deployDir, String(target.port), target.serviceName, ...(release ? [release] : [])],
    env: { ...env, ...(SITE_USER ? { SITE_USER } : {}) },
  };
}

/** What the launcher may run, fixed at its start: per target the argument template and environment. */
export interface LauncherPlan {
  type: 'plan';
  script: string;
  targets: Record<string, { args: string[]; env: Record<string, string>; deployDir: string; logDir: string }>;
}

export function launcherPlan(settings: DeploySettings, targets: readonly ResolvedTarget[]): LauncherPlan {
  return {
    type: 'plan',
    script: settings.script,
    targets: Object.fromEntries(
      targets.map((t) => [
        t.key,
        { args: deployArgs(t, BRANCH_PLACEHOLDER, COMMIT_PLACEHOLDER), env: deployEnv(settings, t), deployDir: t.deployDir, logDir: join(t.deployDir, 'logs') },
      ]),
    ),
  };
}
