/**
 * Privilege separation tried as a hostile team member would: the webhook server with the real
 * deploy script and DEPLOY_ISOLATION=users, two team targets with their own Unix users (created
 * with useradd, removed afterwards), a real git repository, and builds that attack — reading the
 * secrets file, their parents' environment, another team's directory and the server's state,
 * writing the live release and a dependency file it shares with the live release — and a deploy
 * script killed outright. Needs root (useradd, setpriv); skipped with a printed reason otherwise.
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serviceNameOf } from '../../shared/targets.js';
import { ensureUsers, removeUsers, usersOf } from '../src/host/users.js';
import { newSecret, writeSecretsFile } from '../src/secrets.js';
import { FixtureRepo, fetchBuild, freePort, liveRelease, makeTempDir, releasesOf, repoRoot, stopFixtureSites, waitFor } from './support/helpers.js';
import { isolationMissing, startTeamsHarness } from './support/root-paths.js';
import { pushPayload, seedTargets, sendGithub, waitForDeployment, type Harness } from './support/webhook-harness.js';

const missing = isolationMissing();
if (missing) console.warn(`skipping privilege separation tests: ${missing}`);

const suffix = randomBytes(2).toString('hex');
const users = {
  de1: { buildUser: `wb-iso${suffix}-de1`, siteUser: `ws-iso${suffix}-de1` },
  de2: { buildUser: `wb-iso${suffix}-de2`, siteUser: `ws-iso${suffix}-de2` },
};
let h: Harness;
let repo: FixtureRepo;
let root: string;
let firstLog: string;
const ports = {} as Record<'de1' | 'de2', number>;
const dirOf = (team: 'de1' | 'de2') => join(h.root, 'sites', `feature-${team}`);
const uidOf = (user: string) => Number(spawnSync('id', ['-u', user], { encoding: 'utf8' }).stdout.trim());

/** A build that tries everything a hostile team member would, and publishes what it got. */
const HOSTILE_BUILD = `
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
const plan = JSON.parse(readFileSync('attack-plan.json', 'utf8'));
const report = { uid: process.getuid(), env: process.env, attempts: {} };
const attempt = (name, fn) => {
  try { report.attempts[name] = { ok: true, value: String(fn()).slice(0, 4000) }; }
  catch (error) { report.attempts[name] = { ok: false, code: error.code }; }
};
attempt('secrets file', () => readFileSync(plan.secretsFile, 'utf8'));
attempt('server state', () => readdirSync(plan.stateDir).join(','));
let pid = process.pid;
for (let i = 1; i <= 8; i++) {
  pid = Number(readFileSync('/proc/' + pid + '/stat', 'utf8').split(') ')[1].split(' ')[1]);
  if (pid <= 1) break;
  const uid = Number(/^Uid:\\s+(\\d+)/m.exec(readFileSync('/proc/' + pid + '/status', 'utf8'))[1]);
  attempt('environ of ancestor ' + i + ' (uid ' + uid + ')', () => readFileSync('/proc/' + pid + '/environ', 'utf8'));
}
attempt('other target directory', () => readdirSync(plan.otherTarget).join(','));
attempt('other target live release', () => readFileSync(plan.otherTarget + '/live/REVISION', 'utf8'));
attempt('own live release', () => { writeFileSync(plan.ownDeployDir + '/live/server.mjs', 'hacked'); return 'written'; });
attempt('shared dependency file', () => { writeFileSync('node_modules/fixture-dep/index.js', "module.exports = 'tampered';"); return 'written'; });
if (plan.leaveProcess) spawn('setsid', ['sleep', '300'], { detached: true, stdio: 'ignore' }).unref();
mkdirSync('dist', { recursive: true });
writeFileSync('dist/attack.json', JSON.stringify(report));
writeFileSync('dist/build.json', JSON.stringify({ version: plan.version }));
writeFileSync('dist/index.html', 'attack');
if (plan.fail) process.exit(1);
`;

async function push(team: 'de1' | 'de2', files: Record<string, string | null>): Promise<Record<string, unknown>> {
  const branch = `feature/team-${team}/iso`;
  const commit = repo.commit(branch, files);
  const res = await sendGithub(h.url, pushPayload(branch, commit), h.secrets[`SECRET_TEAM_${team.toUpperCase()}`]!);
  expect(res.status).toBe(202);
  return waitForDeployment(h, String(res.json.deploymentId), 90_000);
}

