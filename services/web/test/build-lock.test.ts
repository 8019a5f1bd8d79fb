import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { acquireBuildLock } from '../launch.js';

/**
 * The web build's lock (services/web/.build-lock, launch.ts): a lock left by a build that was
 * interrupted (Ctrl-C during the first `npm start`) no longer blocks every later start.
 */
const dir = mkdtempSync(join(tmpdir(), 'build-lock-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The pid of a process that has exited (and is not reused this soon). */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  return Number(child.stdout);
}

describe('the web build lock', () => {
  it('is taken over when the process that holds it is gone, saying so', () => {
    const lock = join(dir, 'dead');
    mkdirSync(lock);
    writeFileSync(join(lock, 'owner'), `${deadPid()} ${hostname()}\n`);
    const said: string[] = [];
    const release = acquireBuildLock(lock, { timeoutMs: 2_000, log: (m) => said.push(m) });
    expect(readFileSync(join(lock, 'owner'), 'utf8')).toBe(`${process.pid} ${hostname()}\n`);
    expect(said.join('\n')).toMatch(/took over .*: its process \d+ is gone/);
    release();
    expect(existsSync(lock)).toBe(false);
  });

  it('is taken over when it has no owner file and is older than a few seconds (left by an older version)', () => {
    const lock = join(dir, 'ownerless');
    mkdirSync(lock);
    const old = new Date(Date.now() - 60_000);
    utimesSync(lock, old, old);
    acquireBuildLock(lock, { timeoutMs: 2_000 })();
  });

  it('waits for a live holder and then names it', () => {
    const lock = join(dir, 'live');
    mkdirSync(lock);
    writeFileSync(join(lock, 'owner'), `${process.pid} ${hostname()}\n`);
    expect(() => acquireBuildLock(lock, { timeoutMs: 1_000 })).toThrow(new RegExp(`holds .* \\(held by running process ${process.pid}\\)`));
    expect(existsSync(lock)).toBe(true);
  });
});
