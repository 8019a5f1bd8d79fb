import * as pulumi from '@pulumi/pulumi';
import { serviceNameOf } from '../services/shared/targets.js';
import { loadStackConfig } from './config.js';
import { declareKubernetesStack } from './k8s/stack.js';
import { loadSecrets } from './secrets.js';
import { declareStack } from './stack.js';

/**
 * The Pulumi program: configuration → secrets → resources, on the target the stack configuration names
 * (`target`: docker, every container on one Docker host, infra/stack.ts; kubernetes, the same parts on a
 * cluster, infra/k8s/stack.ts). Importing this module declares the stack (under `pulumi up`, or under
 * the runtime mocks in the tests); index.ts re-exports the outputs.
 */
const config = new pulumi.Config();
export const stackConfig = loadStackConfig(config);
const secrets = loadSecrets(config, stackConfig.targets);

type DockerStack = ReturnType<typeof declareStack>;

/** The Kubernetes target's stack; undefined on the Docker target. */
export const kubernetes = stackConfig.target === 'kubernetes' ? declareKubernetesStack(stackConfig, secrets, config) : undefined;

/**
 * The Docker target's stack (what its policy tests read). On the Kubernetes target nothing of it is
 * declared, and reading it throws, naming the target, rather than handing out an empty stack.
 */
export const stack: DockerStack = stackConfig.target === 'docker' ? declareStack(stackConfig, secrets) : notDeclared<DockerStack>('the Docker stack (program.stack)', stackConfig.target);

function notDeclared<T extends object>(what: string, target: string): T {
  return new Proxy({} as T, {
    get: (_target, key) => {
      throw new Error(`${what}.${String(key)} is not declared: this stack's target is ${target} (read program.kubernetes)`);
    },
  });
}

const routes = kubernetes ? kubernetes.routes : stack.routes;

/** Where everything answers once `pulumi up` is done. */
export const endpoints = Object.fromEntries(routes.map((route) => [route.domain, `https://${route.domain} → ${route.upstream}`]));

/** The webhook secret of each deploy target, to paste into the git host (`pulumi stack output --show-secrets`). */
export const webhookSecrets = pulumi.secret(pulumi.all(secrets.webhookTargetSecrets));

export const geoserverAdminPassword = secrets.geoserverAdminPassword;
export const caddyfile = kubernetes ? kubernetes.caddyfile : stack.caddyfile;
/**
 * "succeeded" once every one-shot job completed (Docker: exited 0; Kubernetes: the Jobs, which Pulumi
 * waits for); a failed job fails `pulumi up` here too, naming it.
 */
export const jobs = kubernetes ? pulumi.all(Object.values(kubernetes.jobs).map((job) => job.id)).apply(() => 'succeeded') : stack.jobsSucceeded;
export const branchSites = stackConfig.targets.map((t) => ({ service: serviceNameOf(t), domain: t.domain, port: t.port }));

/**
 * What the clients-sync job printed on its last run: `created <client_id>` with the generated
 * `client_secret` of a new confidential client (shown this once; Hydra keeps only a hash), or
 * `unchanged`/`updated`. Read it with `pulumi stack output --show-secrets oauth2ClientsSync`, store the
 * secret, and it is gone from the next run's output. On Kubernetes the Job's log holds it (the command
 * to read it is the output).
 */
export const oauth2ClientsSync = kubernetes
  ? kubernetes.identity.jobs.clientsSync.metadata.name.apply((name) => `kubectl logs --namespace ${kubernetes.ctx.ns.platform} job/${name}`)
  : pulumi.secret(stack.jobs.clientsSync.containerLogs);

/** Kubernetes: the project images `pulumi up` expects in the registry (built and pushed outside the cluster first). */
export const images = kubernetes ? kubernetes.images.project : undefined;
