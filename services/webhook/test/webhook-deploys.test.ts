/**
 * The deploy queue seen through the server: one deploy per target at a time, collapse to the
 * newest push, redelivery detection, time limits, shutdown; and one push deployed end to end by
 * the real deploy script from a real git repository.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  deployEnv,
  deployScript,
  FixtureRepo,
  fetchBuild,
  freePort,
  liveRelease,
  makeTempDir,
  recordDeployScript,
  stopFixtureSites,
  waitFor,
} from './support/helpers.js';
import { startDevelopmentWebhookServer } from '../src/development.js';
import { createDevelopmentSecrets, newSecret } from '../src/secrets.js';
import {
  commitId,
  getDeployment,
  pushPayload,
  sendGithub,
  sendGitlab,
  seedTargets,
  startHarness,
  waitForDeployment,
  waitIdle,
  type Harness,
} from './support/webhook-harness.js';

const roots: string[] = [];
afterAll(() => roots.forEach(stopFixtureSites));

async function withHarness<T>(env: Record<string, string>, body: (h: Harness) => Promise<T>): Promise<T> {
  const h = await startHarness({ env });
  try {
    return await body(h);
  } finally {
    await h.close();
  }
}

const processAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('deploy queue', () => {
  it('runs one deploy per target at a time and collapses pushes that arrive meanwhile to the newest', () =>
    withHarness({ RECORD_DEPLOY_SLEEP: '0.6' }, async (h) => {
      const secret = h.secrets.SECRET_TEAM_DE1!;
      const first = await sendGithub(h.url, pushPayload('feature/team-de1/a', commitId()), secret);
      await waitFor(() => h.server.deployer.activity().running.length === 1, 5000, 'first deploy running');
      const second = await sendGithub(h.url, pushPayload('feature/team-de1/b', commitId()), secret);
      const third = await sendGithub(h.url, pushPayload('feature/team-de1/c', commitId()), secret);
      const other = await sendGitlab(h.url, pushPayload('develop', commitId()), h.secrets.SECRET_DEVELOP!);
      expect([first.status, second.status, third.status, other.status]).toEqual([202, 202, 202, 202]);
      // Another target is not held up by team de1's deploy.
      await waitFor(() => h.server.deployer.activity().running.length === 2, 5000, 'develop running beside de1');

      await waitIdle(h);
      const state = async (res: { json: Record<string, unknown> }) => getDeployment(h, String(res.json.deploymentId));
      expect(await state(first)).toMatchObject({ state: 'succeeded' });
      expect(await state(second)).toMatchObject({ state: 'superseded', supersededBy: third.json.deploymentId });
      expect(await state(third)).toMatchObject({ state: 'succeeded' });
      const de1Runs = h.recordedDeploys().filter((d) => d.args[0]!.startsWith('feature/team-de1/'));
      expect(de1Runs.map((d) => d.args[0])).toEqual(['feature/team-de1/a', 'feature/team-de1/c']);
      const [a, c] = [await state(first), await state(third)];
      expect(Date.parse(String(c.startedAt))).toBeGreaterThanOrEqual(Date.parse(String(a.finishedAt)));
    }));

  it('does not queue a commit that is already waiting or running', () =>
    withHarness({ RECORD_DEPLOY_SLEEP: '0.5' }, async (h) => {
      const commit = commitId();
      const first = await sendGitlab(h.url, pushPayload('main', commit), h.secrets.SECRET_MAIN!);
      const again = await sendGitlab(h.url, pushPayload('main', commit), h.secrets.SECRET_MAIN!);
      expect(first.status).toBe(202);
      expect(again.status).toBe(200);
      expect(again.json).toMatchObject({ status: 'duplicate', deploymentId: first.json.deploymentId });
      expect(['queued', 'running']).toContain(again.json.reason);
      await waitIdle(h);
      expect(h.recordedDeploys()).toHaveLength(1);
    }));

  it('a replay of the commit being deployed, while a newer commit waits, is answered 200 naming the running deployment and the newer commit still deploys', () =>
    withHarness({ RECORD_DEPLOY_SLEEP: '0.5' }, async (h) => {
      const [a, b] = [commitId(), commitId()];
      const first = await sendGitlab(h.url, pushPayload('main', a), h.secrets.SECRET_MAIN!);
      await waitFor(() => h.server.deployer.activity().running.length === 1, 5000, 'first deploy running');
      const newer = await sendGitlab(h.url, pushPayload('main', b), h.secrets.SECRET_MAIN!);
      const replay = await sendGitlab(h.url, pushPayload('main', a), h.secrets.SECRET_MAIN!);
      expect([first.status, newer.status, replay.status]).toEqual([202, 202, 200]);
      expect(replay.json).toMatchObject({ status: 'duplicate', reason: 'running', deploymentId: first.json.deploymentId });
      await waitIdle(h);
      expect(await getDeployment(h, String(newer.json.deploymentId))).toMatchObject({ state: 'succeeded', commit: b });
      expect(h.recordedDeploys().map((d) => d.args[4])).toEqual([a, b]);
    }));

  it('a replay of a commit an earlier push superseded does not displace the newer waiting commit', () =>
    withHarness({ RECORD_DEPLOY_SLEEP: '0.5' }, async (h) => {
      const [a, b, c] = [commitId(), commitId(), commitId()];
      await sendGitlab(h.url, pushPayload('main', a), h.secrets.SECRET_MAIN!);
      await waitFor(() => h.server.deployer.activity().running.length === 1, 5000, 'first deploy running');
      const superseded = await sendGitlab(h.url, pushPayload('main', b), h.secrets.SECRET_MAIN!);
      const newest = await sendGitlab(h.url, pushPayload('main', c), h.secrets.SECRET_MAIN!);
      const replay = await sendGitlab(h.url, pushPayload('main', b), h.secrets.SECRET_MAIN!);
      expect(replay.status).toBe(200);
      expect(replay.json).toMatchObject({ status: 'duplicate', reason: 'superseded', deploymentId: newest.json.deploymentId });
      await waitIdle(h);
      expect(await getDeployment(h, String(superseded.json.deploymentId))).toMatchObject({ state: 'superseded', supersededBy: newest.json.deploymentId });
      expect(await getDeployment(h, String(newest.json.deploymentId))).toMatchObject({ state: 'succeeded', commit: c });
      expect(h.recordedDeploys().map((d) => d.args[4])).toEqual([a, c]);
    }));

  it('records a failing deploy script as failed with its exit code and log', () =>
    withHarness({ RECORD_DEPLOY_EXIT: '6' }, async (h) => {
      const res = await sendGitlab(h.url, pushPayload('develop'), h.secrets.SECRET_DEVELOP!);
      const deployment = await waitForDeployment(h, String(res.json.deploymentId));
      expect(deployment).toMatchObject({ state: 'failed', exitCode: 6 });
      expect(readFileSync(String(deployment.logPath), 'utf8')).toContain('recorded deploy of develop');
    }));

  it('stops a deploy at its time limit, killing its whole process group', () =>
    withHarness({ RECORD_DEPLOY_SLEEP: '30', DEPLOY_TIMEOUT_SECONDS: '1' }, async (h) => {
      const res = await sendGitlab(h.url, pushPayload('main'), h.secrets.SECRET_MAIN!);
      await waitFor(() => h.recordedDeploys().length === 1, 5000, 'the script to start');
      const deployment = await waitForDeployment(h, String(res.json.deploymentId), 15_000);
      expect(deployment.state).toBe('timed-out');
      expect(Number(deployment.durationMs)).toBeLessThan(5000);
      // The script (and with its process group, its `sleep` child) is gone.
      const scriptPid = (h.recordedDeploys()[0] as unknown as { pid: number }).pid;
      expect(processAlive(scriptPid)).toBe(false);
    }));

  it('on shutdown lets a running deploy finish within the grace period', async () => {
    const h = await startHarness({ env: { RECORD_DEPLOY_SLEEP: '0.8' } });
    const res = await sendGitlab(h.url, pushPayload('main'), h.secrets.SECRET_MAIN!);
    await waitFor(() => h.server.deployer.activity().running.length === 1, 5000, 'deploy running');
    await h.close();
    expect(h.server.store.get(String(res.json.deploymentId))?.state).toBe('succeeded');
  });

  it('on shutdown records a deploy that outlives the grace period as interrupted, and a restart keeps it so', async () => {
    const root = makeTempDir('webhook-shutdown');
    const h = await startHarness({ root, env: { RECORD_DEPLOY_SLEEP: '30', WEBHOOK_SHUTDOWN_GRACE_SECONDS: '1' } });
    const res = await sendGitlab(h.url, pushPayload('main'), h.secrets.SECRET_MAIN!);
    await waitFor(() => h.recordedDeploys().length === 1, 5000, 'the script to start');
    const started = Date.now();
    await h.close();
    expect(Date.now() - started).toBeLessThan(15_000);
    const id = String(res.json.deploymentId);
    expect(h.server.store.get(id)?.state).toBe('interrupted');

    const again = await startHarness({ root, secrets: h.secrets });
    try {
      expect(again.server.store.get(id)?.state).toBe('interrupted');
    } finally {
      await again.close();
    }
  });
});

describe('end to end with the real deploy script', () => {
  it('a signed push deploys the fixture site from a file:// repository and makes it live', async () => {
    const root = makeTempDir('webhook-e2e');
    roots.push(root);
    const repo = new FixtureRepo(join(root, 'repo'));
    const commit = repo.commit('main', { VERSION: 'e2e\n' });
    const port = await freePort();
    const env = deployEnv(root) as Record<string, string>;
    const h = await startHarness({
      root: join(root, 'server'),
      env: { DEPLOY_SCRIPT: deployScript, ...env },
      targets: (targets) => targets.map((t) => (t.key === 'main' ? { ...t, port, repo: repo.url } : t)),
    });
    try {
      const res = await sendGitlab(h.url, pushPayload('main', commit), h.secrets.SECRET_MAIN!);
      expect(res.status).toBe(202);
      const deployment = await waitForDeployment(h, String(res.json.deploymentId), 30_000);
      expect(deployment, readFileSync(String(deployment.logPath), 'utf8')).toMatchObject({ state: 'succeeded', deployedCommit: commit });
      const deployDir = join(h.root, 'sites/main');
      expect(liveRelease(deployDir)).toBe(`deploys/${String(deployment.release)}`);
      expect((await fetchBuild(port)).version).toBe('e2e');
      expect(readFileSync(String(deployment.logPath), 'utf8')).toContain('deployed');

      const again = await sendGitlab(h.url, pushPayload('main', commit), h.secrets.SECRET_MAIN!);
      expect(again.json).toMatchObject({ status: 'duplicate', reason: 'live', deploymentId: deployment.id });
    } finally {
      await h.close();
      stopFixtureSites(root);
    }
  });
});

describe('development start (npm start)', () => {
  it('generates a secret per target, prints them and accepts a push signed with one', async () => {
    const dir = makeTempDir('webhook-dev');
    const env = { PATH: process.env.PATH, WEBHOOK_PORT: '0', WEBHOOK_STATE_DIR: join(dir, 'state'), DEPLOY_ROOT: join(dir, 'sites'), DEPLOY_SCRIPT: recordDeployScript, RECORD_DEPLOY_FILE: join(dir, 'record.jsonl'), LOG_LEVEL: 'silent' };
    const dev = await startDevelopmentWebhookServer(env);
    try {
      expect(Object.keys(dev.secrets).sort()).toEqual(['SECRET_DEVELOP', 'SECRET_MAIN', 'SECRET_TEAM_DE1', 'SECRET_TEAM_DE2', 'SECRET_TEAM_FV']);
      for (const [name, value] of Object.entries(dev.secrets)) {
        expect(value).toMatch(/^[0-9a-f]{64}$/);
        expect(dev.banner).toContain(`${name}=${value}`);
      }
      const res = await sendGithub(dev.server.url, pushPayload('feature/team-fv/x'), dev.secrets.SECRET_TEAM_FV!);
      expect(res.status).toBe(202);
    } finally {
      await dev.server.close();
    }
  });

  it('refuses development secrets with NODE_ENV=production', async () => {
    await expect(startDevelopmentWebhookServer({ NODE_ENV: 'production', WEBHOOK_PORT: '0' })).rejects.toThrow(/production/);
    expect(() => createDevelopmentSecrets(seedTargets(), { NODE_ENV: 'production' })).toThrow(/production/);
  });
});

describe('the server process', () => {
  const tsx = join(process.cwd(), 'node_modules/.bin/tsx');
  const serverFile = join(process.cwd(), 'services/webhook/src/server.ts');
  const run = (env: Record<string, string>): { status: number; stderr: string } => {
    try {
      execFileSync(tsx, [serverFile], { env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env }, stdio: 'pipe', timeout: 20_000 });
      return { status: 0, stderr: '' };
    } catch (error) {
      const e = error as { status: number; stderr: Buffer };
      return { status: e.status, stderr: e.stderr.toString() };
    }
  };

  it('on SIGTERM records the running deploy as interrupted after the grace period and exits 0', async () => {
    const dir = makeTempDir('webhook-sigterm');
    const secrets = Object.fromEntries(['SECRET_MAIN', 'SECRET_DEVELOP', 'SECRET_TEAM_DE1', 'SECRET_TEAM_DE2', 'SECRET_TEAM_FV'].map((n) => [n, newSecret()]));
    const child = spawn(tsx, [serverFile], {
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        ...secrets,
        WEBHOOK_PORT: '0',
        WEBHOOK_STATE_DIR: join(dir, 'state'),
        DEPLOY_ROOT: join(dir, 'sites'),
        DEPLOY_SCRIPT: recordDeployScript,
        RECORD_DEPLOY_FILE: join(dir, 'record.jsonl'),
        RECORD_DEPLOY_SLEEP: '30',
        DEPLOY_ENV_PASS: 'RECORD_DEPLOY_FILE RECORD_DEPLOY_SLEEP',
        WEBHOOK_SHUTDOWN_GRACE_SECONDS: '1',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const port = await waitFor(() => /"port":(\d+)/.exec(output)?.[1], 15_000, 'the server to listen');
    const res = await sendGitlab(`http://127.0.0.1:${port}`, pushPayload('main'), secrets.SECRET_MAIN!);
    expect(res.status).toBe(202);
    await waitFor(() => existsSync(join(dir, 'record.jsonl')), 5000, 'the deploy to start');
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    const journal = readFileSync(join(dir, 'state/deployments.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { deployment?: { id: string; state: string } });
    const last = journal.filter((l) => l.deployment?.id === res.json.deploymentId).pop();
    expect(last?.deployment?.state).toBe('interrupted');
    expect(output).not.toContain(secrets.SECRET_MAIN);
  });

  it('refuses to start when the secrets file is readable by group or others', () => {
    const dir = makeTempDir('webhook-mode');
    const file = join(dir, 'secrets.env');
    execFileSync('sh', ['-c', `printf 'SECRET_MAIN=%s\\n' "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')" > ${file} && chmod 640 ${file}`]);
    const result = run({ WEBHOOK_SECRETS_FILE: file, WEBHOOK_PORT: '0', WEBHOOK_STATE_DIR: join(dir, 'state') });
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('mode 640');
    expect(result.stderr).toContain('chmod 600');
  });

  it('refuses to start when a target secret variable is missing, naming it', () => {
    const dir = makeTempDir('webhook-missing');
    const result = run({ SECRET_MAIN: newSecret(), WEBHOOK_PORT: '0', WEBHOOK_STATE_DIR: join(dir, 'state') });
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('SECRET_DEVELOP');
  });
});
