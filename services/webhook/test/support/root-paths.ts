/**
 * Helpers for the root-paths tests (services/webhook/test/root-paths*.test.ts): what they need to run, the
 * Unix users of two hostile teams, builds that attack the paths root reads and writes in their
 * release and cache, and a listing of a release to prove another team's was not touched.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { binary, firstMissing, requirements } from '../../../../test/helpers/requirements.js';
import { deployScript, git, repoRoot, restartFixtureSite, type FixtureRepo } from './helpers.js';
import { startHarness, type Harness } from './webhook-harness.js';

/**
 * Why these tests cannot run here (not root, a tool missing), or undefined. Printed once, as one
 * line, by the caller's first use.
 */
export function isolationMissing(tools: readonly string[] = []): string | undefined {
  return firstMissing(
    requirements.root('useradd and setpriv'),
    ...['useradd', 'userdel', 'setpriv', 'pkill', 'mkfifo', 'timeout', 'git', ...tools].map((name) => binary(name, 'apt-get install util-linux procps passwd coreutils git')),
  );
}

/** A build user and a site user per team, unique per test file run (useradd names stay short). */
export function teamUsers<T extends string>(tag: string, teams: readonly T[]): Record<T, { buildUser: string; siteUser: string }> {
  const suffix = randomBytes(2).toString('hex');
  return Object.fromEntries(teams.map((team) => [team, { buildUser: `wb-${tag}${suffix}-${team}`, siteUser: `ws-${tag}${suffix}-${team}` }])) as Record<
    T,
    { buildUser: string; siteUser: string }
  >;
}

const fixtureBuild = readFileSync(join(repoRoot, 'test/fixtures/site/build.mjs'), 'utf8');

/**
 * The fixture site's build with an attack before it (`before`) and after it (`after`), both plain
 * JavaScript run as the build user in the release. They get `fs` (node:fs), `cp`
 * (node:child_process), `path` (node:path) and `plan` (attack-plan.json of the commit, if any).
 */
export function hostileBuild({ before = '', after = '' }: { before?: string; after?: string }): string {
  return [
    "import * as fs from 'node:fs';",
    "import * as cp from 'node:child_process';",
    "import * as path from 'node:path';",
    "const plan = fs.existsSync('attack-plan.json') ? JSON.parse(fs.readFileSync('attack-plan.json', 'utf8')) : {};",
    before,
    fixtureBuild,
    after,
    '',
  ].join('\n');
}

/** Commit a symbolic link `name` → `target` on `branch` (the repository carries the link itself). */
export function commitLink(repo: FixtureRepo, branch: string, name: string, target: string): string {
  repo.commit(branch, {}, 'prepare');
  rmSync(join(repo.dir, name), { recursive: true, force: true });
  symlinkSync(target, join(repo.dir, name));
  git(repo.dir, 'add', '-A');
  git(repo.dir, 'commit', '--quiet', '-m', `link ${name}`);
  return git(repo.dir, 'rev-parse', 'HEAD');
}

/** Every path under `dir` (links not followed), with a file's size: what "unchanged" compares. */
export function treeOf(dir: string): string[] {
  const out: string[] = [];
  const walk = (relative: string): void => {
    for (const entry of readdirSync(join(dir, relative), { withFileTypes: true })) {
      const path = relative ? `${relative}/${entry.name}` : entry.name;
      if (entry.isDirectory()) {
        out.push(`${path}/`);
        walk(path);
      } else if (entry.isSymbolicLink()) out.push(`${path} ->`);
      else out.push(`${path} ${readFileSync(join(dir, path)).length}`);
    }
  };
  walk('');
  return out.sort();
}

/** Today as a deploy log's stamp (UTC, 14 digits), as the server names the log. */
export const logStamp = (at = new Date()): string => at.toISOString().replace(/\D/g, '').slice(0, 14);

/**
 * The webhook as it serves two teams on a host with DEPLOY_ISOLATION=users: only the feature targets
 * of de1 and de2, each on its own port with its own build and site users, both deploying `repoUrl`
 * with the real deploy script and the fixture site's restart.
 */
export function startTeamsHarness(
  root: string,
  users: Record<'de1' | 'de2', { buildUser: string; siteUser: string }>,
  repoUrl: string,
  ports: Record<'de1' | 'de2', number>,
): Promise<Harness> {
  return startHarness({
    root,
    targets: (targets) =>
      targets
        .filter((t) => t.key === 'feature/team-de1' || t.key === 'feature/team-de2')
        .map((t) => {
          const team = t.key === 'feature/team-de1' ? 'de1' : 'de2';
          return { ...t, port: ports[team], repo: repoUrl, ...users[team] };
        }),
    env: { DEPLOY_SCRIPT: deployScript, DEPLOY_ISOLATION: 'users', RESTART_COMMAND: restartFixtureSite, HEALTH_TIMEOUT_SECONDS: '20', KEEP_RELEASES: '2' },
  });
}
