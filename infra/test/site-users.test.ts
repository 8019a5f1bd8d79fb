import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { lacks, requirements } from '../../test/helpers/requirements.js';
import { freePort } from '../../services/shared/testing/ports.js';
import { Supervisor } from '../sites/supervisor.js';

/**
 * The sites supervisor starts every site as its target's own site user (as the rendered systemd
 * units do with User=): a real Unix user created with useradd, a release readable by that user's
 * group only, and a site that reports its uid and what it can read. Needs root.
 */
const missing = lacks('site user tests', requirements.root('useradd and starting a process as another user'));

const user = `ws-sup${randomBytes(2).toString('hex')}`;
const other = `ws-sup${randomBytes(2).toString('hex')}x`;
const SITE = `
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
const canRead = (path) => { try { readFileSync(path); return true; } catch { return false; } };
createServer((req, res) => res.end(JSON.stringify({ uid: process.getuid(), gid: process.getgid(), groups: process.getgroups(), own: canRead('RELEASE'), other: canRead(process.env.OTHER_RELEASE) })))
  .listen(Number(process.env.PORT), process.env.HOST);
process.on('SIGTERM', () => process.exit(0));
`;
const id = (flag: string, name: string) => Number(spawnSync('id', [flag, name], { encoding: 'utf8' }).stdout.trim());
let root: string | undefined;
let supervisor: Supervisor | undefined;

afterAll(async () => {
  await supervisor?.stopAll();
  if (root) rmSync(root, { recursive: true, force: true });
  if (!missing) for (const name of [user, other]) spawnSync('userdel', [name]);
});

describe.skipIf(missing)('site users', () => {
  it('runs a site as its target user and group only; it reads its own release, not another target', async () => {
    for (const name of [user, other]) spawnSync('useradd', ['--system', '--user-group', '--no-create-home', '--shell', '/usr/sbin/nologin', name]);
    root = mkdtempSync(join(tmpdir(), 'site-users-'));
    chmodSync(root, 0o711);
    const release = (target: string, owner: string) => {
      const deployDir = join(root!, target);
      const dir = join(deployDir, 'deploys', 'r1');
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'server.mjs'), SITE);
      writeFileSync(join(dir, 'RELEASE'), target);
      symlinkSync('deploys/r1', join(deployDir, 'live'));
      // Modes as deploy-branch.sh leaves them: the target's directory and live release for its group.
      for (const path of [deployDir, dir]) {
        chownSync(path, 0, id('-g', owner));
        chmodSync(path, 0o750);
      }
      chmodSync(join(deployDir, 'deploys'), 0o711);
      return deployDir;
    };
    const mine = release('mine', user);
    release('theirs', other);
    const port = await freePort();
    supervisor = new Supervisor({
      sites: [{ service: 'astro-mine', port, deployDir: mine, user: { name: user, uid: id('-u', user), gid: id('-g', user) } }],
      startCommand: [process.execPath, 'server.mjs'],
      host: '127.0.0.1',
      logger: pino({ level: 'silent' }),
      readyTimeoutMs: 5_000,
      env: { PATH: process.env.PATH, OTHER_RELEASE: join(root, 'theirs/deploys/r1/RELEASE') },
    });
    await supervisor.startAll();
    const seen = (await (await fetch(`http://127.0.0.1:${port}/`)).json()) as { uid: number; gid: number; groups: number[]; own: boolean; other: boolean };
    expect(seen).toMatchObject({ uid: id('-u', user), gid: id('-g', user), own: true, other: false });
    expect(seen.groups).not.toContain(0);
  });
});
