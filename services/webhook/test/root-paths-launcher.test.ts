/**
 * What the root launcher reads of a target (the live release's REVISION) and what the journal keeps
 * of it (deployedCommit), against releases a build could leave behind before the deploy script
 * wrote REVISION after sealing — releases sealed by an older script stay live until replaced.
 * Each is planted here as root would find it; the launcher must answer at once, without reading
 * through a link, more than a commit id's size or anything but a regular file, and report only a
 * commit id. No users needed: the launcher is the real helper process, run by the test's user.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, constants, linkSync, lstatSync, mkdirSync, openSync, readFileSync, symlinkSync, truncateSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LauncherPlan } from '../src/deployments/invocation.js';
import { DeployLauncher } from '../src/deployments/launcher.js';
import { DeploymentStore } from '../src/deployments/store.js';
import { makeTempDir } from './support/helpers.js';

const root = makeTempDir('root-paths-launcher');
const commit = randomBytes(20).toString('hex');
const secretText = `root-only-${randomBytes(16).toString('hex')}`;
const secret = join(root, 'root-only.txt');
const release = '20260101000000';
const fifos: string[] = [];

/** A target whose live release holds `plant(REVISION path)`; its key is its name. */
const plants: Record<string, (revision: string) => void> = {
  'a commit id': (revision) => writeFileSync(revision, `${commit}\n`),
  'a FIFO': (revision) => {
    execFileSync('mkfifo', ['-m', '644', revision]);
    fifos.push(revision);
  },
  'a link to a root-only file': (revision) => symlinkSync(secret, revision),
  'a link to a file holding a commit id': (revision) => {
    writeFileSync(join(root, 'elsewhere'), `${commit}\n`);
    symlinkSync(join(root, 'elsewhere'), revision);
  },
  'a hard link to a root-only file': (revision) => linkSync(secret, revision),
  'a folder': (revision) => mkdirSync(join(revision, 'HEAD'), { recursive: true }),
  'a 64 MiB file': (revision) => {
    writeFileSync(revision, commit);
    truncateSync(revision, 64 * 1024 * 1024);
  },
  'a branch name': (revision) => writeFileSync(revision, 'main\n'),
  'a commit id in upper case': (revision) => writeFileSync(revision, `${commit.toUpperCase()}\n`),
};

const plan: LauncherPlan = { type: 'plan', script: '/bin/false', targets: {} };
for (const name of Object.keys(plants)) {
  const deployDir = join(root, 'sites', name.replace(/\W+/g, '-'));
  plan.targets[name] = { args: [], env: {}, deployDir, logDir: join(deployDir, 'logs') };
}

let launcher: DeployLauncher;

beforeAll(() => {
  writeFileSync(secret, `${secretText}\n`, { mode: 0o600 });
  for (const [name, plant] of Object.entries(plants)) {
    const { deployDir } = plan.targets[name]!;
    mkdirSync(join(deployDir, 'deploys', release), { recursive: true });
    symlinkSync(`deploys/${release}`, join(deployDir, 'live'));
    plant(join(deployDir, 'deploys', release, 'REVISION'));
  }
  launcher = new DeployLauncher(pino({ level: 'silent' }), plan);
  launcher.start();
});

afterAll(() => {
  // A launcher that blocks in a FIFO (the code before this change) gets a writer, so it can exit.
  for (const fifo of fifos) {
    try {
      const fd = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
      writeSync(fd, 'x');
      closeSync(fd);
    } catch {
      // no reader
    }
  }
  launcher?.close();
});

/** The launcher's answer, which must come within a second. */
async function liveOf(key: string): Promise<{ commit: string | null; release: string | null }> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer for ${key} within 1 s`)), 1_000)));
  try {
    const live = await Promise.race([launcher.live(key), late]);
    // A failure prints the start of the value, never megabytes of it.
    return { commit: live.commit === null ? null : live.commit.slice(0, 100), release: live.release };
  } finally {
    clearTimeout(timer);
  }
}

describe('the root launcher reads what is live', () => {
  it('reports a live release\'s commit id', async () => {
    expect(await liveOf('a commit id')).toEqual({ commit, release });
  });

  it.each(Object.keys(plants).filter((name) => name !== 'a commit id'))('reports no commit, at once, when REVISION is %s', async (name) => {
    expect(lstatSync(join(plan.targets[name]!.deployDir, 'live/REVISION'))).toBeTruthy();
    expect(await liveOf(name)).toEqual({ commit: null, release });
  });

  it('still answers for every target after a FIFO', async () => {
    await liveOf('a FIFO');
    expect(await liveOf('a commit id')).toEqual({ commit, release });
  });
});

describe('the deployment journal', () => {
  it('keeps only a commit id as deployedCommit and a release name as release: a journal written before this change is cleaned on load', async () => {
    const dir = join(makeTempDir('root-paths-journal'), 'state');
    mkdirSync(dir);
    const recorded = (id: string, deployedCommit: string, recordedRelease: string) => ({
      type: 'deployment',
      deployment: {
        id,
        target: 'feature/team-de1',
        branch: 'feature/team-de1/x',
        commit,
        deployedCommit,
        release: recordedRelease,
        provider: 'github',
        deliveryId: null,
        state: 'succeeded',
        queuedAt: '2026-01-01T00:00:00.000Z',
        startedAt: '2026-01-01T00:00:00.000Z',
        finishedAt: '2026-01-01T00:00:01.000Z',
        durationMs: 1000,
        exitCode: 0,
        logPath: null,
        supersededBy: null,
      },
    });
    const lines = [recorded('leaked', secretText, '../../etc'), recorded('genuine', commit, release)];
    writeFileSync(join(dir, 'deployments.jsonl'), lines.map((line) => `${JSON.stringify(line)}\n`).join(''), { mode: 0o600 });

    const store = await DeploymentStore.open(dir, pino({ level: 'silent' }));

    expect(store.get('leaked')).toMatchObject({ deployedCommit: null, release: null });
    expect(store.get('genuine')).toMatchObject({ deployedCommit: commit, release });
    expect(store.succeededWith('feature/team-de1', secretText)).toBeUndefined();
    expect(readFileSync(join(dir, 'deployments.jsonl'), 'utf8')).not.toContain(secretText);
    await store.close();
  });
});
