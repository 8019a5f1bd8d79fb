import * as docker from '@pulumi/docker';
import * as pulumi from '@pulumi/pulumi';
import { loadBackupOffsite, loadBackupOffsiteSecrets } from '../config.js';
import { service, succeeded } from '../containers.js';
import { env, fileUpload, LIMITS, readRepoFile, type StackContext } from './common.js';
import type { StackImages } from './images.js';
import type { StackNetwork } from './network.js';

/**
 * rclone, for the copy off the host: one static binary that speaks S3 (and SFTP, WebDAV, most clouds)
 * and encrypts on the way out (its crypt layer), kept up by an active project; the official image,
 * pinned like every third-party image (infra/images.ts holds the stack's others).
 */
export const RCLONE_IMAGE = 'rclone/rclone:1.68.2';

/** The restore, as docs/infra.md gives it and infra/test/jobs-restore.test.ts runs it (inside the backup container). */
export const RESTORE_SCRIPT = '/jobs/restore.sh';

/** What the backup waits for: the databases, and the jobs that create the schemas it dumps. */
export interface BackupPrerequisites {
  databases: docker.Container[];
  /** Migration jobs by name: the first round starts only once each has exited 0. */
  migrations: Record<string, docker.Container>;
}

/**
 * pg_dump of the features, Kratos and Hydra databases every backupIntervalHours (infra/jobs/backup.sh).
 *
 * The first round runs as soon as the container starts, so it is created only after the migrations
 * succeeded: a dump taken earlier holds empty databases (no schema_migrations, no features table),
 * which is the one dump an operator would restore after a failed first deploy.
 */
export function declareBackups(ctx: StackContext, { networks, volumes }: StackNetwork, images: StackImages, after: BackupPrerequisites) {
  const { cfg, secrets, n } = ctx;
  const backup = service('backup', n('backup'), {
    image: images.remote.postgres.imageId,
    limits: LIMITS.backup,
    networks: [{ network: networks.app }],
    entrypoints: ['/bin/sh', '/jobs/backup.sh'],
    uploads: [fileUpload('/jobs/backup.sh', readRepoFile('infra/jobs/backup.sh'), true), fileUpload(RESTORE_SCRIPT, readRepoFile('infra/jobs/restore.sh'), true)],
    envs: env({
      BACKUP_DIR: '/backups',
      BACKUP_INTERVAL_HOURS: String(cfg.backupIntervalHours),
      BACKUP_RETENTION_DAYS: String(cfg.backupRetentionDays),
      BACKUP_DATABASES: 'features=features-db:5432:features:postgres kratos=identity-db:5432:kratos:postgres hydra=identity-db:5432:hydra:postgres',
      PGPASSWORD_FEATURES: secrets.featuresDbSuperuserPassword,
      PGPASSWORD_KRATOS: secrets.identityDbSuperuserPassword,
      PGPASSWORD_HYDRA: secrets.identityDbSuperuserPassword,
    }),
    volumes: [{ volumeName: volumes.backups.name, containerPath: '/backups' }],
    healthcheck: {
      // Healthy while the last complete round is younger than two intervals.
      test: ['CMD-SHELL', `test -f /backups/last-success && test $(( $(date +%s) - $(cat /backups/last-success) )) -lt ${cfg.backupIntervalHours * 2 * 3600}`],
      interval: '5m',
      startPeriod: '10m',
    },
    labels: {
      'platform.after': pulumi
        .all(Object.entries(after.migrations).map(([name, migration]) => succeeded(name, migration)))
        .apply(() => 'succeeded'),
    },
    dependsOn: [...after.databases, ...Object.values(after.migrations)],
  });
  const offsite = declareOffsiteCopy(ctx, volumes.backups, backup);
  if (!offsite) {
    void pulumi.log.warn('backupOffsite is not set: the database dumps stay on this host alone (docs/infra.md "Backups off the host")');
  }
  return { containers: { backup, ...(offsite ? { backupOffsite: offsite } : {}) } };
}

/**
 * The second target: every complete dump copied, encrypted, to an S3-compatible bucket
 * (infra/jobs/backup-offsite.sh). The container sees the dumps read-only and nothing of the
 * platform: its only network is one of its own with a route out (backup-out), it holds no database
 * password, and the bucket key and the passphrase reach it as Pulumi secrets.
 */
function declareOffsiteCopy(ctx: StackContext, backups: docker.Volume, backup: docker.Container): docker.Container | undefined {
  const { n } = ctx;
  const target = loadBackupOffsite();
  if (!target) return undefined;
  const secrets = loadBackupOffsiteSecrets();
  const image = new docker.RemoteImage('image-rclone', { name: RCLONE_IMAGE, keepLocally: true });
  const out = new docker.Network('backup-out', { name: n('backup-out'), internal: false, labels: [{ label: 'platform.network', value: 'backup-out' }] });
  return service('backup-offsite', n('backup-offsite'), {
    image: image.imageId,
    limits: LIMITS.job,
    networks: [{ network: out }],
    entrypoints: ['/bin/sh', '/jobs/backup-offsite.sh'],
    uploads: [fileUpload('/jobs/backup-offsite.sh', readRepoFile('infra/jobs/backup-offsite.sh'), true)],
    envs: env({
      BACKUP_DIR: '/backups',
      BACKUP_OFFSITE_STATE_DIR: '/state',
      // The root file system is read-only; whatever rclone keeps for itself goes to the tmpfs.
      HOME: '/tmp',
      BACKUP_OFFSITE_INTERVAL_MINUTES: String(target.intervalMinutes),
      BACKUP_OFFSITE_TARGET: `offsite:${target.bucket}${target.prefix ? `/${target.prefix}` : ''}`,
      BACKUP_OFFSITE_PASSPHRASE: secrets.backupOffsitePassphrase,
      RCLONE_CONFIG_OFFSITE_TYPE: 's3',
      RCLONE_CONFIG_OFFSITE_PROVIDER: target.provider,
      RCLONE_CONFIG_OFFSITE_ENDPOINT: target.endpoint,
      RCLONE_CONFIG_OFFSITE_REGION: target.region,
      RCLONE_CONFIG_OFFSITE_ENV_AUTH: 'false',
      RCLONE_CONFIG_OFFSITE_ACCESS_KEY_ID: target.accessKeyId,
      RCLONE_CONFIG_OFFSITE_SECRET_ACCESS_KEY: secrets.backupOffsiteSecretAccessKey,
      // A key limited to writing this bucket may not create or inspect buckets.
      RCLONE_CONFIG_OFFSITE_NO_CHECK_BUCKET: 'true',
    }),
    // The image's user (root) only because the dumps are written by the backup container as root.
    volumes: [{ volumeName: backups.name, containerPath: '/backups', readOnly: true }],
    readOnly: true,
    tmpfs: { '/state': 'rw,noexec,nosuid,size=1m', '/tmp': 'rw,noexec,nosuid,size=16m' },
    capabilities: { keep: [] },
    healthcheck: {
      // Healthy while the last complete copy is younger than two intervals.
      test: ['CMD-SHELL', `test -f /state/last-offsite-success && test $(( $(date +%s) - $(cat /state/last-offsite-success) )) -lt ${target.intervalMinutes * 2 * 60}`],
      interval: '5m',
      startPeriod: '10m',
    },
    dependsOn: [backup],
  });
}
