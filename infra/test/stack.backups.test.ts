import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { isPinnedImage } from '../images.js';
import { declaredContainer, declareDockerUnderMocks, isSecretEnvelope, resolved, reveal, type RegisteredResource } from '../testing/pulumi-mocks.js';

/**
 * Backups off the host: with `backupOffsite` set, a second target copies every dump, encrypted, to
 * an S3-compatible bucket; the container doing it sees the dumps read-only and nothing of the
 * platform. Read from the program under the runtime mocks.
 */

const CONTAINER = 'docker:index/container:Container';
const NETWORK = 'docker:index/network:Network';
const SECRET_KEY = 'bucket-secret-key-from-the-operator';
const PASSPHRASE = 'a-long-passphrase-kept-in-the-safe-too';
let registered: RegisteredResource[];

beforeAll(async () => {
  const declared = await declareDockerUnderMocks({
    config: { backupOffsite: { endpoint: 'https://s3.eu-central-1.amazonaws.com', provider: 'AWS', region: 'eu-central-1', bucket: 'geodata-backups', prefix: 'prod', accessKeyId: 'AKIAEXAMPLE', intervalMinutes: 30 } },
    secrets: { backupOffsiteSecretAccessKey: SECRET_KEY, backupOffsitePassphrase: PASSPHRASE },
  });
  registered = declared.registered;
  await Promise.all(Object.values(declared.program.stack.containers).map((c) => (c ? resolved(c.id) : undefined)));
});

const found = (name: string) => {
  const resource = registered.find((r) => r.type === CONTAINER && r.name === name);
  if (!resource) throw new Error(`the program declares no container ${name}`);
  return resource;
};
const envOf = (name: string) => declaredContainer(registered, name).env;
const networksOf = (name: string) => declaredContainer(registered, name).networks;
const volumesOf = (name: string) => (reveal(found(name).inputs.volumes) as { volumeName: string; containerPath: string; readOnly?: boolean }[] | undefined) ?? [];

describe('the off-host copy of the backups', () => {
  it('is a container of its own on the pinned rclone image', () => {
    const image = registered.find((r) => r.type === 'docker:index/remoteImage:RemoteImage' && String(r.inputs.name).startsWith('rclone/rclone:'));
    expect(image, 'an rclone image').toBeDefined();
    expect(isPinnedImage(String(image?.inputs.name))).toBe(true);
    expect(found('backup-offsite').inputs.image).toBe(`sha256:${image?.name}`);
  });

  it('sees the dumps of the backup container, read-only, and no other volume', () => {
    const dumps = volumesOf('backup').find((v) => v.containerPath === '/backups');
    expect(volumesOf('backup-offsite')).toEqual([{ volumeName: dumps?.volumeName, containerPath: '/backups', readOnly: true }]);
    expect(found('backup-offsite').inputs.readOnly).toBe(true);
  });

  it('reaches the outside world on a network of its own, and nothing of the platform', () => {
    expect(networksOf('backup-offsite')).toEqual(['geodata-backup-out']);
    const out = registered.find((r) => r.type === NETWORK && reveal(r.inputs.name) === 'geodata-backup-out');
    expect(out?.inputs.internal).toBe(false);
    const members = registered.filter((r) => r.type === CONTAINER && networksOf(r.name).includes('geodata-backup-out')).map((r) => r.name);
    expect(members).toEqual(['backup-offsite']);
  });

  it('gets the bucket and its key, the key and the passphrase as secrets, and no database password', () => {
    expect(isSecretEnvelope(found('backup-offsite').inputs.envs)).toBe(true);
    const env = envOf('backup-offsite');
    expect(env).toMatchObject({
      BACKUP_OFFSITE_TARGET: 'offsite:geodata-backups/prod',
      BACKUP_OFFSITE_INTERVAL_MINUTES: '30',
      BACKUP_OFFSITE_PASSPHRASE: PASSPHRASE,
      RCLONE_CONFIG_OFFSITE_TYPE: 's3',
      RCLONE_CONFIG_OFFSITE_PROVIDER: 'AWS',
      RCLONE_CONFIG_OFFSITE_ENDPOINT: 'https://s3.eu-central-1.amazonaws.com',
      RCLONE_CONFIG_OFFSITE_REGION: 'eu-central-1',
      RCLONE_CONFIG_OFFSITE_ACCESS_KEY_ID: 'AKIAEXAMPLE',
      RCLONE_CONFIG_OFFSITE_SECRET_ACCESS_KEY: SECRET_KEY,
    });
    expect(Object.keys(env).filter((k) => k.startsWith('PGPASSWORD'))).toEqual([]);
  });

  it('runs the repository\'s copy script, and turns unhealthy when the last copy is older than two intervals', () => {
    const uploads = reveal(found('backup-offsite').inputs.uploads) as { file: string; content: string }[];
    expect(uploads.map((u) => u.file)).toEqual(['/jobs/backup-offsite.sh']);
    expect(uploads[0]?.content).toBe(readFileSync(join(import.meta.dirname, '..', 'jobs', 'backup-offsite.sh'), 'utf8'));
    const health = reveal(found('backup-offsite').inputs.healthcheck) as { tests: string[] };
    expect(health.tests.join(' ')).toContain(`-lt ${30 * 2 * 60}`);
  });

  it('the backup container holds the documented restore script', () => {
    const uploads = reveal(found('backup').inputs.uploads) as { file: string; content: string }[];
    expect(uploads.find((u) => u.file === '/jobs/restore.sh')?.content).toBe(readFileSync(join(import.meta.dirname, '..', 'jobs', 'restore.sh'), 'utf8'));
  });
});

describe('the backupOffsite setting', () => {
  it('refuses a plain-http endpoint, an unknown key and a bucket name S3 would not take', async () => {
    const { BackupOffsiteSchema } = await import('../config.js');
    const good = { endpoint: 'https://s3.example.net', bucket: 'geodata-backups', accessKeyId: 'AKIAEXAMPLE' };
    expect(BackupOffsiteSchema.parse(good)).toEqual({ ...good, provider: 'Other', region: 'us-east-1', intervalMinutes: 60 });
    expect(BackupOffsiteSchema.safeParse({ ...good, endpoint: 'http://s3.example.net' }).success).toBe(false);
    expect(BackupOffsiteSchema.safeParse({ ...good, secretAccessKey: 'in plain text' }).success).toBe(false);
    expect(BackupOffsiteSchema.safeParse({ ...good, bucket: 'Geodata_Backups' }).success).toBe(false);
  });
});
