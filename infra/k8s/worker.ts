import * as k8s from '@pulumi/kubernetes';
import { ENTRY_POINTS } from '../images.js';
import { LIMITS } from '../stack/common.js';
import { workerEnvironment } from '../stack/settings.js';
import { allow, container, environmentSecret, INTERNET, labels, NODE_UID, podSpec, type K8sContext } from './common.js';
import type { K8sFeatures } from './features.js';
import type { K8sImages } from './images.js';
import { PG_PORT } from './postgres.js';

/**
 * The QC worker on Kubernetes: its own Deployment (infra/stack/worker.ts on Docker), the only pods of
 * the platform with a way out to the internet (mail, the OSM API, Overpass, Wikibase, the agency), on
 * the ports those use; the API and the databases have none. Several replicas take jobs from one queue in
 * PostgreSQL (graphile-worker locks each job for one worker), through the session pooler: graphile-worker
 * LISTENs for new jobs on its connection. Healthy while its heartbeat is fresh (`worker-main --health`).
 */
export function declareWorker(ctx: K8sContext, images: K8sImages, features: K8sFeatures) {
  const { cfg, secrets, ns, k8s: settings } = ctx;
  const namespace = ns.platform;
  const env = environmentSecret('qc-worker', namespace, workerEnvironment(cfg, secrets, features.urls.pooled));
  const workerLabels = labels('qc-worker');
  const worker = new k8s.apps.v1.Deployment(
    'qc-worker',
    {
      metadata: { name: 'qc-worker', namespace, labels: workerLabels },
      spec: {
        replicas: settings.workerReplicas,
        selector: { matchLabels: { 'app.kubernetes.io/name': 'qc-worker' } },
        template: {
          metadata: { labels: workerLabels, annotations: { 'geodata.example.org/environment-sha256': env.checksum } },
          spec: podSpec({
            ctx,
            containers: [
              container({
                name: 'qc-worker',
                image: images.project.api,
                limits: LIMITS.node,
                uid: NODE_UID,
                command: [...ENTRY_POINTS.qcWorker],
                envSecret: env.name,
                probe: { exec: [...ENTRY_POINTS.qcWorkerHealth] },
              }),
            ],
          }),
        },
      },
    },
    { dependsOn: [features.jobs.apiMigrate, env.secret] },
  );
  const pdb = new k8s.policy.v1.PodDisruptionBudget('qc-worker', {
    metadata: { name: 'qc-worker', namespace, labels: workerLabels },
    spec: { maxUnavailable: 1, selector: { matchLabels: { 'app.kubernetes.io/name': 'qc-worker' } } },
  });
  const policy = allow('qc-worker', namespace, { 'app.kubernetes.io/name': 'qc-worker' }, {
    ingress: [],
    egress: [
      { peers: [{ pods: { 'cnpg.io/poolerName': features.database.hosts.pooled } }], ports: [PG_PORT] },
      // Mail submission and the exports' HTTPS APIs, outside the cluster only.
      { peers: [INTERNET], ports: [25, 465, 587, 443] },
    ],
  });
  return { workloads: { qcWorker: worker }, pdb, policies: [policy] };
}
