/**
 * Restarts while a deploy runs, with real processes: the webhook server (server.ts) and its deploy
 * launcher as separate processes, the real deploy script, a real git repository.
 * - The launcher (the root part of privilege separation) and the server SIGKILLed mid-build: the
 *   deploy script lives on as an orphan holding the target's lock. The next server's launcher
 *   stops it, the previous release stays live and the next push deploys at once.
 * - A server that gave up root (WEBHOOK_USER) whose root launcher dies exits 1, so the service
 *   manager starts it again as root, instead of running on with a launcher that cannot isolate.
 * - A deploy script SIGKILLed between switching `live` and confirming the site: the next deploy
 *   puts the replaced release back before anything else, even when its own build fails.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { ensureUsers, removeUsers } from '../src/host/users.js';
import { newSecret, writeSecretsFile } from '../src/secrets.js';
import { lacks, requirements } from '../../../test/helpers/requirements.js';
import {
  deployEnv,
  deployScript,
  FixtureRepo,
  fetchBuild,
  freePort,
  liveRelease,
  makeTempDir,
  repoRoot,
  startScript,
  stopFixtureSites,
  waitFor,
} from './support/helpers.js';
import { pushPayload, seedTargets, sendGitlab } from './support/webhook-harness.js';

const roots: string[] = [];
afterAll(() => roots.forEach(stopFixtureSites));

const adminToken = 'admin-token-for-tests-0123456789';

const cmdline = (pid: number): string => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
};
const parentOf = (pid: number): number => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
const alive = (pid: number): boolean => {
  try {
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.startsWith('Z');
  } catch {
    return false;
  }
};
const pids = (): number[] => readdirSync('/proc').filter((e) => /^\d+$/.test(e)).map(Number);
const launcherOf = (serverPid: number): number | undefined =>
  pids().find((pid) => cmdline(pid).includes('launcher-process.mjs') && (() => { try { return parentOf(pid) === serverPid; } catch { return false; } })());
const groupOf = (pid: number): number => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[2]);
/**
 * The deploy script the launcher started: the leader of its own process group. Its subshells carry
 * the same command line, and once pids wrap around one of them can have the lower pid.
 */
const scriptPidOf = (deployDir: string): number | undefined =>
  pids().find((pid) => {
    const line = cmdline(pid);
    try {
      return line.includes('deploy-branch.sh') && line.includes(deployDir) && groupOf(pid) === pid;
    } catch {
      return false;
    }
  });
/** The newest line of a deployment's own log (deploy-<stamp>-<id>.log). */
const deployLogOf = (deployDir: string, id: string): string => {
  const name = readdirSync(join(deployDir, 'logs')).find((f) => f.startsWith('deploy-') && f.endsWith(`-${id}.log`));
  return name ? readFileSync(join(deployDir, 'logs', name), 'utf8') : '';
};

interface ServerProcess {
  child: ChildProcess;
  url: () => Promise<string>;
  exited: Promise<number | null>;
}

function startServerProcess(env: Record<string, string>): ServerProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/webhook/src/server.ts'], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, WEBHOOK_PORT: '0', WEBHOOK_ADMIN_TOKEN: adminToken, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    exited,
    url: async () => `http://127.0.0.1:${await waitFor(() => /"port":(\d+)/.exec(output)?.[1], 30_000, 'the server to listen')}`,
  };
}

async function deploymentOf(url: string, id: string): Promise<Record<string, unknown>> {
  const res = await fetch(`${url}/deployments/${id}`, { headers: { authorization: `Bearer ${adminToken}` } });
  return (await res.json()) as Record<string, unknown>;
}

const finished = (url: string, id: string, timeoutMs: number) =>
  waitFor(async () => {
    const d = await deploymentOf(url, id);
    return ['queued', 'running'].includes(String(d.state)) ? null : d;
  }, timeoutMs, `deployment ${id} to finish`);

