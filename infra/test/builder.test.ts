import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../services/shared/testing/ports.js';
import { startControlServer, Supervisor } from '../sites/supervisor.js';
import { branchMatches, Builder } from '../builder/builder.js';
import { spoolPaths } from '../builder/spool.js';
import { eventually } from '../../test/helpers/wait.js';

/**
 * A target's builder with its spool, driven by the real submit client (a separate process, as the
 * webhook's launcher runs it), a stand-in deploy script that does what a test needs, and a real site
 * supervisor behind a control socket for the health check. No root needed.
 */

const REPO = join(import.meta.dirname, '..', '..');
const COMMIT = 'a'.repeat(40);
/** A release name as deploy-branch.sh makes them (a 14-digit UTC timestamp). */
const STAMP = '20260101000000';
let root: string;
let spool: string;
let deployDir: string;
let controlSocket: string;
let sitePort: number;
let supervisor: Supervisor;
let control: Server;
let builder: Builder | undefined;

/** The stand-in deploy script: its behaviour is chosen by the file MODE in its working tree. */
const SCRIPT = `#!/bin/bash
set -u
echo "args: $*"
echo "env: SERVICE_NAME=$SERVICE_NAME BUILD_USER=\${BUILD_USER:-} SITE_DIR=\${SITE_DIR:-}"
mode=$(cat "$2/MODE" 2>/dev/null || echo ok)
case $mode in
  ok) mkdir -p "$2/deploys/${STAMP}"; echo "$5" > "$2/deploys/${STAMP}/REVISION"; ln -sfn deploys/${STAMP} "$2/live"; echo "release=${STAMP} commit=$5"; exit 0 ;;
  keep) echo "the target's directory as the test left it"; exit 0 ;;
  fail) echo "npm ci failed" >&2; exit 5 ;;
  slow) trap 'echo "got SIGTERM, restoring"; exit 143' TERM; sleep 30 & wait; exit 0 ;;
  grow) trap 'echo "stopped while growing"; exit 143' TERM; head -c 3000000 /dev/zero > "$2/big"; sleep 30 & wait ;;
  health) node -e "fetch('http://127.0.0.1:$3/teapot').then(r => console.log('health status ' + r.status))"; exit 0 ;;
esac
`;

const SITE = `
import { createServer } from 'node:http';
createServer((req, res) => res.writeHead(req.url === '/teapot' ? 418 : 200).end('the page itself')).listen(Number(process.env.PORT), '127.0.0.1');
process.on('SIGTERM', () => process.exit(0));
`;

function startBuilder(overrides: Partial<ConstructorParameters<typeof Builder>[0]> = {}): Builder {
  builder = new Builder({
    target: { key: 'feature/team-de1', matchPattern: 'prefix', repo: 'https://git.example.org/site.git', port: sitePort, service: 'astro-feature-team-de1', siteDir: 'web' },
    spool,
    deployDir,
    deployScript: join(root, 'deploy.sh'),
    controlSocket,
    scriptEnv: { PATH: process.env.PATH ?? '', BUILD_USER: 'builduser-feature-de1' },
    timeoutMs: 60_000,
    diskLimitBytes: 1024 * 1024 * 1024,
    diskCheckMs: 100,
    killGraceMs: 2_000,
    logger: pino({ level: 'silent' }),
    pollMs: 50,
    ...overrides,
  });
  builder.start();
  return builder;
}

function submitCli(args: string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, ['--import', 'tsx', 'infra/builder/submit.ts', ...args], {
    cwd: REPO,
    env: { PATH: process.env.PATH ?? '', BUILD_PICKUP_TIMEOUT_SECONDS: '5', BUILD_CANCEL_GRACE_SECONDS: '10', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => child.once('exit', (code) => resolve({ code, stdout, stderr })));
  return { child, done };
}

/** The log of the (one) request in the spool so far. */
function jobLog(): string {
  const { jobs } = spoolPaths(spool);
  const name = existsSync(jobs) ? readdirSync(jobs).find((n) => n.endsWith('.log')) : undefined;
  return name ? readFileSync(join(jobs, name), 'utf8') : '';
}

const deploy = (branch = 'feature/team-de1/map', commit = COMMIT) => submitCli([branch, spool, '1', 'https://attacker.example/other.git', commit]).done;
const mode = (value: string) => writeFileSync(join(deployDir, 'MODE'), value);

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'builder-'));
  writeFileSync(join(root, 'deploy.sh'), SCRIPT, { mode: 0o755 });
  controlSocket = join(root, 'control.sock');
  sitePort = await freePort();
  // The site container's side: a live release of a tiny site under the supervisor, on its control socket.
  const siteDeploy = join(root, 'site');
  mkdirSync(join(siteDeploy, 'deploys', 'r0'), { recursive: true });
  writeFileSync(join(siteDeploy, 'deploys', 'r0', 'server.mjs'), SITE);
  symlinkSync('deploys/r0', join(siteDeploy, 'live'));
  supervisor = new Supervisor({
    sites: [{ service: 'astro-feature-team-de1', port: await freePort(), deployDir: siteDeploy }],
    startCommand: [process.execPath, 'server.mjs'],
    host: '127.0.0.1',
    logger: pino({ level: 'silent' }),
    readyTimeoutMs: 5_000,
    env: { PATH: process.env.PATH },
  });
  control = await startControlServer(controlSocket, supervisor, pino({ level: 'silent' }));
  await supervisor.startAll();
});

