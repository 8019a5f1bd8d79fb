/**
 * infra/jobs/backup-offsite.sh with the real rclone, a local directory standing in for the bucket (the
 * S3 remote is rclone's own; what is ours is which files go, how, and what is recorded). The restore
 * from such a copy is infra/test/jobs-restore.test.ts.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { binary, lacks } from '../../test/helpers/requirements.js';

const MISSING = lacks('the off-host backup copy with rclone', binary('rclone'));
const SCRIPT = join(import.meta.dirname, '..', 'jobs', 'backup-offsite.sh');
let dir: string;

const env = (extra: Record<string, string> = {}) => ({
  PATH: process.env.PATH ?? '',
  HOME: dir,
  BACKUP_DIR: join(dir, 'backups'),
  BACKUP_OFFSITE_STATE_DIR: join(dir, 'state'),
  BACKUP_OFFSITE_TARGET: `offsite:${join(dir, 'bucket')}`,
  BACKUP_OFFSITE_PASSPHRASE: 'offsite-test-passphrase-0123456789',
  RCLONE_CONFIG_OFFSITE_TYPE: 'local',
  ...extra,
});
const run = (args: string[], extra: Record<string, string> = {}) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile('/bin/sh', [SCRIPT, ...args], { env: env(extra), encoding: 'utf8', timeout: 60_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
const dump = (db: string, stamp: string, content: string) => {
  mkdirSync(join(dir, 'backups', db), { recursive: true });
  writeFileSync(join(dir, 'backups', db, `${db}-${stamp}.dump`), content);
};
const listed = async () => (await run(['list'])).stdout.split('\n').map((l) => l.trim().split(/\s+/).at(-1)).filter(Boolean).sort();

beforeAll(() => {
  if (MISSING) return;
  dir = mkdtempSync(join(tmpdir(), 'backup-offsite-'));
  mkdirSync(join(dir, 'bucket'));
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(MISSING)('backup-offsite.sh', () => {
  it('copies complete dumps only, encrypted, and records the time of success', async () => {
    dump('features', '20260101T000000Z', 'features dump one');
    dump('kratos', '20260101T000000Z', 'kratos dump one');
    writeFileSync(join(dir, 'backups', 'features', 'features-20260102T000000Z.dump.partial'), 'half written');
    writeFileSync(join(dir, 'backups', 'last-success'), '1767225600');
    const copy = await run(['once']);
    expect(copy.code, copy.stderr).toBe(0);
    expect(await listed()).toEqual(['features/features-20260101T000000Z.dump', 'kratos/kratos-20260101T000000Z.dump']);
    const stored = readdirSync(join(dir, 'bucket'), { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
    expect(stored).toHaveLength(2);
    for (const file of stored) {
      expect(file.name).not.toMatch(/features|kratos/);
      expect(readFileSync(join(file.parentPath, file.name), 'utf8')).not.toContain('dump one');
    }
    expect(Number(readFileSync(join(dir, 'state', 'last-offsite-success'), 'utf8'))).toBeGreaterThan(Date.now() / 1000 - 60);
  });

  it('only adds: a new dump goes, a dump pruned here stays in the bucket, and fetch gives it back', async () => {
    dump('features', '20260102T000000Z', 'features dump two');
    rmSync(join(dir, 'backups', 'features', 'features-20260101T000000Z.dump'));
    expect((await run(['once'])).code).toBe(0);
    expect(await listed()).toEqual(['features/features-20260101T000000Z.dump', 'features/features-20260102T000000Z.dump', 'kratos/kratos-20260101T000000Z.dump']);
    const fetched = await run(['fetch', 'features/features-20260101T000000Z.dump']);
    expect(fetched).toMatchObject({ code: 0, stdout: 'features dump one' });
  });

  it('reads nothing with another passphrase', async () => {
    const fetched = await run(['fetch', 'features/features-20260101T000000Z.dump'], { BACKUP_OFFSITE_PASSPHRASE: 'another-passphrase-of-enough-length' });
    expect(fetched.code).not.toBe(0);
    expect(fetched.stdout).toBe('');
  });

  it('fails, and records nothing, when the bucket cannot be written', async () => {
    rmSync(join(dir, 'state'), { recursive: true });
    const failed = await run(['once'], { BACKUP_OFFSITE_TARGET: 'offsite:/proc/no-such-bucket' });
    expect(failed.code).toBe(1);
    expect(existsSync(join(dir, 'state', 'last-offsite-success'))).toBe(false);
  });

  it('refuses to run without a target or a passphrase, and a bad interval (exit 2 or the name)', async () => {
    expect((await run(['once'], { BACKUP_OFFSITE_PASSPHRASE: '' })).stderr).toContain('BACKUP_OFFSITE_PASSPHRASE');
    expect((await run(['once'], { BACKUP_OFFSITE_TARGET: '' })).stderr).toContain('BACKUP_OFFSITE_TARGET');
    expect((await run(['once'], { BACKUP_OFFSITE_INTERVAL_MINUTES: '1h' })).code).toBe(2);
    expect((await run(['fetch', '../etc/passwd'])).code).toBe(2);
  });
});
