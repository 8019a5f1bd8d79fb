/**
 * Which target a pushed branch deploys to. Exact targets (main, develop) match their key only;
 * prefix targets (feature/team-de1) match `<key>/` followed by at least one more character, so
 * feature/team-de1, feature/team-de1/ and feature/team-de10/x do not match team de1.
 */
import type { Target } from '../../shared/targets.js';

const BRANCH_REF_PREFIX = 'refs/heads/';

/** The branch of a `refs/heads/<branch>` ref, or null for tags and other refs. */
export function branchOfRef(ref: string): string | null {
  return ref.startsWith(BRANCH_REF_PREFIX) && ref.length > BRANCH_REF_PREFIX.length ? ref.slice(BRANCH_REF_PREFIX.length) : null;
}

/**
 * Git's branch name rules (git check-ref-format --branch), checked before anything is queued so a
 * name the deploy script would refuse gets a 400 instead of a failed deploy. Shell metacharacters
 * are valid in branch names; they reach the script as one argv element and are never interpreted.
 */
export function isValidBranchName(branch: string): boolean {
  return (
    branch.length > 0 &&
    branch.length <= 255 &&
    ![...branch].some((c) => c.charCodeAt(0) <= 0x20 || c.charCodeAt(0) === 0x7f || '~^:?*[\\'.includes(c)) &&
    !branch.startsWith('-') &&
    !branch.startsWith('/') &&
    !branch.endsWith('/') &&
    !branch.endsWith('.') &&
    !branch.includes('..') &&
    !branch.includes('//') &&
    !branch.includes('@{') &&
    branch !== '@' &&
    !branch.split('/').some((part) => part.startsWith('.') || part.endsWith('.lock'))
  );
}

export function targetMatches(target: Pick<Target, 'key' | 'matchPattern'>, branch: string): boolean {
  if (target.matchPattern === 'exact') return branch === target.key;
  const prefix = `${target.key}/`;
  return branch.startsWith(prefix) && branch.length > prefix.length;
}

/** The one target for a branch; keys never overlap in practice, the first match wins if they do. */
export function matchTarget<T extends Pick<Target, 'key' | 'matchPattern'>>(targets: readonly T[], branch: string): T | undefined {
  return targets.find((target) => targetMatches(target, branch));
}