function attackPlan(extra: Record<string, unknown>): string {
  return JSON.stringify({
    secretsFile: join(h.root, 'webhook-secrets.env'),
    stateDir: join(h.root, 'state'),
    otherTarget: dirOf('de2'),
    ownDeployDir: dirOf('de1'),
    ...extra,
  });
}

function assertNothingLeaked(text: string): void {
  for (const secret of [...Object.values(h.secrets), h.adminToken]) expect(text).not.toContain(secret);
  expect(text).not.toMatch(/WEBHOOK_SECRETS_FILE|WEBHOOK_ADMIN_TOKEN|SECRET_TEAM/);
}

describe.skipIf(missing)('privilege separation (DEPLOY_ISOLATION=users)', () => {
  beforeAll(async () => {
    root = makeTempDir('isolation');
    chmodSync(root, 0o711); // the secrets file is protected by its own mode, not by a private directory
    ensureUsers(usersOf([users.de1, users.de2]));
    repo = new FixtureRepo(join(root, 'repo'));
    ports.de1 = await freePort();
    ports.de2 = await freePort();
    h = await startTeamsHarness(root, users, repo.url, ports);
    chmodSync(h.root, 0o711);
    expect(await push('de2', { VERSION: 'de2-1\n' })).toMatchObject({ state: 'succeeded' });
    const first = await push('de1', { VERSION: 'de1-1\n' });
    expect(first).toMatchObject({ state: 'succeeded' });
    firstLog = String(first.logPath);
    // Deploy logs and releases are stamped to the second, and a log of the same second as the oldest
    // kept release stays (releases.sh prune_releases): every later deploy starts in a later second
    // than the first, so the pruning test below is about the rule, not about how fast deploys are
    // (it failed when the next deploys came within the first one's second).
    await new Promise((r) => setTimeout(r, 1_050 - (Date.now() % 1_000)));
  }, 240_000);

  afterAll(async () => {
    await h?.close();
    if (root) stopFixtureSites(root);
    removeUsers(Object.values(users).flatMap((u) => [u.buildUser, u.siteUser]));
  });

  it('a build reads no secret, no parent environment, no other target and no server state, and writes nothing live', async () => {
    const liveBefore = liveRelease(dirOf('de1'))!;
    const serverBefore = readFileSync(join(dirOf('de1'), liveBefore, 'server.mjs'), 'utf8');
    const deployment = await push('de1', { 'build.mjs': HOSTILE_BUILD, 'attack-plan.json': attackPlan({ version: 'attack-1' }) });
    expect(deployment.state).toBe('succeeded');

    const reportText = readFileSync(join(dirOf('de1'), 'live/dist/attack.json'), 'utf8');
    const report = JSON.parse(reportText) as { uid: number; env: Record<string, string>; attempts: Record<string, { ok: boolean; code?: string }> };
    assertNothingLeaked(reportText);
    expect(report.uid).toBe(uidOf(users.de1.buildUser));
    for (const name of ['secrets file', 'server state', 'other target directory', 'other target live release', 'own live release', 'shared dependency file']) {
      expect(report.attempts[name], name).toMatchObject({ ok: false, code: 'EACCES' });
    }
    // Ancestors running as the build user (npm, sh) hold only the allow-listed environment; every
    // other ancestor (the deploy script, the launcher, the server) is closed to it.
    const ancestors = Object.entries(report.attempts).filter(([name]) => name.startsWith('environ of ancestor'));
    expect(ancestors.length).toBeGreaterThan(2);
    for (const [name, result] of ancestors) {
      if (!name.includes(`(uid ${report.uid})`)) expect(result, name).toMatchObject({ ok: false, code: 'EACCES' });
    }
    // The allow-list, plus what npm and the shell add themselves.
    expect(Object.keys(report.env).filter((k) => !/^(npm_|NODE$|INIT_CWD$|COLOR$|EDITOR$|PWD$|SHLVL$|_$)/.test(k)).sort()).toEqual(['CI', 'HOME', 'LANG', 'PATH', 'PORT', 'TZ']);
    expect(readFileSync(join(dirOf('de1'), liveBefore, 'server.mjs'), 'utf8')).toBe(serverBefore);
  }, 120_000);

  it('a failed build that writes a dependency file it shares with the live release changes no release', async () => {
    const dir = dirOf('de1');
    const dependencyOf = (release: string) => readFileSync(join(dir, 'deploys', release, 'node_modules/fixture-dep/index.js'), 'utf8');
    const live = liveRelease(dir)!.replace('deploys/', '');
    const before = Object.fromEntries(releasesOf(dir).map((r) => [r, dependencyOf(r)]));
    expect(before[live]).toContain('fixture-dep 1.0.0');

    const deployment = await push('de1', { 'build.mjs': HOSTILE_BUILD, 'attack-plan.json': attackPlan({ version: 'attack-2', fail: true, leaveProcess: true }) });

    expect(deployment.state).toBe('failed');
    expect(liveRelease(dir)).toBe(`deploys/${live}`);
    for (const release of releasesOf(dir)) expect(dependencyOf(release), release).toBe(before[release]);
    // The build's setsid escapee did not outlive its deploy.
    expect(spawnSync('pgrep', ['-U', users.de1.buildUser]).status).toBe(1);
    // The next good deploy still has the untouched dependency.
    const fixtureBuild = readFileSync(join(repoRoot, 'test/fixtures/site/build.mjs'), 'utf8');
    expect(await push('de1', { 'build.mjs': fixtureBuild, 'attack-plan.json': null, VERSION: 'de1-2\n' })).toMatchObject({ state: 'succeeded' });
    expect(await fetchBuild(ports.de1!)).toMatchObject({ version: 'de1-2', dependency: 'fixture-dep 1.0.0' });
  }, 180_000);

  it('the site runs as its own user and can read its live release only', () => {
    const dir = dirOf('de1');
    const service = serviceNameOf({ key: 'feature/team-de1' });
    const sitePid = Number(readFileSync(join(dir, `site-${service}.pid`), 'utf8').trim());
    const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${sitePid}/status`, 'utf8'))![1]);
    expect(uid).toBe(uidOf(users.de1.siteUser));

    const asSite = (...command: string[]) =>
      spawnSync('setpriv', [`--reuid=${users.de1.siteUser}`, `--regid=${users.de1.siteUser}`, '--init-groups', '--', ...command], { encoding: 'utf8' });
    const live = liveRelease(dir)!;
    expect(asSite('cat', join(dir, live, 'REVISION')).status).toBe(0);
    const older = releasesOf(dir).find((r) => `deploys/${r}` !== live)!;
    expect(asSite('cat', join(dir, 'deploys', older, 'REVISION')).status).not.toBe(0);
    expect(asSite('touch', join(dir, live, 'dist/index.html')).status).not.toBe(0);
    expect(asSite('cat', join(dirOf('de2'), 'live/REVISION')).status).not.toBe(0);
    expect(asSite('ls', join(dir, 'logs')).status).not.toBe(0);
    expect(asSite('ls', join(dir, 'deploys')).status).not.toBe(0);
  });

  it('a release holds no .git and records its commit; deploy logs go with the releases', () => {
    const dir = dirOf('de1');
    const live = liveRelease(dir)!;
    expect(existsSync(join(dir, live, '.git'))).toBe(false);
    expect(readFileSync(join(dir, live, 'REVISION'), 'utf8').trim()).toBe(repo.head('feature/team-de1/iso'));
    expect(statSync(join(dir, live)).uid).toBe(0);
  });

  it('a SIGKILLed deploy script ends its whole process group and frees the lock for the next push', async () => {
    const dir = dirOf('de2');
    const branch = 'feature/team-de2/iso';
    const slow = repo.commit(branch, { SLOW_BUILD: '120\n', VERSION: 'never\n' });
    const res = await sendGithub(h.url, pushPayload(branch, slow), h.secrets.SECRET_TEAM_DE2!);
    expect(res.status).toBe(202);
    const buildPid = await waitFor(() => pidsOf(users.de2.buildUser).find((pid) => cmdline(pid).includes('build.mjs')), 60_000, 'the slow build');
    const scriptPid = scriptPidOf(dir);
    expect(scriptPid).toBeDefined();
    process.kill(scriptPid!, 'SIGKILL');

    expect(await waitForDeployment(h, String(res.json.deploymentId), 20_000)).toMatchObject({ state: 'failed' });
    await waitFor(() => !existsSync(`/proc/${buildPid}`) || readFileSync(`/proc/${buildPid}/stat`, 'utf8').includes(') Z'), 5_000, 'the build to end');
    // The lock is free: the next push deploys at once instead of waiting for the orphaned build.
    const started = Date.now();
    expect(await push('de2', { SLOW_BUILD: null, VERSION: 'de2-after-kill\n' })).toMatchObject({ state: 'succeeded' });
    expect(Date.now() - started).toBeLessThan(60_000);
    expect((await fetchBuild(ports.de2!)).version).toBe('de2-after-kill');
  }, 180_000);

  it('prunes deploy logs with the releases (KEEP_RELEASES=2): the first deploy is gone with its log', () => {
    const dir = dirOf('de1');
    const logs = readdirSync(join(dir, 'logs')).filter((f) => f.startsWith('deploy-'));
    const kept = releasesOf(dir).map((r) => readFileSync(join(dir, 'deploys', r, '.deploy-log'), 'utf8').trim());
    expect(kept).toHaveLength(2);
    for (const name of kept) expect(logs).toContain(name);
    expect(firstLog).toMatch(/logs\/deploy-\d{14}-[0-9a-f-]+\.log$/);
    expect(existsSync(firstLog)).toBe(false);
    // Logs are ordered by their start stamp (seconds; the id after it is random), so a log of the
    // same second as the oldest kept release may stay; every earlier one is gone.
    const stampOf = (name: string) => /^deploy-(\d{14})-/.exec(name)![1]!;
    const oldestKept = stampOf(kept.sort()[0]!);
    expect(logs.filter((name) => stampOf(name) < oldestKept)).toEqual([]);
    expect(statSync(join(dir, 'logs')).mode & 0o777).toBe(0o700);
  });
});

function pidsOf(user: string): number[] {
  const out = spawnSync('pgrep', ['-U', user], { encoding: 'utf8' }).stdout.trim();
  return out ? out.split('\n').map(Number) : [];
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}

/** The deploy script running for a deploy directory (its argv names it). */
function scriptPidOf(deployDir: string): number | undefined {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const line = cmdline(Number(entry));
    if (line.includes('deploy-branch.sh') && line.includes(deployDir)) return Number(entry);
  }
  return undefined;
}

describe.skipIf(missing)('the server gives up root (WEBHOOK_USER)', () => {
  const serverUser = `wh-iso${suffix}`;
  afterAll(() => removeUsers([serverUser]));

  it('runs as WEBHOOK_USER while its deploy launcher stays root with nothing but PATH in its environment', async () => {
    ensureUsers([{ name: serverUser }]);
    const dir = makeTempDir('webhook-drop');
    chmodSync(dir, 0o711);
    const secrets = Object.fromEntries(seedTargets().map((t) => [t.secret, newSecret()]));
    const secretsFile = join(dir, 'secrets.env');
    writeSecretsFile(secretsFile, secrets);
    chownSync(secretsFile, uidOf(serverUser), uidOf(serverUser));
    mkdirSync(join(dir, 'state'), { mode: 0o700 });
    chownSync(join(dir, 'state'), uidOf(serverUser), uidOf(serverUser));
    const child = spawn(process.execPath, ['--import', 'tsx', 'services/webhook/src/server.ts'], {
      env: {
        PATH: process.env.PATH,
        NODE_ENV: 'production',
        WEBHOOK_USER: serverUser,
        WEBHOOK_PORT: '0',
        WEBHOOK_SECRETS_FILE: secretsFile,
        WEBHOOK_ADMIN_TOKEN: 'admin-token-for-tests-0123456789',
        WEBHOOK_STATE_DIR: join(dir, 'state'),
        DEPLOY_ROOT: join(dir, 'sites'),
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      let output = '';
      child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
      const port = await waitFor(() => /"port":(\d+)/.exec(output)?.[1], 20_000, 'the server to listen');
      const uidOfPid = (pid: number) => Number(/^Uid:\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
      expect(uidOfPid(child.pid!)).toBe(uidOf(serverUser));
      const launcher = readdirSync('/proc').filter((e) => /^\d+$/.test(e)).map(Number).find((pid) => cmdline(pid).includes('launcher-process.mjs') && parentOf(pid) === child.pid);
      expect(launcher).toBeDefined();
      expect(uidOfPid(launcher!)).toBe(0);
      // PATH, and the IPC channel Node's fork() adds.
      const names = readFileSync(`/proc/${launcher}/environ`, 'utf8').split('\0').filter(Boolean).map((v) => v.split('=')[0]);
      expect(names.filter((n) => !n!.startsWith('NODE_CHANNEL_'))).toEqual(['PATH']);
      // The server still reads its secrets (owned by its user) and answers.
      const res = await sendGithub(`http://127.0.0.1:${port}`, pushPayload('feature/team-de1/x', '0'.repeat(40)), secrets.SECRET_TEAM_DE1!);
      expect(res.status).toBe(202); // a branch deletion: ignored, after authenticating
      assertNoSecretIn(output, secrets);
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
  }, 60_000);
});

const parentOf = (pid: number): number => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);

function assertNoSecretIn(text: string, secrets: Record<string, string>): void {
  for (const secret of Object.values(secrets)) expect(text).not.toContain(secret);
}
