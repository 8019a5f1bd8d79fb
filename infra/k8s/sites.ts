import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { readFileSync } from 'node:fs';
import { isPreviewTarget } from '../config.js';
import { destinationOf } from '../egress/proxy.js';
import { ENTRY_POINTS, NODE_IMAGE } from '../images.js';
import { siteSettings, UPSTREAMS } from '../routes.js';
import { LIMITS } from '../stack/common.js';
import { stackTargets, type StackTarget } from '../stack/targets.js';
import { ANNOTATIONS, BUILD_STEPS, buildTemplateName, EXIT } from '../k8s-deploy/protocol.js';
import type { Site } from '../k8s-deploy/template.js';
import { allow, container, environmentSecret, INTERNET, labels, NODE_UID, PART_OF, podSpec, type K8sContext, type Peer } from './common.js';
import type { K8sImages } from './images.js';
import { PG_PORT } from './postgres.js';
import type { K8sPlatform } from './platform.js';

/**
 * Sites on Kubernetes: one Deployment per deploy target, the builds, and the deployment webhook, with
 * the trust boundaries of infra/stack/sites.ts drawn with namespaces, NetworkPolicies and a node pool.
 *
 * Per target (names from infra/stack/targets.ts, so both targets call a site the same):
 *   site-<dp>   a Deployment and a Service in <prefix>-sites (main, develop) or, for a preview target
 *               (team code), in <prefix>-preview: no service-account token (the namespace's default
 *               account has none either), the target's uid, a read-only root, no capabilities;
 *               reached only by the edge, on the target's port; reaching only DNS and the public
 *               entrance (the ingress controller), like a browser. Preview pods run only on the node
 *               pool tainted `<previewTaintKey>=true:NoSchedule`, which no platform pod tolerates.
 *   build-<dp>  the Job template of one deploy (a ConfigMap the webhook's deploy driver, infra/k8s-deploy,
 *               instantiates with the commit; beside it where the site runs): in <prefix>-builds, on the
 *               tainted pool, three steps in one pod, each with only what it needs:
 *                 fetch    (init) our clone of the branch with the git credential: exactly the pushed
 *                          commit, refused (exit 9) when it is not on the branch or older than live;
 *                 build    (init) `npm ci && npm run build` of the team's code as the target's build
 *                          uid, no credential at all, reaching only the package registry through the
 *                          egress proxy, with a deadline (activeDeadlineSeconds);
 *                 publish  `crane append`: the built release as one layer on the pinned Node image,
 *                          pushed as <registry>/site-<dp>:<commit>; nothing privileged, no BuildKit,
 *                          no daemon: a registry API client with the target's push credential.
 *               The deploy is then `site-<dp>`'s image set to that reference (a rolling update).
 * Shared:
 *   egress      the builds' only way out, as on Docker (infra/egress): the package registry and the
 *               image registry open, the git hosts only with the credential;
 *   webhook     verifies pushes and queues deploys; its deploy script is the driver k8s-deploy. Its
 *               service account may do what the driver does and nothing else: read the templates by
 *               name, create, read and delete Jobs and list their pods and logs in the builds namespace,
 *               read and patch the site Deployments by name. WEBHOOK_REPLICAS replicas on one journal in
 *               PostgreSQL (WEBHOOK_DATABASE_URL, the database `webhook` on features-db, infra/k8s/features.ts
 *               WEBHOOK_DB): one deploy per target across them, a replayed push deploys once, one
 *               failed-authentication budget (docs/webhook.md "More than one replica"). A rolling update, a
 *               PodDisruptionBudget and a spread over nodes keep one answering. No state volume: what a pod
 *               writes under DEPLOY_ROOT is its own (an emptyDir), see WEBHOOK_SCRATCH.
 */