afterEach(async () => {
  await builder?.stop();
  builder = undefined;
  rmSync(spool, { recursive: true, force: true });
  rmSync(deployDir, { recursive: true, force: true });
});

afterAll(async () => {
  control.close();
  await supervisor.stopAll();
  rmSync(root, { recursive: true, force: true });
});

describe('a deploy through the spool', () => {
  const fresh = () => {
    spool = join(root, `spool-${Math.random().toString(36).slice(2)}`);
    deployDir = join(root, `target-${Math.random().toString(36).slice(2)}`);
    mkdirSync(spool);
    mkdirSync(deployDir);
  };
  const mkdir = (dir: string) => mkdirSync(dir, { recursive: true });

  it("runs the deploy script with the target's own repository, directory and port, whatever the webhook passed; the client gets its output and exit code", async () => {
    fresh();
    startBuilder();
    const result = await deploy();
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain(`args: feature/team-de1/map ${deployDir} ${sitePort} https://git.example.org/site.git ${COMMIT}`);
    expect(result.stdout).toContain('env: SERVICE_NAME=astro-feature-team-de1 BUILD_USER=builduser-feature-de1 SITE_DIR=web');
    expect(result.stdout).toContain(`release=${STAMP} commit=${COMMIT}`);
  });

  it('mirrors what is live into the spool, so the webhook reads the live commit without seeing a release', async () => {
    fresh();
    startBuilder();
    expect((await deploy()).code).toBe(0);
    const paths = spoolPaths(spool);
    expect(readlinkSync(paths.live)).toBe(`deploys/${STAMP}`);
    expect(readFileSync(join(paths.live, 'REVISION'), 'utf8').trim()).toBe(COMMIT);
  });

  /** The target's directory as a build may leave it: `live` -> deploys/<STAMP>, whose REVISION `make` creates. */
  const liveRevision = (make: (revision: string) => void) => {
    mkdir(join(deployDir, 'deploys', STAMP));
    symlinkSync(`deploys/${STAMP}`, join(deployDir, 'live'));
    make(join(deployDir, 'deploys', STAMP, 'REVISION'));
    mode('keep');
  };
  const mirroredRevision = () => readFileSync(join(spoolPaths(spool).deploys, STAMP, 'REVISION'), 'utf8');

  it('mirrors a REVISION that is a FIFO without waiting for a writer: the deploy is answered, the next one taken', async () => {
    fresh();
    startBuilder();
    // After the builder's start, so that a reader that waits blocks this deploy (and this test) for 5 s, not for ever.
    liveRevision((revision) => execFileSync('mkfifo', [revision]));
    // A writer that would answer a reader waiting on the FIFO, but only after 5 s.
    const revision = join(deployDir, 'deploys', STAMP, 'REVISION');
    const writer = spawn('sh', ['-c', `sleep 5; printf '%s\\n' ${'d'.repeat(40)} > "$0" && touch "$0.written"`, revision], { stdio: 'ignore' });
    try {
      const started = Date.now();
      const result = await deploy();
      expect(result.code, result.stdout).toBe(0);
      expect(existsSync(`${revision}.written`), 'the builder waited for the FIFO\'s writer').toBe(false);
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(readlinkSync(spoolPaths(spool).live)).toBe(`deploys/${STAMP}`);
      expect(mirroredRevision()).toBe('');
      rmSync(revision);
      mode('ok');
      expect((await deploy()).code).toBe(0);
      expect(mirroredRevision()).toBe(`${COMMIT}\n`);
    } finally {
      writer.kill('SIGKILL');
    }
  }, 30_000);

  it('mirrors a REVISION that is a link without following it: a root-only file it points to stays where it is', async () => {
    fresh();
    // Shaped like a commit id, so only the link itself gives it away.
    const secret = join(root, `root-only-${Math.random().toString(36).slice(2)}`);
    writeFileSync(secret, `${'e'.repeat(40)}\n`, { mode: 0o600 });
    liveRevision((revision) => symlinkSync(secret, revision));
    startBuilder();
    expect((await deploy()).code).toBe(0);
    expect(mirroredRevision()).toBe('');
    const spooled = spawnSync('grep', ['-r', 'e'.repeat(40), spool], { encoding: 'utf8' });
    expect(spooled.stdout).toBe('');
  });

  it('mirrors neither a REVISION larger than a commit id nor one that is not a commit id, nor a release not named as one', async () => {
    fresh();
    liveRevision((revision) => writeFileSync(revision, `${COMMIT}\n`.repeat(200_000)));
    startBuilder();
    expect((await deploy()).code).toBe(0);
    expect(mirroredRevision()).toBe('');
    await builder?.stop();
    rmSync(join(deployDir, 'deploys', STAMP, 'REVISION'));
    writeFileSync(join(deployDir, 'deploys', STAMP, 'REVISION'), 'not a commit\n');
    startBuilder();
    expect((await deploy()).code).toBe(0);
    expect(mirroredRevision()).toBe('');
    await builder?.stop();
    rmSync(join(deployDir, 'live'));
    symlinkSync('deploys/..', join(deployDir, 'live'));
    startBuilder();
    expect((await deploy()).code).toBe(0);
    expect(existsSync(spoolPaths(spool).live)).toBe(false);
  });

  it("passes the deploy script's failure on unchanged (exit 5: npm ci failed)", async () => {
    fresh();
    mode('fail');
    startBuilder();
    const result = await deploy();
    expect(result.code).toBe(5);
    expect(result.stdout).toContain('npm ci failed');
  });

  it('refuses a branch of another target: nothing runs (exit 2)', async () => {
    fresh();
    startBuilder();
    const result = await deploy('main');
    expect(result.code).toBe(2);
    expect(result.stdout).toContain('builder: refused: branch main does not belong to target feature/team-de1');
    expect(result.stdout).not.toContain('args:');
  });

  it('refuses a request that names anything but branch and commit (a repository of its own)', async () => {
    fresh();
    startBuilder();
    const paths = spoolPaths(spool);
    mkdirSync(paths.jobs, { recursive: true });
    writeFileSync(paths.request('evil-0000001'), JSON.stringify({ id: 'evil-0000001', branch: 'feature/team-de1/x', repo: 'https://attacker.example/x.git' }));
    await eventually('the request answered', () => existsSync(paths.exit('evil-0000001')), 5_000);
    expect(readFileSync(paths.exit('evil-0000001'), 'utf8').trim()).toBe('2');
    expect(readFileSync(paths.log('evil-0000001'), 'utf8')).toContain('malformed request (only id, branch and commit are accepted)');
  });

  it('stops a deploy that runs past its deadline (SIGTERM to its process group: the script restores)', async () => {
    fresh();
    mode('slow');
    startBuilder({ timeoutMs: 500 });
    const result = await deploy();
    expect(result.code).toBe(143);
    expect(result.stdout).toContain('builder: stopping the deploy: it ran longer than 0.5 s');
    expect(result.stdout).toContain('got SIGTERM, restoring');
  });

  it("stops a deploy that grows the target's directory past its disk budget", async () => {
    fresh();
    mode('grow');
    startBuilder({ diskLimitBytes: 1024 * 1024 });
    const result = await deploy();
    expect(result.code).toBe(143);
    expect(result.stdout).toMatch(/builder: stopping the deploy: the target's directory grew by \d+ MiB, more than 1 MiB/);
  });

  it('stops the deploy when the webhook gives up on it (the client is signalled)', async () => {
    fresh();
    mode('slow');
    startBuilder();
    const { child, done } = submitCli(['feature/team-de1/map', spool, '1', 'x', COMMIT]);
    await eventually('the deploy running', () => jobLog().includes('args:'), 5_000);
    child.kill('SIGTERM');
    const result = await done;
    expect(result.code).toBe(143);
    expect(result.stdout).toContain('builder: stopping the deploy: cancelled by the webhook');
    expect(result.stdout).toContain('got SIGTERM, restoring');
  });

  it('withdraws a request no builder takes, and says so (exit 1)', async () => {
    fresh();
    const result = await submitCli(['feature/team-de1/map', spool, '1', 'x', COMMIT], { BUILD_PICKUP_TIMEOUT_SECONDS: '0.5' }).done;
    expect(result.code).toBe(1);
    expect(result.stdout).toContain('the builder did not take the request within 0.5 s; withdrawn');
    expect(existsSync(spoolPaths(spool).jobs)).toBe(true);
  });

  it("answers the deploy script's health check on 127.0.0.1:<port> with the status the site container reports, not the page", async () => {
    fresh();
    mode('health');
    startBuilder();
    const result = await deploy();
    expect(result.code, result.stdout).toBe(0);
    expect(result.stdout).toContain('health status 418');
  });
});

describe('which branches belong to a target', () => {
  it('follows the webhook\'s rule: exact, or the prefix and a slash and more', () => {
    expect(branchMatches({ key: 'main', matchPattern: 'exact' }, 'main')).toBe(true);
    expect(branchMatches({ key: 'main', matchPattern: 'exact' }, 'main/x')).toBe(false);
    expect(branchMatches({ key: 'feature/team-de1', matchPattern: 'prefix' }, 'feature/team-de1/x')).toBe(true);
    expect(branchMatches({ key: 'feature/team-de1', matchPattern: 'prefix' }, 'feature/team-de1/')).toBe(false);
    expect(branchMatches({ key: 'feature/team-de1', matchPattern: 'prefix' }, 'feature/team-de10/x')).toBe(false);
  });
});

