import type * as docker from '@pulumi/docker';
import * as pulumi from '@pulumi/pulumi';
import { service, succeeded } from '../containers.js';
import { env, fileUpload, LIMITS, readRepoFile, type StackContext } from './common.js';
import type { StackImages } from './images.js';
import type { StackNetwork } from './network.js';

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
    uploads: [fileUpload('/jobs/backup.sh', readRepoFile('infra/jobs/backup.sh'), true)],
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
  return { containers: { backup } };
}
