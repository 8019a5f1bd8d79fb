/**
 * Each build in a sandbox of its own (DEPLOY_BUILD_SANDBOX=bwrap): the deploy script as root with
 * the users of DEPLOY_ISOLATION=users, real git, the real script from a root-owned copy of the
 * platform, and builds of a team member with a grudge that try what the users alone leave open:
 * reading the platform's checkout, seeing the secrets, another target's release and cache,
 * connecting to a loopback port of the platform, leaving files in the host's /tmp and /dev/shm for
 * another target, forking without bound, writing a file past the size limit, leaving processes
 * behind and building forever. Each attempt must fail while the build itself succeeds. Needs root
 * and bubblewrap; skipped with one printed line otherwise.
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { binary, lacks } from '../../../test/helpers/requirements.js';
import { ensureUsers, removeUsers, usersOf } from '../src/host/users.js';
import { FixtureRepo, fetchBuild, freePort, liveRelease, makeTempDir, restartFixtureSite, runScript, stopFixtureSites } from './support/helpers.js';
import { installPlatform, sandboxMissing } from './support/build-sandbox.js';
import { hostileBuild, teamUsers } from './support/root-paths.js';

const missing = sandboxMissing();
if (missing) console.warn(`skipping build sandbox tests: ${missing}`);

type Team = 'a' | 'b';
const users = teamUsers('bs', ['a', 'b'] as const);
const marker = `build-sandbox-${randomBytes(4).toString('hex')}`;
let root: string;
let installed: ReturnType<typeof installPlatform>;
let repo: FixtureRepo;
let platformListener: Server;
let platformPort: number;
const ports = {} as Record<Team, number>;
const dirOf = (team: Team) => join(root, 'sites', `team-${team}`);
const branchOf = (team: Team, name: string) => `feature/team-${team}/${name}`;

function deploy(team: Team, branch: string, env: Record<string, string> = {}) {
  return runScript(installed.script, [branch, dirOf(team), String(ports[team]), repo.url], {
    RESTART_COMMAND: restartFixtureSite,
    HEALTH_TIMEOUT_SECONDS: '20',
    KEEP_RELEASES: '2',
    BUILD_USER: users[team].buildUser,
    SITE_USER: users[team].siteUser,
    DEPLOY_BUILD_SANDBOX: 'bwrap',
    ...env,
  });
}

async function deployed(team: Team, branch: string, env: Record<string, string> = {}): Promise<void> {
  const result = await deploy(team, branch, env);
  expect(result.code, result.stderr).toBe(0);
}

type Attempt = { ok: boolean; code?: string; value?: string };
/** The report a hostile build leaves in its release (dist/attack.json), read once it is live. */
const reportOf = (team: Team): Record<string, Attempt> => JSON.parse(readFileSync(join(dirOf(team), 'live/dist/attack.json'), 'utf8')) as Record<string, Attempt>;

/** Attempts of a build: each `name: () => value` (sync or async) recorded as ok/code into dist/attack.json. */
const ATTEMPTS = `
const report = {};
const attempt = async (name, fn) => {
  try { report[name] = { ok: true, value: String(await fn()).slice(0, 2000) }; }
  catch (error) { report[name] = { ok: false, code: error.code ?? String(error.message) }; }
};
const connect = (port) => new Promise((resolve, reject) => {
  const net = require('node:net');
  const socket = net.connect(port, '127.0.0.1', () => { socket.destroy(); resolve('connected'); });
  socket.on('error', reject);
  socket.setTimeout(3000, () => { socket.destroy(); reject(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })); });
});
const saveReport = () => { fs.mkdirSync('dist', { recursive: true }); fs.writeFileSync('dist/attack.json', JSON.stringify(report)); };
`;
const build = (attacks: string) =>
  hostileBuild({ before: `import { createRequire as makeRequire } from 'node:module';\nconst require = makeRequire(import.meta.url);\n${ATTEMPTS}\n${attacks}\nsaveReport();` });