export const SITE_HOST = '0.0.0.0';
/** crane (go-containerregistry), the publish step: a registry client, no daemon. */
export const CRANE_IMAGE = 'gcr.io/go-containerregistry/crane:v0.20.2';
/** Where a release lives inside a site image (the layer `publish` appends). */
export const RELEASE_DIR = '/srv/site';
/** The webhook's deploy driver on this target: hands a deploy to the Kubernetes API (see above). */
export const K8S_DEPLOY_DRIVER = '/usr/local/bin/k8s-deploy';
/** The Secret (type dockerconfigjson) with the target's push credential, one per target, created by the operator. */
export const pushSecretOf = (t: StackTarget) => `registry-push-${t.siteHost.replace(/^site-/, '')}`;
const BUILD_DEADLINE_SECONDS = 840;
/** How long a site's rollout may take to become available before the driver puts the previous image back. */
const ROLLOUT_TIMEOUT_SECONDS = 300;
const TARGETS_FILE = '/etc/geodata/targets.yaml';
/** The webhook's replicas: they share their journal in PostgreSQL, so any number behave as one. */
export const WEBHOOK_REPLICAS = 2;
/**
 * What a webhook pod writes, per pod, on an emptyDir (DEPLOY_ROOT=<dir>/deploys): under each target's
 * deploy directory the deploy logs, the launcher's `.running-deploy` record (a process id, meaningful
 * only in the pod's own process namespace: it must not be shared) and the driver's `live` record.
 * Nothing in it needs to be shared or to outlive the pod: the journal is in PostgreSQL and what runs is
 * the site Deployment's image, which the driver reads on every deploy (it builds nothing for the commit
 * that already runs and refuses one older than it); `live` is a record of what this pod last saw, read
 * back by this pod once its deploy succeeded (the deployed commit in the journal) and, for a push to an
 * idle target, to tell a duplicate `live` — where another pod's record is missing or older, the journal's
 * `deployed-before` tells the same duplicate, and a commit set by hand makes a deploy that builds nothing.
 * A deploy log stays with the pod that ran it (and goes with it); the build steps' output is also
 * in the build Job's pod for a day (ttlSecondsAfterFinished).
 */
const WEBHOOK_SCRATCH = { dir: '/var/lib/webhook', sizeLimit: '2Gi' } as const;
/** How long running deploys get to finish when a webhook pod stops; then the driver cleans up (it deletes its Job and restores the image, 8 s each at most). */
const WEBHOOK_SHUTDOWN_GRACE_SECONDS = 60;