describe('a restart while a deploy runs', () => {
  it('a deploy left running by a SIGKILLed launcher and server is stopped by the next server; the previous release stays live and the next push deploys at once', async () => {
    const root = makeTempDir('webhook-restart');
    roots.push(root);
    const repo = new FixtureRepo(join(root, 'repo'));
    const port = await freePort();
    const targets = seedTargets().filter((t) => t.key === 'develop').map((t) => ({ ...t, port, repo: repo.url }));
    writeFileSync(join(root, 'targets.yaml'), stringify({ targets }));
    const secrets = { [targets[0]!.secret]: newSecret() };
    writeSecretsFile(join(root, 'secrets.env'), secrets);
    const env: Record<string, string> = {
      ...(deployEnv(root) as Record<string, string>),
      TARGETS_FILE: join(root, 'targets.yaml'),
      DEPLOY_ROOT: join(root, 'sites'),
      DEPLOY_SCRIPT: deployScript,
      WEBHOOK_STATE_DIR: join(root, 'state'),
      WEBHOOK_SECRETS_FILE: join(root, 'secrets.env'),
      DEPLOY_ENV_PASS: 'RESTART_COMMAND HEALTH_TIMEOUT_SECONDS npm_config_cache',
      LOCK_WAIT_SECONDS: '900',
    };
    const deployDir = join(root, 'sites/develop');
    const secret = secrets[targets[0]!.secret]!;

    const first = startServerProcess(env);
    let second: ServerProcess | undefined;
    try {
      const url = await first.url();
      const good = repo.commit('develop', { VERSION: 'good\n' });
      const ok = await sendGitlab(url, pushPayload('develop', good), secret);
      expect(await finished(url, String(ok.json.deploymentId), 90_000)).toMatchObject({ state: 'succeeded' });
      const goodRelease = liveRelease(deployDir);

      const hung = repo.commit('develop', { SLOW_BUILD: '600\n', VERSION: 'hung\n' });
      const res = await sendGitlab(url, pushPayload('develop', hung), secret);
      expect(res.status).toBe(202);
      const script = await waitFor(() => scriptPidOf(deployDir), 15_000, 'the deploy script');
      // This deployment's own log: the previous one may have started in the same second, and
      // names sort by second and then by the random id.
      await waitFor(() => deployLogOf(deployDir, String(res.json.deploymentId)).includes('building'), 60_000, 'the build to start');

      // The root part and the server die outright: nothing is left to end the deploy. Both are
      // stopped first, so neither can react to the other's death (the server stops the deploys of
      // a launcher that exits; a launcher stops its deploys when the server goes).
      const launcher = launcherOf(first.child.pid!)!;
      expect(launcher).toBeDefined();
      process.kill(launcher, 'SIGSTOP');
      first.child.kill('SIGSTOP');
      process.kill(launcher, 'SIGKILL');
      first.child.kill('SIGKILL');
      await first.exited;
      await new Promise((r) => setTimeout(r, 500));
      expect(alive(script)).toBe(true); // an orphan, holding the target's lock

      second = startServerProcess(env);
      const url2 = await second.url();
      await waitFor(() => !alive(script), 30_000, 'the orphaned deploy to be stopped');
      expect(liveRelease(deployDir)).toBe(goodRelease);
      expect((await fetchBuild(port)).version).toBe('good');
      expect(await deploymentOf(url2, String(res.json.deploymentId))).toMatchObject({ state: 'interrupted' });

      const fixed = repo.commit('develop', { SLOW_BUILD: null, VERSION: 'fixed\n' });
      const started = Date.now();
      const next = await sendGitlab(url2, pushPayload('develop', fixed), secret);
      expect(await finished(url2, String(next.json.deploymentId), 60_000)).toMatchObject({ state: 'succeeded', deployedCommit: fixed });
      expect(Date.now() - started).toBeLessThan(60_000); // not LOCK_WAIT_SECONDS behind an orphan
      expect((await fetchBuild(port)).version).toBe('fixed');
      expect(existsSync(join(deployDir, 'logs/.running-deploy'))).toBe(false);
    } finally {
      for (const server of [first, second]) {
        if (server && server.child.exitCode === null && server.child.signalCode === null) {
          server.child.kill('SIGTERM');
          await server.exited;
        }
      }
    }
  }, 240_000);

  it('a deploy SIGKILLed between switching live and confirming the site is undone by the next deploy, even one whose build fails', async () => {
    const root = makeTempDir('switch-killed');
    roots.push(root);
    const repo = new FixtureRepo(join(root, 'repo'));
    const port = String(await freePort());
    const deployDir = join(root, 'sites/main');
    const env = deployEnv(root) as Record<string, string>;
    const deploy = (commit: string, extra: Record<string, string> = {}) => startScript(deployScript, ['main', deployDir, port, repo.url, commit], { ...env, ...extra });

    const good = repo.commit('main', { VERSION: 'good\n' });
    expect((await deploy(good).done).code).toBe(0);
    const goodRelease = liveRelease(deployDir);

    // A restart command that never returns: the deploy is killed while `live` already points at
    // the new release and the site has not been confirmed.
    const hangingRestart = join(root, 'hanging-restart.sh');
    writeFileSync(hangingRestart, '#!/bin/sh\nexec sleep 600\n', { mode: 0o755 });
    const unconfirmed = repo.commit('main', { VERSION: 'unconfirmed\n' });
    const killed = deploy(unconfirmed, { RESTART_COMMAND: hangingRestart });
    await waitFor(() => liveRelease(deployDir) !== goodRelease, 60_000, 'live to switch');
    process.kill(-killed.child.pid!, 'SIGKILL');
    await killed.done;
    expect(liveRelease(deployDir)).not.toBe(goodRelease);

    const broken = repo.commit('main', { FAIL_BUILD: '1\n', VERSION: 'broken\n' });
    const result = await deploy(broken).done;
    expect(result.code).toBe(6);
    expect(result.stdout).toContain('put deploys/');
    expect(liveRelease(deployDir)).toBe(goodRelease);
    expect((await fetchBuild(Number(port))).version).toBe('good');
    expect(readdirSync(join(deployDir, 'deploys'))).toHaveLength(1);
    expect(existsSync(join(deployDir, '.switch-pending'))).toBe(false);
  }, 180_000);
});

