import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { ConfigError, parseEnv, runMain } from '../../services/shared/config.js';
import { createLogger } from '../../services/shared/logger.js';
import { Builder } from './builder.js';
import { spoolPaths } from './spool.js';

/**
 * Entry point of a target's builder container (builder.ts). It starts as root with only the
 * capabilities a deploy needs (switching to the build user, owning and sealing releases, ending the
 * build user's processes), creates the target's two users with the uids the stack gives them, hands
 * the control socket's directory to the site user (0700: the build user cannot reach it) and the
 * spool to the webhook's user, then takes requests.
 *
 * `main.js --health`: exits 0 while the builder's heartbeat is fresh (the container's health check).
 * Exit codes: 0 stopped by a signal, 1 failure, 2 bad environment.
 */
const uid = z.coerce.number().int().min(1000).max(60_000);
const Env = z.object({
  BUILDER_TARGET: z.string().min(1),
  BUILDER_MATCH: z.enum(['exact', 'prefix']),
  BUILDER_REPO: z.string().min(1),
  BUILDER_PORT: z.coerce.number().int().min(1024).max(65535),
  BUILDER_SERVICE: z.string().regex(/^astro-[a-z0-9._-]+$/i),
  BUILDER_SITE_DIR: z.string().optional(),
  BUILDER_DEPLOY_DIR: z.string().startsWith('/'),
  BUILDER_SPOOL: z.string().startsWith('/'),
  /** The webhook's user (it writes requests and its logs into the spool). */
  BUILDER_SPOOL_OWNER: z.string().regex(/^[a-z_][a-z0-9_-]*$/).default('node'),
  BUILDER_CONTROL_DIR: z.string().startsWith('/'),
  BUILDER_SITE_USER: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/),
  BUILDER_SITE_UID: uid,
  BUILDER_BUILD_USER: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/),
  BUILDER_BUILD_UID: uid,
  DEPLOY_SCRIPT: z.string().startsWith('/'),
  RESTART_COMMAND: z.string().min(1).default('/usr/local/bin/sites-restart'),
  BUILD_TIMEOUT_SECONDS: z.coerce.number().int().positive().default(840),
  BUILD_DISK_LIMIT_MB: z.coerce.number().int().positive().default(4096),
  /** The egress proxy (http://egress:3128) and the credential that lets the script, not the build, reach the git host. */
  EGRESS_PROXY_URL: z.string().url().optional(),
  EGRESS_GIT_TOKEN: z.string().min(16).optional(),
  NPM_REGISTRY: z.string().url().optional(),
  KEEP_RELEASES: z.string().regex(/^[1-9]\d*$/).optional(),
  HEALTH_TIMEOUT_SECONDS: z.string().regex(/^[1-9]\d*$/).optional(),
  HEALTH_PATH: z.string().regex(/^\/[\x21-\x7e]*$/).optional(),
  LOG_LEVEL: z.string().default('info'),
});

type BuilderEnv = z.infer<typeof Env>;