export function declareSites(ctx: K8sContext, platform: K8sPlatform, images: K8sImages, webhookDatabase: { url: pulumi.Output<string>; cluster: string; database: pulumi.Resource }) {
  const { cfg, secrets, ns, k8s: settings } = ctx;
  const targets = stackTargets(cfg.targets, cfg.sitesSubnet);
  const namespaceOf = (t: StackTarget) => (isPreviewTarget(t.target) ? ns.preview : ns.sites);
  const ingressController: Peer = { namespace: settings.ingressNamespace };
  const { namespaces } = platform.namespaces;

  // The untrusted namespaces' default service account carries no token either, whatever creates a pod there.
  const tokenless = [ns.preview, ns.builds].map(
    (namespace) =>
      new k8s.core.v1.ServiceAccountPatch(
        `default-sa-${namespace}`,
        { metadata: { name: 'default', namespace, annotations: { 'pulumi.com/patchForce': 'true' } }, automountServiceAccountToken: false },
        { dependsOn: [namespaces.preview, namespaces.builds] },
      ),
  );
  // What team code may use at once, per namespace: a runaway build or site cannot take the pool.
  const quotas = [ns.preview, ns.builds].map(
    (namespace) =>
      new k8s.core.v1.ResourceQuota(
        `untrusted-${namespace}`,
        {
          metadata: { name: 'untrusted', namespace, labels: PART_OF },
          spec: { hard: { pods: '40', 'limits.cpu': '16', 'limits.memory': '32Gi', 'requests.storage': '0', persistentvolumeclaims: '0', 'services.loadbalancers': '0', 'services.nodeports': '0' } },
        },
        { dependsOn: [namespaces.preview, namespaces.builds] },
      ),
  );

  const perTarget = targets.map((t) => {
    const namespace = namespaceOf(t);
    const untrusted = isPreviewTarget(t.target);
    const name = t.siteHost;
    const port = t.target.port;
    const siteLabels = labels(name, { 'geodata.example.org/target': t.target.deployPath, 'geodata.example.org/runs': 'team-code' });
    const entry = `${RELEASE_DIR}/${t.target.siteDir ? `${t.target.siteDir}/` : ''}dist/server/entry.mjs`;
    const env = environmentSecret(name, namespace, {
      NODE_ENV: 'production',
      HOST: SITE_HOST,
      PORT: String(port),
      HOME: '/tmp',
      // The site's own settings (the web app's API and sign-in URLs), as the Docker supervisor passes them.
      ...siteSettings(cfg.domains, t.target, cfg.parentDomain),
    });
    const deployment = new k8s.apps.v1.Deployment(
      name,
      {
        metadata: {
          name,
          namespace,
          labels: siteLabels,
          annotations: {
            // A target runs no pod until its first deploy published an image; then the deploy driver sets the
            // image and these replicas. `pulumi up` waits for neither.
            'pulumi.com/skipAwait': 'true',
            [ANNOTATIONS.replicas]: String(untrusted ? 1 : settings.siteReplicas),
          },
        },
        spec: {
          replicas: 0,
          selector: { matchLabels: { 'app.kubernetes.io/name': name } },
          template: {
            metadata: { labels: siteLabels, annotations: { 'geodata.example.org/environment-sha256': env.checksum } },
            spec: podSpec({
              ctx,
              untrusted,
              containers: [
                {
                  // A placeholder until the first deploy: the pinned Node image the site images are built on.
                  ...container({ name: 'site', image: NODE_IMAGE, limits: LIMITS.site, uid: t.siteUid, envSecret: env.name, ports: [{ name: 'http', port }], probe: { tcp: port } }),
                  command: ['node', entry],
                  workingDir: RELEASE_DIR,
                },
              ],
            }),
          },
        },
      },
      // Each deploy sets the image and the replicas (the webhook's driver); `pulumi up` keeps what it set.
      { dependsOn: [env.secret, namespaces.sites, namespaces.preview], ignoreChanges: ['spec.template.spec.containers[0].image', 'spec.replicas'] },
    );
    const service = new k8s.core.v1.Service(name, {
      metadata: { name, namespace, labels: siteLabels },
      spec: { selector: { 'app.kubernetes.io/name': name }, ports: [{ name: 'http', port, targetPort: port, protocol: 'TCP' }] },
    });
    const policy = allow(name, namespace, { 'app.kubernetes.io/name': name }, {
      ingress: [{ peers: [{ pods: 'edge', namespace: ns.platform }], ports: [port] }],
      // The API (and for a platform site Kratos) by their public names, through the entrance like a browser.
      egress: [{ peers: [ingressController], ports: [80, 443] }],
    });
    const buildJob = buildJobTemplate(ctx, t, images);
    // What the driver needs of a target besides the Job: which Deployment to set, to which image.
    const site: Site = { namespace, deployment: name, container: 'site', image: `${settings.registry}/${name}` };
    const template = new k8s.core.v1.ConfigMap(`build-${t.target.deployPath}`, {
      metadata: { name: buildTemplateName(t.target.deployPath), namespace: ns.builds, labels: labels('build', { 'geodata.example.org/target': t.target.deployPath }) },
      data: { 'job.json': JSON.stringify(buildJob, null, 2), 'site.json': JSON.stringify(site, null, 2) },
    });
    return { t, namespace, deployment, service, policy, buildJob, template };
  });

  // The builds' way out: the egress proxy (infra/egress), in the builds namespace.
  const gitHosts = [...new Set(cfg.targets.map((t) => destinationOf(t.repo)).filter((d): d is string => d !== undefined))];
  const open = [destinationOf(cfg.npmRegistry), `${settings.registry.split('/')[0]}:443`].filter((d): d is string => d !== undefined);
  const egressEnv = environmentSecret('egress', ns.builds, {
    NODE_ENV: 'production',
    EGRESS_PORT: String(UPSTREAMS.egress.port),
    EGRESS_OPEN: open.join(','),
    EGRESS_WITH_CREDENTIAL: gitHosts.join(','),
    EGRESS_GIT_TOKEN: secrets.egressGitToken,
    LOG_LEVEL: cfg.logLevel,
  });
  const egress = new k8s.apps.v1.Deployment(
    'egress',
    {
      metadata: { name: 'egress', namespace: ns.builds, labels: labels('egress') },
      spec: {
        replicas: 1,
        selector: { matchLabels: { 'app.kubernetes.io/name': 'egress' } },
        template: {
          metadata: { labels: labels('egress'), annotations: { 'geodata.example.org/environment-sha256': egressEnv.checksum } },
          // The proxy is platform code, but it lives where the builds are: on their pool, in their namespace.
          spec: podSpec({
            ctx,
            untrusted: true,
            containers: [
              container({
                name: 'egress',
                image: images.project.webhook,
                limits: LIMITS.egress,
                uid: NODE_UID,
                command: [...ENTRY_POINTS.egress],
                envSecret: egressEnv.name,
                ports: [{ name: 'proxy', port: UPSTREAMS.egress.port }],
                probe: { path: '/health', port: UPSTREAMS.egress.port },
              }),
            ],
          }),
        },
      },
    },
    { dependsOn: [egressEnv.secret, namespaces.builds] },
  );
  const egressService = new k8s.core.v1.Service('egress', {
    metadata: { name: 'egress', namespace: ns.builds, labels: labels('egress') },
    spec: { selector: { 'app.kubernetes.io/name': 'egress' }, ports: [{ name: 'proxy', port: UPSTREAMS.egress.port, targetPort: UPSTREAMS.egress.port, protocol: 'TCP' }] },
  });

  // The webhook: verifies pushes, queues deploys, hands each to the deploy driver.
  const webhookAccount = new k8s.core.v1.ServiceAccount('webhook', {
    metadata: { name: 'webhook', namespace: ns.platform, labels: labels('webhook') },
    automountServiceAccountToken: false,
  });
  // Exactly the driver's calls (infra/k8s-deploy/driver.ts; test/journeys/k8s-deploy.test.ts runs it against
  // these rules): a Job's name is made per deploy, so jobs cannot be limited by name; it polls, never watches.
  const rbac = [
    role(ns.builds, 'webhook-builds', [
      { apiGroups: ['batch'], resources: ['jobs'], verbs: ['create', 'get', 'delete'] },
      { apiGroups: [''], resources: ['pods'], verbs: ['list'] },
      { apiGroups: [''], resources: ['pods/log'], verbs: ['get'] },
      { apiGroups: [''], resources: ['configmaps'], verbs: ['get'], resourceNames: perTarget.map((p) => buildTemplateName(p.t.target.deployPath)) },
    ]),
    ...[ns.sites, ns.preview].map((namespace) =>
      role(namespace, 'webhook-deploy', [
        {
          apiGroups: ['apps'],
          resources: ['deployments'],
          verbs: ['get', 'patch'],
          resourceNames: perTarget.filter((p) => p.namespace === namespace).map((p) => p.t.siteHost),
        },
      ]),
    ),
  ].map(({ name, namespace, role: r }) => ({
    role: r,
    binding: new k8s.rbac.v1.RoleBinding(`${name}-${namespace}`, {
      metadata: { name, namespace, labels: PART_OF },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
      subjects: [{ kind: 'ServiceAccount', name: 'webhook', namespace: ns.platform }],
    }),
  }));

  // The same variables as the Docker webhook, but the deploy script: here the Kubernetes deploy driver.
  const webhookValues = pulumi
    .all([
      secrets.webhookPreviousSecrets,
      pulumi.output({
        NODE_ENV: 'production',
        DEPLOY_ISOLATION: 'none',
        DEPLOY_SCRIPT: K8S_DEPLOY_DRIVER,
        // The build's deadline, the driver's slack for scheduling it (60 s), the rollout, and a minute to spare.
        DEPLOY_TIMEOUT_SECONDS: String(BUILD_DEADLINE_SECONDS + 60 + ROLLOUT_TIMEOUT_SECONDS + 60),
        HEALTH_TIMEOUT_SECONDS: String(ROLLOUT_TIMEOUT_SECONDS),
        WEBHOOK_PORT: String(UPSTREAMS.webhook.port),
        WEBHOOK_HOST: '0.0.0.0',
        WEBHOOK_TRUST_PROXY: 'uniquelocal',
        TARGETS_FILE,
        DEPLOY_ROOT: `${WEBHOOK_SCRATCH.dir}/deploys`,
        // The replicas' shared journal, queue, delivery ids and failed-authentication counts; the URL
        // (with the role's password) reaches the pods only inside this Secret.
        WEBHOOK_DATABASE_URL: webhookDatabase.url,
        WEBHOOK_SHUTDOWN_GRACE_SECONDS: String(WEBHOOK_SHUTDOWN_GRACE_SECONDS),
        WEBHOOK_ADMIN_TOKEN: secrets.webhookAdminToken,
        LOG_LEVEL: cfg.logLevel,
        // The driver's settings; the deploy script gets only the variables named here (and the API's
        // address the kubelet sets in every pod). Where each site runs is in its template's ConfigMap.
        K8S_BUILDS_NAMESPACE: ns.builds,
        DEPLOY_ENV_PASS: 'K8S_BUILDS_NAMESPACE KUBERNETES_SERVICE_HOST KUBERNETES_SERVICE_PORT',
        ...secrets.webhookTargetSecrets,
      }),
    ])
    .apply(([previous, current]): Record<string, string> => ({ ...current, ...previous }));
  const webhookEnv = environmentSecret('webhook', ns.platform, webhookValues);
  const targetsFile = new k8s.core.v1.ConfigMap('webhook-targets', {
    metadata: { name: 'webhook-targets', namespace: ns.platform, labels: labels('webhook') },
    data: { 'targets.yaml': readFileSync(cfg.targetsFile, 'utf8') },
  });
  const webhookPods = { 'app.kubernetes.io/name': 'webhook' };
  const webhook = new k8s.apps.v1.Deployment(
    'webhook',
    {
      metadata: { name: 'webhook', namespace: ns.platform, labels: labels('webhook') },
      spec: {
        replicas: WEBHOOK_REPLICAS,
        // A new pod is ready before an old one stops: a push always finds a replica.
        strategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } },
        selector: { matchLabels: webhookPods },
        template: {
          metadata: { labels: labels('webhook'), annotations: { 'geodata.example.org/environment-sha256': webhookEnv.checksum } },
          spec: {
            ...podSpec({
              ctx,
              serviceAccount: { name: webhookAccount.metadata.name, why: 'the deploy driver creates build Jobs and sets the site images (Roles webhook-builds, webhook-deploy)' },
              containers: [
                container({
                  name: 'webhook',
                  image: images.project.webhook,
                  limits: LIMITS.webhook,
                  uid: NODE_UID,
                  envSecret: webhookEnv.name,
                  ports: [{ name: 'http', port: UPSTREAMS.webhook.port }],
                  probe: { path: '/health', port: UPSTREAMS.webhook.port },
                  volumeMounts: [
                    { name: 'scratch', mountPath: WEBHOOK_SCRATCH.dir },
                    { name: 'targets', mountPath: '/etc/geodata', readOnly: true },
                  ],
                }),
              ],
              volumes: [
                { name: 'scratch', emptyDir: { sizeLimit: WEBHOOK_SCRATCH.sizeLimit } },
                { name: 'targets', configMap: { name: targetsFile.metadata.name } },
              ],
            }),
            // Running deploys get their grace, then the driver its clean-up, before the kubelet kills.
            terminationGracePeriodSeconds: WEBHOOK_SHUTDOWN_GRACE_SECONDS + 30,
            // One per node where there are nodes enough; ScheduleAnyway, so a one-node cluster (and the
            // surge pod of a rollout) still schedules.
            topologySpreadConstraints: [{ maxSkew: 1, topologyKey: 'kubernetes.io/hostname', whenUnsatisfiable: 'ScheduleAnyway', labelSelector: { matchLabels: webhookPods } }],
          },
        },
      },
    },
    { dependsOn: [webhookEnv.secret, webhookDatabase.database, ...rbac.map((r) => r.binding)] },
  );
  const webhookPdb = new k8s.policy.v1.PodDisruptionBudget('webhook', {
    metadata: { name: 'webhook', namespace: ns.platform, labels: labels('webhook') },
    spec: { minAvailable: 1, selector: { matchLabels: webhookPods } },
  });
  const webhookService = new k8s.core.v1.Service('webhook', {
    metadata: { name: 'webhook', namespace: ns.platform, labels: labels('webhook') },
    spec: { selector: { 'app.kubernetes.io/name': 'webhook' }, ports: [{ name: 'http', port: UPSTREAMS.webhook.port, targetPort: UPSTREAMS.webhook.port, protocol: 'TCP' }] },
  });

  const buildPods = { 'geodata.example.org/role': 'build' };
  const policies = [
    ...perTarget.map((p) => p.policy),
    allow('webhook', ns.platform, webhookPods, {
      ingress: [{ peers: [{ pods: 'edge' }], ports: [UPSTREAMS.webhook.port] }],
      egress: [
        { peers: [{ cidrs: settings.apiServerCidrs }], ports: [443, 6443] },
        // Its shared journal: the instances of the cluster that holds the database webhook.
        { peers: [{ pods: { 'cnpg.io/cluster': webhookDatabase.cluster } }], ports: [PG_PORT] },
      ],
    }),
    allow('builds', ns.builds, buildPods, { ingress: [], egress: [{ peers: [{ pods: 'egress' }], ports: [UPSTREAMS.egress.port] }] }),
    allow('egress', ns.builds, { 'app.kubernetes.io/name': 'egress' }, {
      ingress: [{ peers: [{ pods: buildPods }], ports: [UPSTREAMS.egress.port] }],
      egress: [{ peers: [INTERNET], ports: [443] }],
    }),
  ];

  return {
    sites: perTarget,
    workloads: { webhook, egress, ...Object.fromEntries(perTarget.map((p) => [p.t.siteHost, p.deployment])) },
    services: { webhook: webhookService, egress: egressService, ...Object.fromEntries(perTarget.map((p) => [p.t.siteHost, p.service])) },
    webhookAccount,
    webhookPdb,
    rbac,
    tokenless,
    quotas,
    policies,
    /** Where the edge reaches each site: `<service>.<namespace>.svc:<port>`. */
    upstreams: Object.fromEntries(perTarget.map((p) => [p.t.siteHost, `${p.t.siteHost}.${p.namespace}.svc`])),
  };
}

