import type * as docker from '@pulumi/docker';
import { service } from '../containers.js';
import { env, fileUpload, LIMITS, readRepoFile, type StackContext } from './common.js';
import type { StackImages } from './images.js';
import type { StackNetwork } from './network.js';

/** pg_dump of the features, Kratos and Hydra databases every backupIntervalHours (infra/jobs/backup.sh). */
export function declareBackups(ctx: StackContext, { networks, volumes }: StackNetwork, images: StackImages, after: docker.Container[]) {
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
    dependsOn: after,
  });
  return { containers: { backup } };
}
