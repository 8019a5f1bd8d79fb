import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync, renameSync } from 'node:fs';
import type { Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sendControlRequest } from '../sites/restart-client.js';
import { startControlServer, Supervisor } from '../sites/supervisor.js';
import { freePort } from '../../services/shared/testing/ports.js';
import { eventually } from '../../test/helpers/wait.js';

/**
 * The sites supervisor with real processes: small HTTP "sites" in release directories, restarted
 * through the control socket by the real `sites-restart` client (a separate process), as the
 * webhook container's deploy script does.
 */

const REPO = new URL('../..', import.meta.url).pathname;
const SITE_SERVER = `
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
const release = readFileSync(new URL('./RELEASE', import.meta.url), 'utf8').trim();
if (release === 'broken') setTimeout(() => process.exit(3), 200);
else createServer((req, res) => res.end(JSON.stringify({ pid: process.pid, release }))).listen(Number(process.env.PORT), process.env.HOST);
process.on('SIGTERM', () => process.exit(0));
`;

let root: string;
let socketPath: string;
let supervisor: Supervisor;
let control: Server;
const ports: Record<string, number> = {};

function release(deployDir: string, name: string, content = name): string {
  const dir = join(deployDir, 'deploys', name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'server.mjs'), SITE_SERVER);
  writeFileSync(join(dir, 'RELEASE'), content);
  return dir;
}

/** Switch `live` atomically, like the deploy script (symlink under a temp name, then rename). */
function goLive(deployDir: string, name: string): void {
  const temp = join(deployDir, `live.tmp-${name}`);
  symlinkSync(join('deploys', name), temp);
  renameSync(temp, join(deployDir, 'live'));
}

const fetchSite = async (service: string) => (await (await fetch(`http://127.0.0.1:${ports[service]}/`)).json()) as { pid: number; release: string };

function restartCli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', 'infra/sites/restart-client.ts', ...args], { cwd: REPO, env: { PATH: process.env.PATH ?? '', SITES_CONTROL_SOCKET: socketPath } }, (error, stdout, stderr) =>
      resolve({ code: error ? Number(error.code) : 0, stdout, stderr }),
    );
  });
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'sites-'));
  socketPath = join(root, 'control.sock');
  ports['astro-main'] = await freePort();
  ports['astro-feature-team-de1'] = await freePort();
  for (const name of ['main', 'feature-de1']) {
    const deployDir = join(root, name);
    release(deployDir, 'r1');
    goLive(deployDir, 'r1');
  }
  supervisor = new Supervisor({
    sites: [
      { service: 'astro-main', port: ports['astro-main'] as number, deployDir: join(root, 'main') },
      { service: 'astro-feature-team-de1', port: ports['astro-feature-team-de1'] as number, deployDir: join(root, 'feature-de1') },
    ],
    startCommand: [process.execPath, 'server.mjs'],
    host: '127.0.0.1',
    logger: pino({ level: 'silent' }),
    readyTimeoutMs: 3_000,
    stopGraceMs: 2_000,
    env: { PATH: process.env.PATH },
  });
  control = await startControlServer(socketPath, supervisor, pino({ level: 'silent' }));
  await supervisor.startAll();
});

afterAll(async () => {
  control.close();
  await supervisor.stopAll();
  rmSync(root, { recursive: true, force: true });
});

describe('restarting a branch site over the control socket', () => {
  it('starts every site that has a live release', async () => {
    expect((await fetchSite('astro-main')).release).toBe('r1');
    expect((await fetchSite('astro-feature-team-de1')).release).toBe('r1');
  });

  it('the sites-restart client restarts the named site and returns once it answers', async () => {
    const before = await fetchSite('astro-main');
    const result = await restartCli(['astro-main']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/astro-main running \(pid \d+\)/);
    const after = await fetchSite('astro-main');
    expect(after.pid).not.toBe(before.pid);
    expect(after.pid).toBe(supervisor.pidOf('astro-main'));
  });

  it('a restart after a deploy serves the new release; the other site is untouched', async () => {
    const other = await fetchSite('astro-feature-team-de1');
    release(join(root, 'main'), 'r2');
    goLive(join(root, 'main'), 'r2');
    expect((await fetchSite('astro-main')).release).toBe('r1'); // still the old process until restarted
    expect((await restartCli(['astro-main'])).code).toBe(0);
    expect((await fetchSite('astro-main')).release).toBe('r2');
    expect((await fetchSite('astro-feature-team-de1')).pid).toBe(other.pid);
  });

  it('a release that never answers fails the restart (the deploy script then rolls back)', async () => {
    release(join(root, 'main'), 'r3', 'broken');
    goLive(join(root, 'main'), 'r3');
    const result = await restartCli(['astro-main']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('exited before it accepted connections');
    goLive(join(root, 'main'), 'r2');
    expect((await restartCli(['astro-main'])).code).toBe(0);
    expect((await fetchSite('astro-main')).release).toBe('r2');
  });

  it('a crashed site is started again by the supervisor', async () => {
    const before = await fetchSite('astro-feature-team-de1');
    process.kill(before.pid, 'SIGKILL');
    const after = await eventually(
      'the site answering from a new process',
      async () => {
        const site = await fetchSite('astro-feature-team-de1').catch(() => undefined);
        return site && site.pid !== before.pid ? site : undefined;
      },
      5_000,
      100,
    );
    expect(after.pid).not.toBe(before.pid);
  });
});

describe('what the channel refuses', () => {
  it('a service the targets file does not define', async () => {
    const result = await restartCli(['astro-feature-team-de10']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('unknown service astro-feature-team-de10');
  });

  it('a name with shell metacharacters is inert data, refused as malformed', async () => {
    const marker = join(root, 'pwned');
    const result = await restartCli([`astro-main;touch ${marker}`]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('malformed request');
    expect(() => statSync(marker)).toThrow();
  });

  it('a probe answers the status the site gives a path, never its content', async () => {
    const response = await sendControlRequest(socketPath, { action: 'probe', service: 'astro-main', path: '/' }, 2_000);
    expect(response).toEqual({ ok: true, service: 'astro-main', status: 200 });
  });

  it('a probe path that could end the request line early (a space, a line break)', async () => {
    for (const path of ['/ HTTP/1.1\r\nHost: x', '/a b', 'relative']) {
      const response = await sendControlRequest(socketPath, { action: 'probe', service: 'astro-main', path }, 2_000);
      expect(response, path).toEqual({ ok: false, error: 'malformed request' });
    }
  });

  it('any action other than restart, probe and ping', async () => {
    const response = await sendControlRequest(socketPath, { action: 'exec', command: 'id' } as never, 2_000);
    expect(response).toEqual({ ok: false, error: 'malformed request' });
  });

  it('an oversized request', async () => {
    const response = await sendControlRequest(socketPath, { action: 'restart', service: `astro-${'x'.repeat(2_000)}` }, 2_000);
    expect(response).toEqual({ ok: false, error: 'request too large' });
  });

  it('answers ping (the container health check) and exits 2 on bad usage', async () => {
    expect((await restartCli(['--ping'])).code).toBe(0);
    expect((await restartCli([])).code).toBe(2);
  });

  it('the socket is accessible to its owner and group only', () => {
    expect(statSync(socketPath).mode & 0o777).toBe(0o660);
  });
});