describe.skipIf(missing)('each build in a sandbox of its own (DEPLOY_BUILD_SANDBOX=bwrap)', () => {
  beforeAll(async () => {
    root = makeTempDir('build-sandbox');
    chmodSync(root, 0o711);
    ensureUsers(usersOf([users.a, users.b]));
    installed = installPlatform(root);
    repo = new FixtureRepo(join(root, 'repo'));
    ports.a = await freePort();
    ports.b = await freePort();
    mkdirSync(join(root, 'sites'), { mode: 0o711 });
    // Stands in for the webhook, the API or the database on loopback.
    platformListener = createServer((socket) => socket.on('error', () => {}).end('platform\n'));
    await new Promise<void>((resolve) => platformListener.listen(0, '127.0.0.1', resolve));
    platformPort = (platformListener.address() as { port: number }).port;
    repo.commit(branchOf('b', 'live'), { VERSION: 'b-live\n' });
    await deployed('b', branchOf('b', 'live'));
    repo.commit(branchOf('a', 'base'), { VERSION: 'a-base\n' });
    await deployed('a', branchOf('a', 'base'));
  }, 120_000);

  afterAll(async () => {
    await new Promise((resolve) => platformListener?.close(resolve));
    if (root) {
      stopFixtureSites(root);
      rmSync(root, { recursive: true, force: true });
    }
    for (const dir of ['/tmp', '/var/tmp', '/dev/shm']) rmSync(join(dir, marker), { force: true });
    removeUsers(Object.values(users).flatMap((u) => [u.buildUser, u.siteUser]));
  });

  it('a build sees neither the platform\'s checkout, the secrets nor another target (its deploy root holds its own alone), reaches no loopback port of the platform, and leaves nothing in the host\'s /tmp or /dev/shm', async () => {
    const branch = branchOf('a', 'look-around');
    repo.commit(branch, {
      'attack-plan.json': JSON.stringify({
        targetsFile: installed.targetsFile,
        script: installed.script,
        secretsFile: installed.secretsFile,
        secretsDir: installed.secretsDir,
        otherLive: join(dirOf('b'), 'live/REVISION'),
        otherCache: join(dirOf('b'), 'cache'),
        otherTarget: dirOf('b'),
        deployRoot: join(root, 'sites'),
        port: platformPort,
        marker,
      }),
      'build.mjs': build(`
        await attempt('platform checkout', () => fs.readFileSync(plan.targetsFile, 'utf8'));
        await attempt('platform scripts', () => fs.readFileSync(plan.script, 'utf8'));
        await attempt('secrets file', () => fs.readFileSync(plan.secretsFile, 'utf8'));
        await attempt('secrets folder', () => fs.statSync(plan.secretsDir).mode);
        await attempt('other target live release', () => fs.readFileSync(plan.otherLive, 'utf8'));
        await attempt('other target cache', () => fs.statSync(plan.otherCache).uid);
        await attempt('other target folder', () => fs.statSync(plan.otherTarget).uid);
        await attempt('deploy root', () => fs.readdirSync(plan.deployRoot).join(','));
        await attempt('platform loopback port', () => connect(plan.port));
        for (const dir of ['/tmp', '/var/tmp', '/dev/shm']) await attempt('write ' + dir, () => { fs.writeFileSync(dir + '/' + plan.marker, 'left by team a'); return 'written'; });`),
      VERSION: 'a-look-around\n',
    });

    await deployed('a', branch);

    const report = reportOf('a');
    for (const name of ['platform checkout', 'platform scripts', 'secrets file', 'secrets folder', 'other target live release', 'other target cache', 'other target folder']) {
      expect(report[name], `${name}: not in the build's view at all`).toEqual({ ok: false, code: 'ENOENT' });
    }
    expect(report['deploy root'], 'the deploy root holds its own target only').toEqual({ ok: true, value: 'team-a' });
    expect(report['platform loopback port']).toMatchObject({ ok: false, code: 'ECONNREFUSED' });
    for (const dir of ['/tmp', '/var/tmp', '/dev/shm']) expect(existsSync(join(dir, marker)), `${dir} of the host`).toBe(false);
    expect(await fetchBuild(ports.a)).toMatchObject({ version: 'a-look-around', dependency: 'fixture-dep 1.0.0' });
  }, 60_000);

  it('another target\'s build gets a /tmp and /dev/shm of its own: it finds nothing team a left there', async () => {
    const branch = branchOf('b', 'look-around');
    repo.commit(branch, {
      'attack-plan.json': JSON.stringify({ marker }),
      'build.mjs': build(`
        for (const dir of ['/tmp', '/dev/shm']) await attempt('read ' + dir, () => fs.readFileSync(dir + '/' + plan.marker, 'utf8'));`),
      VERSION: 'b-look-around\n',
    });
    await deployed('b', branch);

    const report = reportOf('b');
    expect(report['read /tmp']).toEqual({ ok: false, code: 'ENOENT' });
    expect(report['read /dev/shm']).toEqual({ ok: false, code: 'ENOENT' });
  }, 60_000);

  it('a build cannot fork without bound, write a file past the size limit or leave a process behind', async () => {
    const branch = branchOf('a', 'limits');
    repo.commit(branch, {
      'attack-plan.json': JSON.stringify({}),
      'build.mjs': build(`
        const children = [];
        for (let i = 0; i < 300; i++) {
          const child = cp.spawn('sleep', ['30'], { stdio: 'ignore' });
          child.on('error', () => {});
          if (child.pid === undefined) break;
          children.push(child);
        }
        report['processes started'] = { ok: true, value: String(children.length) };
        for (const child of children) child.kill('SIGKILL');
        await new Promise((resolve) => setTimeout(resolve, 300)); // reaped, so they no longer count
        await attempt('file of 9 MiB', () => { fs.writeFileSync('big.bin', Buffer.alloc(9 << 20)); return 'written'; });
        cp.spawn('setsid', ['sh', '-c', 'sleep 1; echo escaped > "$HOME/escaped"; exec sleep 300'], { detached: true, stdio: 'ignore' }).unref();`),
      VERSION: 'a-limits\n',
    });

    await deployed('a', branch, { DEPLOY_BUILD_TASKS_MAX: '64', DEPLOY_BUILD_FILE_SIZE_MAX: '8M' });

    const report = reportOf('a');
    expect(Number(report['processes started']!.value)).toBeLessThan(64);
    expect(report['file of 9 MiB']).toEqual({ ok: false, code: 'EFBIG' });
    expect(statSync(join(dirOf('a'), 'live/big.bin')).size).toBeLessThanOrEqual(8 << 20);
    expect(spawnSync('pgrep', ['-U', users.a.buildUser]).status, 'no process of the build user').toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(existsSync(join(dirOf('a'), 'cache/home/escaped'))).toBe(false);
    expect(await fetchBuild(ports.a)).toMatchObject({ version: 'a-limits' });
  }, 60_000);

  it('a build that runs past DEPLOY_BUILD_TIMEOUT_SECONDS is stopped: the deploy fails (exit 6) and live stays', async () => {
    const live = liveRelease(dirOf('a'));
    const branch = branchOf('a', 'forever');
    repo.commit(branch, { SLOW_BUILD: '40\n', VERSION: 'a-never\n' });
    const started = Date.now();

    const result = await deploy('a', branch, { DEPLOY_BUILD_TIMEOUT_SECONDS: '2' });

    expect(result.code, result.stderr).toBe(6);
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(result.stderr).toMatch(/the build step timed out after 2 s/);
    expect(liveRelease(dirOf('a'))).toBe(live);
    expect(spawnSync('pgrep', ['-U', users.a.buildUser]).status).toBe(1);
  }, 150_000);

  it('a build that fills the disk with files each under the size limit is stopped at DEPLOY_BUILD_DISK_MAX: the deploy fails (exit 6), live stays, nothing of the build runs on', async () => {
    const live = liveRelease(dirOf('a'));
    const branch = branchOf('a', 'disk');
    // 4 MiB files, each under DEPLOY_BUILD_FILE_SIZE_MAX, 8 per second, 480 MiB at most (so that
    // without the budget the build ends by itself); half of them in HOME (cache/home), half in the release.
    repo.commit(branch, {
      'build.mjs': hostileBuild({
        before: `for (let i = 0; i < 120; i++) {
            fs.writeFileSync(\`fill-\${i}.bin\`, Buffer.alloc(2 << 20, 1));
            fs.writeFileSync(\`\${process.env.HOME}/fill-\${i}.bin\`, Buffer.alloc(2 << 20, 1));
            await new Promise((resolve) => setTimeout(resolve, 120));
          }`,
      }),
      VERSION: 'a-disk\n',
    });
    const started = Date.now();

    const result = await deploy('a', branch, { DEPLOY_BUILD_DISK_MAX: '40M', DEPLOY_BUILD_FILE_SIZE_MAX: '8M' });

    expect(result.code, result.stderr).toBe(6);
    expect(result.stderr).toMatch(/the build step used \d+ bytes of disk, more than DEPLOY_BUILD_DISK_MAX \(40M\); it was stopped/);
    expect(Date.now() - started, 'stopped long before the build would have ended by itself').toBeLessThan(12_000);
    expect(liveRelease(dirOf('a'))).toBe(live);
    expect(spawnSync('pgrep', ['-U', users.a.buildUser]).status, 'no process of the build user').toBe(1);
    expect(await fetchBuild(ports.a)).not.toMatchObject({ version: 'a-disk' });
  }, 60_000);

  it('a build that allocates past DEPLOY_BUILD_MEMORY_MAX is killed (where the deploy may make a memory cgroup): the deploy fails (exit 6) and live stays', async ({ skip }) => {
    const live = liveRelease(dirOf('a'));
    const branch = branchOf('a', 'memory');
    // At most 512 MiB in any case, so that without a limit the build ends by itself.
    repo.commit(branch, { 'build.mjs': hostileBuild({ before: 'const kept = []; for (let i = 0; i < 32; i++) kept.push(Buffer.alloc(16 << 20, 1));' }), VERSION: 'a-memory\n' });

    const result = await deploy('a', branch, { DEPLOY_BUILD_MEMORY_MAX: '128M' });

    const noCgroup = /no cgroup limits[^\n]*/.exec(result.stdout);
    if (noCgroup && lacks('the memory limit case', { ok: false, reason: noCgroup[0] })) return skip();
    expect(result.code, result.stderr).toBe(6);
    expect(liveRelease(dirOf('a'))).toBe(live);
  }, 60_000);

  it('the registry is reached through the proxy socket the operator names (DEPLOY_BUILD_PROXY_SOCKET), and nothing else is', async () => {
    const proxyDir = join(root, 'proxy');
    mkdirSync(proxyDir, { mode: 0o755 });
    const socketPath = join(proxyDir, 'proxy.sock');
    const seen: string[] = [];
    const proxy: HttpServer = createHttpServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      res.writeHead(200, { 'content-type': 'text/plain' }).end('from the registry\n');
    });
    await new Promise<void>((resolve) => proxy.listen(socketPath, resolve));
    chmodSync(socketPath, 0o666);
    try {
      const branch = branchOf('a', 'registry');
      repo.commit(branch, {
        'attack-plan.json': JSON.stringify({ port: platformPort }),
        'build.mjs': build(`
          const http = require('node:http');
          const viaProxy = () => new Promise((resolve, reject) => {
            const proxyUrl = new URL(process.env.npm_config_proxy);
            http.get({ host: proxyUrl.hostname, port: proxyUrl.port, path: 'http://registry.test/fixture-dep', headers: { host: 'registry.test' } }, (res) => {
              let body = ''; res.on('data', (c) => (body += c)); res.on('end', () => resolve(body.trim()));
            }).on('error', reject);
          });
          await attempt('registry through the proxy', viaProxy);
          await attempt('platform loopback port', () => connect(plan.port));`),
        VERSION: 'a-registry\n',
      });

      await deployed('a', branch, { DEPLOY_BUILD_PROXY_SOCKET: socketPath });

      const report = reportOf('a');
      expect(report['registry through the proxy']).toEqual({ ok: true, value: 'from the registry' });
      expect(seen).toEqual(['GET http://registry.test/fixture-dep']);
      expect(report['platform loopback port']).toMatchObject({ ok: false, code: 'ECONNREFUSED' });
    } finally {
      await new Promise((resolve) => proxy.close(resolve));
    }
  }, 60_000);

  it.skipIf(lacks('the DEPLOY_BUILD_NETNS case', binary('ip', 'apt-get install iproute2')))('a network namespace the operator made (DEPLOY_BUILD_NETNS) is joined instead: a registry mirror in it is reachable, the platform\'s loopback still is not', async ({ skip }) => {
    const netns = `bs-${marker.slice(-8)}`;
    const add = spawnSync('sh', ['-c', `ip netns add ${netns} && ip -n ${netns} link set lo up`], { encoding: 'utf8' });
    if (add.status !== 0 && lacks('the DEPLOY_BUILD_NETNS case', { ok: false, reason: `cannot make a network namespace here: ${add.stderr.trim()}` })) return skip();
    const mirror = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', "require('node:http').createServer((q, r) => r.end('mirror')).listen(4873, '127.0.0.1', () => console.log('listening'))"], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      await new Promise<void>((resolve) => mirror.stdout!.on('data', (chunk: Buffer) => chunk.toString().includes('listening') && resolve()));
      const branch = branchOf('a', 'netns');
      repo.commit(branch, {
        'attack-plan.json': JSON.stringify({ port: platformPort }),
        'build.mjs': build(`
          await attempt('mirror in the namespace', () => connect(4873));
          await attempt('platform loopback port', () => connect(plan.port));`),
        VERSION: 'a-netns\n',
      });

      await deployed('a', branch, { DEPLOY_BUILD_NETNS: `/run/netns/${netns}` });

      const report = reportOf('a');
      expect(report['mirror in the namespace']).toEqual({ ok: true, value: 'connected' });
      expect(report['platform loopback port']).toMatchObject({ ok: false, code: 'ECONNREFUSED' });
    } finally {
      mirror.kill('SIGKILL');
      spawnSync('ip', ['netns', 'del', netns]);
    }
  }, 60_000);

  it('an unknown DEPLOY_BUILD_SANDBOX stops the deploy before anything is built (exit 2)', async () => {
    const live = liveRelease(dirOf('a'));
    const result = await deploy('a', branchOf('a', 'base'), { DEPLOY_BUILD_SANDBOX: 'chroot' });
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toMatch(/DEPLOY_BUILD_SANDBOX/);
    expect(liveRelease(dirOf('a'))).toBe(live);
  });
});
