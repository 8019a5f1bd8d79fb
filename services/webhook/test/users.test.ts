/**
 * The Unix users of privilege separation are created and removed for real (root only). What is
 * proven: removing a target's users leaves neither a user nor a group behind, in either order. Each
 * leaked group takes one of the 900 system gids for good; a suite that leaked a dozen per run ran
 * the machine out of them (`useradd: Can't get unique GID`).
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { binary, lacks, requirements } from '../../../test/helpers/requirements.js';
import { ensureUsers, removeUsers, usersOf } from '../src/host/users.js';

const missing = lacks(
  'the users of privilege separation',
  requirements.root('useradd and userdel'),
  binary('useradd', 'apt-get install passwd'),
);

const exists = (database: 'passwd' | 'group', name: string) => spawnSync('getent', [database, name], { stdio: 'ignore' }).status === 0;
const tag = randomBytes(3).toString('hex');
const targets = ['a', 'b'].map((t) => ({ siteUser: `ws-us${tag}-${t}`, buildUser: `wb-us${tag}-${t}` }));
const names = targets.flatMap((t) => [t.siteUser, t.buildUser]);

afterAll(() => {
  if (!missing) removeUsers(names);
});

describe.skipIf(missing)('users of privilege separation', () => {
  it.each([
    { order: 'build user first', target: targets[0]!, first: 'buildUser' as const },
    { order: 'site user first', target: targets[1]!, first: 'siteUser' as const },
  ])("removing a target's users leaves no user and no group behind ($order)", ({ target, first }) => {
    ensureUsers(usersOf([target]));
    // The build user is in the site user's group: the membership that made userdel keep that group.
    const groups = spawnSync('id', ['-nG', target.buildUser], { encoding: 'utf8' }).stdout.trim().split(' ');
    expect(groups).toContain(target.siteUser);

    removeUsers(first === 'buildUser' ? [target.buildUser, target.siteUser] : [target.siteUser, target.buildUser]);

    for (const name of [target.siteUser, target.buildUser]) {
      expect(exists('passwd', name), `user ${name}`).toBe(false);
      expect(exists('group', name), `group ${name}`).toBe(false);
    }
  });
});
