/**
 * The Unix users of privilege separation (docs/webhook.md, "Users and modes"):
 * - the server's user (WEBHOOK_USER, e.g. `webhook`): owns the secrets file and the state directory;
 * - per target a site user `ws-<deployPath>` whose primary group is the target's group: runs the
 *   site, reads only the live release;
 * - per target a build user `wb-<deployPath>`, also in the target's group: runs npm ci and the
 *   build, writes only the release being built.
 * System users without a home or a login shell. Creating them is idempotent.
 */
import { spawnSync } from 'node:child_process';
import type { ResolvedTarget } from '../../../shared/targets.js';

export interface UserSpec {
  name: string;
  /** Supplementary group (the target's group, for a build user). */
  group?: string;
}

export function usersOf(targets: readonly Pick<ResolvedTarget, 'siteUser' | 'buildUser'>[], webhookUser?: string): UserSpec[] {
  return [
    ...(webhookUser ? [{ name: webhookUser }] : []),
    ...targets.flatMap((t) => [{ name: t.siteUser }, { name: t.buildUser, group: t.siteUser }]),
  ];
}

/** The useradd command line for one user (its own group of the same name). */
export function useraddArgs(user: UserSpec): string[] {
  return [
    '--system',
    '--user-group',
    '--no-create-home',
    '--home-dir',
    '/nonexistent',
    '--shell',
    '/usr/sbin/nologin',
    ...(user.group ? ['--groups', user.group] : []),
    user.name,
  ];
}

export const userExists = (name: string): boolean => spawnSync('id', ['-u', name], { stdio: 'ignore' }).status === 0;

/** Create the missing users (needs root). Returns the names created. */
export function ensureUsers(users: readonly UserSpec[]): string[] {
  const created: string[] = [];
  for (const user of users) {
    if (userExists(user.name)) {
      if (user.group) spawnSync('usermod', ['--append', '--groups', user.group, user.name], { stdio: 'ignore' });
      continue;
    }
    const result = spawnSync('useradd', useraddArgs(user), { encoding: 'utf8' });
    // 9: created meanwhile by a concurrent call, which is what we wanted.
    if (result.status !== 0 && result.status !== 9) throw new Error(`useradd ${user.name} failed: ${result.stderr.trim()}`);
    created.push(user.name);
  }
  return created;
}

/**
 * Remove users and their own groups (tests clean up after themselves), in any order. userdel keeps
 * a user's group while another user is still in it, so a site user's group would outlive the site
 * user whenever the build user in it went second. Every user goes first, then every group of those
 * names that is left.
 */
export function removeUsers(names: readonly string[]): void {
  for (const name of names) spawnSync('userdel', [name], { stdio: 'ignore' });
  for (const name of names) spawnSync('groupdel', [name], { stdio: 'ignore' });
}
