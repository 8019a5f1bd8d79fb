import { service, succeeded } from '../containers.js';
import { ENTRY_POINTS } from '../images.js';
import { env, LIMITS, type StackContext } from './common.js';
import type { StackFeatures } from './features.js';
import type { StackImages } from './images.js';
import type { StackNetwork } from './network.js';
import { workerEnvironment } from './settings.js';

/**
 * The QC worker: the one container that sends what an approval sets off (the reviewers' and
 * contributors' mails, the OpenStreetMap and Wikibase exports, the agency notice), so the one with a
 * way out: `worker-out`, a plain bridge nothing else joins. It reaches the features database on `app`;
 * the API (WORKER_ENABLED=false) and the databases stay on internal networks.
 *
 * Its settings: `exportSettings` (plain, by the worker's variable names) and the credentials as Pulumi
 * secrets (infra/secrets.ts EXPORT_SECRET_KEYS; SMTP_URL from exportsSmtpUrl or smtpConnectionUri).
 * Links in mails point at the web app (appUrl). Healthy while its heartbeat in qc.worker_processes is
 * fresh (`worker-main --health`).
 */
export function declareWorker(ctx: StackContext, { networks }: StackNetwork, images: StackImages, features: StackFeatures) {
  const { cfg, secrets, n } = ctx;
  const worker = service('qc-worker', n('qc-worker'), {
    image: images.built.api.imageName,
    limits: LIMITS.node,
    networks: [{ network: networks.app }, { network: networks.workerOut }],
    command: [...ENTRY_POINTS.qcWorker],
    user: 'node',
    readOnly: true,
    tmpfs: { '/tmp': 'rw,noexec,nosuid,size=64m' },
    capabilities: { keep: [] },
    envs: env(workerEnvironment(cfg, secrets, features.databaseUrl)),
    healthcheck: { test: ['CMD', ...ENTRY_POINTS.qcWorkerHealth], interval: '30s', startPeriod: '30s' },
    labels: { 'platform.after': succeeded('api-migrate', features.jobs.apiMigrate) },
    dependsOn: [features.jobs.apiMigrate],
  });
  return { containers: { qcWorker: worker } };
}