const notRoot = lacks('the root launcher restart test', requirements.root('giving up root'));

describe.skipIf(notRoot)('the root launcher after the server gave up root', () => {
  const serverUser = `wh-rst${Math.random().toString(16).slice(2, 6)}`;
  afterAll(() => removeUsers([serverUser]));

  it('a server running as WEBHOOK_USER exits 1 when its root launcher is killed, so the service manager restarts it as root', async () => {
    ensureUsers([{ name: serverUser }]);
    const uid = Number(spawnSync('id', ['-u', serverUser], { encoding: 'utf8' }).stdout.trim());
    const dir = makeTempDir('webhook-launcher-lost');
    chmodSync(dir, 0o711);
    const secretsFile = join(dir, 'secrets.env');
    writeSecretsFile(secretsFile, Object.fromEntries(seedTargets().map((t) => [t.secret, newSecret()])));
    chownSync(secretsFile, uid, uid);
    mkdirSync(join(dir, 'state'), { mode: 0o700 });
    chownSync(join(dir, 'state'), uid, uid);
    const server = startServerProcess({
      NODE_ENV: 'production',
      WEBHOOK_USER: serverUser,
      WEBHOOK_SECRETS_FILE: secretsFile,
      WEBHOOK_STATE_DIR: join(dir, 'state'),
      DEPLOY_ROOT: join(dir, 'sites'),
    });
    try {
      await server.url();
      const launcher = await waitFor(() => launcherOf(server.child.pid!), 10_000, 'the launcher');
      process.kill(launcher, 'SIGKILL');
      const code = await Promise.race([server.exited, new Promise<'running'>((r) => setTimeout(() => r('running'), 15_000))]);
      expect(code).toBe(1);
    } finally {
      if (server.child.exitCode === null && server.child.signalCode === null) {
        server.child.kill('SIGKILL');
        await server.exited;
      }
    }
  }, 60_000);
});
