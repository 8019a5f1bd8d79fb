import { z } from 'zod';
import { loadYamlFile } from './config.js';

/**
 * Deploy targets (config/targets.yaml): one per branch site. Shared by the webhook server (routing,
 * secrets, deploy directories), the host renderers (systemd units, Caddy) and the Pulumi program.
 *
 * - key: the branch for exact targets (main, develop) or the branch family (feature/team-de1).
 * - provider: `gitlab` (X-Gitlab-Token) or `github` (X-Hub-Signature-256; Gitea and Forgejo too).
 *   The seed calls them A and B; both spellings are accepted.
 * - secret: the NAME of the environment variable that holds the shared secret, never the secret.
 * - matchPattern: `exact` (the branch equals key) or `prefix` (the branch is `<key>/` followed by at
 *   least one more character, so feature/team-de1/x matches team de1 but feature/team-de10/x does not).
 */
export const TargetSchema = z
  .object({
    key: z.string().regex(/^[a-z0-9][a-z0-9._/-]*$/i, 'a branch name or branch family of letters, digits, . _ / -'),
    domain: z.string().min(1).regex(/^[a-z0-9.-]+$/i, 'a host name'),
    deployPath: z.string().regex(/^[a-z0-9][a-z0-9._-]*$/i, 'a single directory name under DEPLOY_ROOT'),
    port: z.number().int().min(1024).max(65535),
    repo: z.string().min(1),
    secret: z.string().regex(/^[A-Z][A-Z0-9_]*$/, 'the name of an environment variable, e.g. SECRET_MAIN'),
    provider: z
      .enum(['gitlab', 'github', 'A', 'B'])
      .transform((p) => (p === 'A' ? 'gitlab' : p === 'B' ? 'github' : p)),
    matchPattern: z.enum(['exact', 'prefix']),
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
  });

export function loadTargets(path: string): Target[] {
  return loadYamlFile(path, TargetsFileSchema).targets;
}

/** The per-branch systemd service: `astro-` plus the key with `/` as `-` (feature/team-de1 → astro-feature-team-de1). */
export function serviceNameOf(target: Pick<Target, 'key'>): string {
  return `astro-${target.key.replace(/\//g, '-')}`;
}