const run = (command: string, args: string[]) => {
  const result = spawnSync(command, args, { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')}: ${(result.stderr || result.error?.message || '').trim()}`);
};
const lookup = (database: 'passwd' | 'group', key: string | number): string[] | undefined => {
  const result = spawnSync('getent', [database, String(key)], { encoding: 'utf8' });
  return result.status === 0 ? result.stdout.trim().split(':') : undefined;
};

/** A group and a user of that name with exactly these ids; an existing one with other ids is refused. */
function ensureUser(name: string, id: number, extraGroup?: string): void {
  const group = lookup('group', name);
  if (!group) {
    const taken = lookup('group', id);
    if (taken) throw new ConfigError(`gid ${id} for ${name} is taken by group ${taken[0]}`);
    run('groupadd', ['--gid', String(id), name]);
  } else if (Number(group[2]) !== id) throw new ConfigError(`group ${name} exists with gid ${group[2]}, not ${id}`);
  const user = lookup('passwd', name);
  if (!user) {
    const taken = lookup('passwd', id);
    if (taken) throw new ConfigError(`uid ${id} for ${name} is taken by user ${taken[0]}`);
    run('useradd', ['--uid', String(id), '--gid', String(id), ...(extraGroup ? ['--groups', extraGroup] : []), '--no-create-home', '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin', name]);
  } else if (Number(user[2]) !== id) throw new ConfigError(`user ${name} exists with uid ${user[2]}, not ${id}`);
  else if (extraGroup) run('usermod', ['--append', '--groups', extraGroup, name]);
}

function idsOf(user: string): { uid: number; gid: number } {
  try {
    return { uid: Number(execFileSync('id', ['-u', user], { encoding: 'utf8' }).trim()), gid: Number(execFileSync('id', ['-g', user], { encoding: 'utf8' }).trim()) };
  } catch {
    throw new ConfigError(`BUILDER_SPOOL_OWNER: no user ${user}`);
  }
}

/** The deploy script's environment: fixed here, never taken from a request. */
function scriptEnv(env: BuilderEnv): Record<string, string> {
  const out: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
    HOME: process.env.HOME ?? '/root',
    LANG: 'C.UTF-8',
    TZ: 'UTC',
    BUILD_USER: env.BUILDER_BUILD_USER,
    SITE_USER: env.BUILDER_SITE_USER,
    RESTART_COMMAND: env.RESTART_COMMAND,
    ...(env.KEEP_RELEASES ? { KEEP_RELEASES: env.KEEP_RELEASES } : {}),
    ...(env.HEALTH_TIMEOUT_SECONDS ? { HEALTH_TIMEOUT_SECONDS: env.HEALTH_TIMEOUT_SECONDS } : {}),
    ...(env.HEALTH_PATH ? { HEALTH_PATH: env.HEALTH_PATH } : {}),
  };
  const buildPass: string[] = [];
  if (env.EGRESS_PROXY_URL) {
    // The script's git fetch (as root) may reach the git host: the proxy lets it through with this credential.
    const withCredential = new URL(env.EGRESS_PROXY_URL);
    if (env.EGRESS_GIT_TOKEN) {
      withCredential.username = 'git';
      withCredential.password = env.EGRESS_GIT_TOKEN;
    }
    out.https_proxy = withCredential.toString();
    out.http_proxy = withCredential.toString();
    // The build (npm) gets the proxy without the credential: the package registry only.
    out.npm_config_https_proxy = env.EGRESS_PROXY_URL;
    out.npm_config_proxy = env.EGRESS_PROXY_URL;
    buildPass.push('npm_config_https_proxy', 'npm_config_proxy');
  }
  if (env.NPM_REGISTRY) {
    out.npm_config_registry = env.NPM_REGISTRY;
    buildPass.push('npm_config_registry');
  }
  if (buildPass.length) out.BUILD_ENV_ALLOW = buildPass.join(' ');
  return out;
}

function health(env: NodeJS.ProcessEnv): number {
  const spool = env.BUILDER_SPOOL;
  if (!spool) return 1;
  const beat = statSync(spoolPaths(spool).heartbeat, { throwIfNoEntry: false });
  return beat && Date.now() - beat.mtimeMs < 60_000 ? 0 : 1;
}

if (process.argv.includes('--health')) process.exit(health(process.env));

runMain(async () => {
  const env = parseEnv(Env);
  const logger = createLogger('builder', { level: env.LOG_LEVEL });
  if (process.getuid?.() !== 0) throw new ConfigError('the builder must start as root: it runs every build as the target\'s build user');
  ensureUser(env.BUILDER_SITE_USER, env.BUILDER_SITE_UID);
  ensureUser(env.BUILDER_BUILD_USER, env.BUILDER_BUILD_UID, env.BUILDER_SITE_USER);
  // The site container (the site user, no capabilities) creates its control socket here; the build
  // user, though in the site's group, cannot enter.
  mkdirSync(env.BUILDER_CONTROL_DIR, { recursive: true });
  chownSync(env.BUILDER_CONTROL_DIR, env.BUILDER_SITE_UID, env.BUILDER_SITE_UID);
  chmodSync(env.BUILDER_CONTROL_DIR, 0o700);
  const builder = new Builder({
    target: {
      key: env.BUILDER_TARGET,
      matchPattern: env.BUILDER_MATCH,
      repo: env.BUILDER_REPO,
      port: env.BUILDER_PORT,
      service: env.BUILDER_SERVICE,
      ...(env.BUILDER_SITE_DIR ? { siteDir: env.BUILDER_SITE_DIR } : {}),
    },
    spool: env.BUILDER_SPOOL,
    deployDir: env.BUILDER_DEPLOY_DIR,
    deployScript: env.DEPLOY_SCRIPT,
    controlSocket: join(env.BUILDER_CONTROL_DIR, 'control.sock'),
    scriptEnv: scriptEnv(env),
    timeoutMs: env.BUILD_TIMEOUT_SECONDS * 1000,
    diskLimitBytes: env.BUILD_DISK_LIMIT_MB * 1024 * 1024,
    buildUid: env.BUILDER_BUILD_UID,
    tmpDir: '/tmp',
    spoolOwner: idsOf(env.BUILDER_SPOOL_OWNER),
    logger,
  });
  builder.start();
  logger.info({ target: env.BUILDER_TARGET, spool: env.BUILDER_SPOOL }, 'builder ready');
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', () => resolve());
    process.once('SIGINT', () => resolve());
  });
  await builder.stop();
});