function role(namespace: string, name: string, rules: k8s.types.input.rbac.v1.PolicyRule[]) {
  return { name, namespace, role: new k8s.rbac.v1.Role(`${name}-${namespace}`, { metadata: { name, namespace, labels: PART_OF }, rules }) };
}

/**
 * The fetch step (our code, in the webhook image): the branch's history without file contents
 * (a partial clone), then exactly the pushed commit checked out. As deploy-branch.sh: a commit that is
 * not on the branch, or is an ancestor of the commit the site runs (an old or replayed push), is
 * refused, never built; a push never rolls a site back.
 */
const FETCH_SCRIPT = [
  `git init -q /work/src && cd /work/src && git remote add origin "$REPO" || exit ${EXIT.fetch}`,
  `git fetch -q --no-tags --filter=blob:none origin "+refs/heads/$BRANCH:refs/remotes/origin/branch" || exit ${EXIT.fetch}`,
  `if ! git merge-base --is-ancestor "$COMMIT" refs/remotes/origin/branch 2>/dev/null; then echo "commit $COMMIT is not on branch $BRANCH" >&2; exit ${EXIT.refused}; fi`,
  `if [ -n "$LIVE_COMMIT" ] && [ "$LIVE_COMMIT" != "$COMMIT" ] && git merge-base --is-ancestor "$COMMIT" "$LIVE_COMMIT" 2>/dev/null; then echo "commit $COMMIT is older than the live commit $LIVE_COMMIT; refusing to roll back" >&2; exit ${EXIT.refused}; fi`,
  `git -c advice.detachedHead=false checkout -q --detach "$COMMIT" || exit ${EXIT.fetch}`,
].join('\n');

