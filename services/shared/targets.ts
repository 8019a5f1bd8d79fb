import { join } from 'node:path';
import { z } from 'zod';
import { loadYamlFile } from './config.js';

/**
 * Deploy targets (config/targets.yaml): one per branch site. Shared by the webhook server (routing,
 * secrets, deploy directories), the host renderers (systemd units, Caddy, users) and the Pulumi program.
 *
 * - key: the branch for exact targets (main, develop) or the branch family (feature/team-de1).
 * - provider: `gitlab` (X-Gitlab-Token) or `github` (X-Hub-Signature-256; Gitea and Forgejo too).
 *   The seed calls them A and B; both spellings are accepted.
 * - secret: the NAME of the environment variable that holds the shared secret, never the secret.
 * - matchPattern: `exact` (the branch equals key) or `prefix` (the branch is `<key>/` followed by at
 *   least one more character, so feature/team-de1/x matches team de1 but feature/team-de10/x does not).
 * - siteDir (optional): the site's folder inside the repository (services/web for the platform's own
 *   web app), passed to the deploy script as SITE_DIR; the repository root when left out.
 * - serviceName, buildUser, siteUser (optional): the site's unit / supervisor name and the Unix
 *   users a build and the running site use; derived from key and deployPath when left out (see
 *   resolveTarget).
 */
const unixName = z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/, 'a Unix user name (lower case, at most 32 characters)');

/**
 * A folder inside the clone: relative, segments of the characters the deploy script accepts, and no
 * `.` or `..` segment, so it can never name a place outside the release that root then writes to.
 */
const siteDir = z
  .string()
  .regex(/^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/, 'a relative folder inside the repository, e.g. services/web')
  .refine((dir) => dir.split('/').every((part) => part !== '.' && part !== '..'), 'a folder inside the repository: no . or .. segment');

export const TargetSchema = z
  .object({
    key: z.string().regex(/^[a-z0-9][a-z0-9._/-]*$/i, 'a branch name or branch family of letters, digits, . _ / -'),
    domain: z.string().min(1).regex(/^[a-z0-9.-]+$/i, 'a host name'),
    deployPath: z.string().regex(/^[a-z0-9][a-z0-9._-]*$/i, 'a single directory name under DEPLOY_ROOT'),
    port: z.number().int().min(1024).max(65535),
    repo: z.string().min(1),
    siteDir: siteDir.optional(),
    secret: z.string().regex(/^[A-Z][A-Z0-9_]*$/, 'the name of an environment variable, e.g. SECRET_MAIN'),
    provider: z
      .enum(['gitlab', 'github', 'A', 'B'])
      .transform((p) => (p === 'A' ? 'gitlab' : p === 'B' ? 'github' : p)),
    matchPattern: z.enum(['exact', 'prefix']),
    serviceName: z.string().regex(/^astro-[a-z0-9._-]+$/i, 'astro- followed by letters, digits, . _ -').optional(),
    buildUser: unixName.optional(),
    siteUser: unixName.optional(),
  })
  .strict();

export type Target = z.output<typeof TargetSchema>;

export const TargetsFileSchema = z
  .object({ targets: z.array(TargetSchema).min(1) })
  .strict()
  .superRefine((file, ctx) => {
    for (const field of ['key', 'port', 'deployPath', 'domain'] as const) {
      const seen = new Set<unknown>();
      file.targets.forEach((t, i) => {
        if (seen.has(t[field])) ctx.addIssue({ code: 'custom', path: ['targets', i, field], message: `duplicate ${field} ${String(t[field])}` });
        seen.add(t[field]);
      });
    }
    // One Unix user for two targets (or for a build and a site) would let one read the other.
    const users = new Map<string, string>();
    file.targets.forEach((t, i) => {
      for (const [field, name] of [['buildUser', buildUserOf(t)], ['siteUser', siteUserOf(t)]] as const) {
        const owner = users.get(name);
        if (owner) ctx.addIssue({ code: 'custom', path: ['targets', i, field], message: `user ${name} is also ${owner}` });
        users.set(name, `${field} of ${t.key}`);
      }
    });
  });

/**
 * Targets whose pushes only the git host's branch permissions keep apart: a prefix target that shares
 * its repository with another target. A git host signs every push with every hook's secret of the
 * repository (one hook per team, each with its own secret), so whoever may push `<key>/…` to that
 * repository deploys to that target, whichever team they are in. One warning per such target, saying
 * what the git host must enforce (docs/webhook.md, "What the git host must enforce").
 */
export function sharedRepositoryWarnings(targets: readonly Pick<Target, 'key' | 'repo' | 'matchPattern'>[]): string[] {
  const byRepo = new Map<string, string[]>();
  for (const t of targets) byRepo.set(t.repo, [...(byRepo.get(t.repo) ?? []), t.key]);
  return targets
    .filter((t) => t.matchPattern === 'prefix' && byRepo.get(t.repo)!.length > 1)
    .map(
      (t) =>
        `${t.key} shares the repository ${t.repo} with ${byRepo
          .get(t.repo)!
          .filter((k) => k !== t.key)
          .join(', ')}: whoever may push ${t.key}/… there deploys to ${t.key}. Protect ${t.key}/* on the git host so that only its team may push it, or give the team a repository of its own`,
    );
}

export function loadTargets(path: string): Target[] {
  return loadYamlFile(path, TargetsFileSchema).targets;
}

/** The per-branch service: `astro-` plus the key with `/` as `-` (feature/team-de1 → astro-feature-team-de1). */
export function serviceNameOf(target: Pick<Target, 'key' | 'serviceName'>): string {
  return target.serviceName ?? `astro-${target.key.replace(/\//g, '-')}`;
}

/** Unix names are at most 32 characters; long deploy paths are cut (and must then be set explicitly if they collide). */
const userName = (prefix: string, deployPath: string): string => `${prefix}${deployPath.toLowerCase().replace(/[^a-z0-9_-]/g, '-')}`.slice(0, 32);

/** The user that runs this target's builds (npm ci, npm run build): `wb-<deployPath>`. */
export const buildUserOf = (target: Pick<Target, 'deployPath' | 'buildUser'>): string => target.buildUser ?? userName('wb-', target.deployPath);

/** The user that runs this target's site: `ws-<deployPath>`; its group is the target's group (see docs/webhook.md). */
export const siteUserOf = (target: Pick<Target, 'deployPath' | 'siteUser'>): string => target.siteUser ?? userName('ws-', target.deployPath);

/** A target with everything derived from configuration resolved: where it lives, what runs it. */
export interface ResolvedTarget extends Target {
  /** DEPLOY_ROOT + deployPath. */
  deployDir: string;
  serviceName: string;
  buildUser: string;
  siteUser: string;
}

export function resolveTarget(target: Target, deployRoot: string): ResolvedTarget {
  return {
    ...target,
    deployDir: join(deployRoot, target.deployPath),
    serviceName: serviceNameOf(target),
    buildUser: buildUserOf(target),
    siteUser: siteUserOf(target),
  };
}