/** The build step (the team's code): the release as one tar, without the clone's .git. */
const BUILD_SCRIPT = [
  `npm ci --no-audit --no-fund || exit ${EXIT.dependencies}`,
  `npm run build || exit ${EXIT.build}`,
  `tar -C /work/src --exclude=./.git --transform "s,^\\.,srv/site," -cf /work/out/release.tar . || exit ${EXIT.build}`,
].join('\n');

/**
 * One deploy's Job, as the deploy driver creates it with `$(COMMIT)`, `$(BRANCH)` and `$(LIVE_COMMIT)`
 * filled in (infra/k8s-deploy/template.ts): a plain object (not a Pulumi resource, the program declares
 * no deploy), checked against the Job schema like every declared object. The steps tell the driver how
 * they failed by their exit codes (infra/k8s-deploy/protocol.ts): fetch 9 refused, else a failed fetch;
 * build 5 `npm ci`, else the build.
 */
export function buildJobTemplate(ctx: K8sContext, t: StackTarget, images: K8sImages): k8s.types.input.batch.v1.Job & { apiVersion: string; kind: string } {
  const { k8s: settings, ns, cfg } = ctx;
  const target = t.target;
  const proxy = `http://egress.${ns.builds}.svc:${UPSTREAMS.egress.port}`;
  const work = (name: string, readOnly = false) => ({ name, mountPath: `/work/${name}`, readOnly });
  const step = (name: string, uid: number, extra: Partial<k8s.types.input.core.v1.Container>) => ({
    ...container({ name, image: images.project.webhook, limits: LIMITS.builder, uid }),
    ...extra,
  });
  const siteDir = target.siteDir ?? '.';
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { generateName: `build-${t.siteHost.replace(/^site-/, '')}-`, namespace: ns.builds, labels: { ...labels('build'), 'geodata.example.org/role': 'build', 'geodata.example.org/target': target.deployPath } },
    spec: {
      backoffLimit: 0,
      activeDeadlineSeconds: BUILD_DEADLINE_SECONDS,
      ttlSecondsAfterFinished: 86_400,
      template: {
        metadata: { labels: { 'geodata.example.org/role': 'build', 'geodata.example.org/target': target.deployPath } },
        spec: {
          ...podSpec({
            ctx,
            untrusted: true,
            restartPolicy: 'Never',
            fsGroup: t.buildUid,
            tmpMb: 512,
            initContainers: [
              // Our code, with the git credential: the commit, nothing of the team's runs here.
              step(BUILD_STEPS.fetch, t.buildUid, {
                command: ['sh', '-c', FETCH_SCRIPT],
                env: [
                  // Filled in by the driver; the script reads them quoted, never as code.
                  { name: 'BRANCH', value: '$(BRANCH)' },
                  { name: 'COMMIT', value: '$(COMMIT)' },
                  { name: 'LIVE_COMMIT', value: '$(LIVE_COMMIT)' },
                  { name: 'REPO', value: target.repo },
                  // Ordinary transports only (as deploy-branch.sh); /work/src is the volume's (root's), not the build uid's.
                  { name: 'GIT_ALLOW_PROTOCOL', value: 'https' },
                  { name: 'GIT_TERMINAL_PROMPT', value: '0' },
                  { name: 'GIT_CONFIG_COUNT', value: '1' },
                  { name: 'GIT_CONFIG_KEY_0', value: 'safe.directory' },
                  { name: 'GIT_CONFIG_VALUE_0', value: '/work/src' },
                  // The egress proxy lets the git hosts through only with this credential (Basic git:<token>).
                  { name: 'EGRESS_GIT_TOKEN', valueFrom: { secretKeyRef: { name: 'egress-env', key: 'EGRESS_GIT_TOKEN' } } },
                  { name: 'HTTPS_PROXY', value: `http://git:$(EGRESS_GIT_TOKEN)@egress.${ns.builds}.svc:${UPSTREAMS.egress.port}` },
                  { name: 'HOME', value: '/tmp' },
                ],
                volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }, work('src')],
              }),
              // The team's code: no credential, the package registry only, a deadline.
              step(BUILD_STEPS.build, t.buildUid, {
                image: NODE_IMAGE,
                workingDir: `/work/src/${siteDir}`,
                command: ['sh', '-c', BUILD_SCRIPT],
                env: [
                  { name: 'HTTPS_PROXY', value: proxy },
                  { name: 'npm_config_registry', value: cfg.npmRegistry },
                  { name: 'HOME', value: '/tmp' },
                ],
                volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }, work('src'), work('out')],
              }),
            ],
            containers: [
              // A registry client: the release as one layer on the pinned Node image, pushed for this target only.
              {
                ...container({ name: BUILD_STEPS.publish, image: CRANE_IMAGE, limits: LIMITS.job, uid: 65532 }),
                args: ['append', '--base', NODE_IMAGE, '--new_layer', '/work/out/release.tar', '--new_tag', `${settings.registry}/${t.siteHost}:$(COMMIT)`],
                env: [
                  { name: 'HTTPS_PROXY', value: proxy },
                  { name: 'DOCKER_CONFIG', value: '/work/push' },
                ],
                volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }, work('out', true), work('push', true)],
              },
            ],
            volumes: [
              { name: 'src', emptyDir: { sizeLimit: '4Gi' } },
              { name: 'out', emptyDir: { sizeLimit: '2Gi' } },
              { name: 'push', secret: { secretName: pushSecretOf(t), items: [{ key: '.dockerconfigjson', path: 'config.json' }] } },
            ],
          }),
        },
      },
    },
  } as k8s.types.input.batch.v1.Job & { apiVersion: string; kind: string };
}
