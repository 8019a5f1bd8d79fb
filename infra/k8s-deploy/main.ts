import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { basename, isAbsolute, join } from 'node:path';
import { z } from 'zod';
import { apiUrlFrom, KubeClient, SERVICE_ACCOUNT_DIR } from './api.js';
import { runDeploy, type DriverSettings, type Output } from './driver.js';
import { EXIT } from './protocol.js';

/**
 * `k8s-deploy` (/usr/local/bin/k8s-deploy in the webhook image, infra/docker/k8s-deploy.sh): the
 * webhook's DEPLOY_SCRIPT on the Kubernetes target, called exactly as scripts/deploy-branch.sh is
 * (services/webhook/src/deployments/invocation.ts):
 *
 *   k8s-deploy <branch> <deployDir> <port> <repoUrl> <commit>
 *
 *   branch     the pushed branch (git's branch-name rules, checked by `git check-ref-format`)
 *   deployDir  DEPLOY_ROOT/<deployPath> on the webhook's volume: its last segment names the target
 *              (the ConfigMap build-<dp>); what runs is recorded there for the webhook (live.ts)
 *   port       checked, unused (the site Deployment has its port)
 *   repoUrl    checked, unused: the template carries the target's repository, so a webhook cannot
 *              point a build elsewhere
 *   commit     required here (the image tag is the commit): 40 or 64 lower-case hex digits
 *
 * Environment (through the webhook's allow-list: DEPLOY_ENV_PASS names the K8S_ and KUBERNETES_ ones):
 *   K8S_BUILDS_NAMESPACE      the builds namespace, where the templates are and the Jobs run (required)
 *   KUBERNETES_SERVICE_HOST,  the API server, as the kubelet sets them in every pod
 *   KUBERNETES_SERVICE_PORT   (https://kubernetes.default.svc when unset)
 *   K8S_API_URL, K8S_TOKEN_FILE, K8S_CA_FILE   overrides of the above and of the service-account files
 *   HEALTH_TIMEOUT_SECONDS    how long the rollout may take to become available (300)
 *   K8S_CALL_TIMEOUT_SECONDS  the time limit of every API call (30)
 *   K8S_DEPLOY_POLL_MS        how often the Job and the rollout are looked at (2000)
 *   K8S_DEPLOY_LOG_MAX_BYTES  build log copied into the deploy log, all steps together (4 MiB)
 *   DEPLOY_LOG                the deploy's log file (set by the webhook's launcher): its deployment id names the Job
 *
 * Exit codes (deploy-branch.sh's): 0 deployed (or already running), 1 unexpected error (the API
 * unreachable or refusing, 403 named), 2 usage (arguments, environment, an unusable template),
 * 4 fetch failed, 5 npm ci failed, 6 build or publish failed, 7 the Deployment could not be set
 * (nothing changed), 8 the rollout did not become available (the previous image restored), 9 refused
 * (the commit is not on the branch, or older than the one the site runs), 130/143 interrupted.
 * Standard output and error are the deploy log; the last line of a deploy is `release=… commit=…`.
 */

const COMMIT = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
const DEPLOY_PATH = /^[a-z0-9][a-z0-9._-]*$/i;

const EnvSchema = z.object({
  K8S_BUILDS_NAMESPACE: z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'a namespace name').max(63),
  K8S_TOKEN_FILE: z.string().default(join(SERVICE_ACCOUNT_DIR, 'token')),
  K8S_CA_FILE: z.string().default(join(SERVICE_ACCOUNT_DIR, 'ca.crt')),
  HEALTH_TIMEOUT_SECONDS: z.coerce.number().int().min(1).max(3600).default(300),
  K8S_CALL_TIMEOUT_SECONDS: z.coerce.number().int().min(1).max(300).default(30),
  K8S_DEPLOY_POLL_MS: z.coerce.number().int().min(10).max(60_000).default(2000),
  K8S_DEPLOY_LOG_MAX_BYTES: z.coerce.number().int().min(1024).max(64 * 1024 * 1024).default(4 * 1024 * 1024),
  DEPLOY_LOG: z.string().optional(),
});

const stamp = (at = new Date()) => at.toISOString().replace(/\D/g, '').slice(0, 14);
const line = (message: string) => `${new Date().toISOString().replace(/\.\d+Z$/, 'Z')} ${message}\n`;

class UsageError extends Error {}

function usage(message: string): never {
  throw new UsageError(`${message}\nusage: k8s-deploy <branch> <deployDir> <port> <repoUrl> <commit>`);
}

/** git's own rules for a branch name (as deploy-branch.sh checks it). */
function isBranchName(branch: string): boolean {
  if (branch.startsWith('-') || branch.length > 255 || branch.includes('\0')) return false;
  const result = spawnSync('git', ['check-ref-format', '--branch', branch], { stdio: 'ignore', timeout: 10_000 });
  if (result.error) usage(`git is needed to check the branch name: ${result.error.message}`);
  return result.status === 0;
}

export function parseInvocation(argv: string[], env: NodeJS.ProcessEnv): { settings: DriverSettings; api: KubeClient } {
  if (argv.length !== 5) usage(argv.length === 4 ? 'the commit is required: the site image is tagged with it' : 'expected 5 arguments');
  const [branch, deployDir, port, repoUrl, commit] = argv as [string, string, string, string, string];
  if (!isBranchName(branch)) usage('invalid branch name');
  if (!COMMIT.test(commit)) usage('invalid commit: 40 or 64 lower-case hex digits');
  if (!isAbsolute(deployDir) || !DEPLOY_PATH.test(basename(deployDir))) usage(`deployDir must be an absolute path ending in the target's deploy path: ${deployDir}`);
  if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) usage(`invalid port: ${port}`);
  if (repoUrl === '' || repoUrl.startsWith('-')) usage('invalid repository URL');
  const parsed = EnvSchema.safeParse(Object.fromEntries(Object.entries(env).filter(([, v]) => v !== '')));
  if (!parsed.success) usage(`invalid environment: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const e = parsed.data;
  let url: URL;
  try {
    url = apiUrlFrom(env);
  } catch {
    usage('K8S_API_URL or KUBERNETES_SERVICE_HOST/PORT do not make a URL');
  }
  if (url.protocol !== 'https:') usage(`the Kubernetes API is reached over https only: ${url.origin}`);
  let ca: string;
  try {
    ca = readFileSync(e.K8S_CA_FILE, 'utf8');
  } catch (error) {
    usage(`cannot read the cluster's CA (${e.K8S_CA_FILE}): ${(error as Error).message}; is a service-account token mounted?`);
  }
  // The webhook's launcher names the log deploy-<stamp>-<deployment id>.log.
  const id = /^deploy-\d{14}-([0-9a-f-]{8,36})\.log$/.exec(basename(e.DEPLOY_LOG ?? ''))?.[1] ?? randomBytes(4).toString('hex');
  return {
    settings: {
      buildsNamespace: e.K8S_BUILDS_NAMESPACE,
      deployPath: basename(deployDir),
      deployDir,
      branch,
      commit,
      deploymentId: id,
      release: stamp(),
      rolloutTimeoutMs: e.HEALTH_TIMEOUT_SECONDS * 1000,
      pollMs: e.K8S_DEPLOY_POLL_MS,
      logMaxBytes: e.K8S_DEPLOY_LOG_MAX_BYTES,
    },
    api: new KubeClient({ url, ca, tokenFile: e.K8S_TOKEN_FILE, callTimeoutMs: e.K8S_CALL_TIMEOUT_SECONDS * 1000 }),
  };
}

export async function main(argv: string[], env: NodeJS.ProcessEnv): Promise<number> {
  let invocation: ReturnType<typeof parseInvocation>;
  try {
    invocation = parseInvocation(argv, env);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(line(`error: ${error.message}`));
    return EXIT.usage;
  }
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => stop.abort(signal);
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
  const out: Output = {
    log: (message) => process.stdout.write(line(message)),
    fail: (message) => process.stderr.write(line(`error: ${message}`)),
    raw: (chunk) => process.stdout.write(chunk),
    result: (text) => process.stdout.write(`${text}\n`),
  };
  return runDeploy(invocation.settings, invocation.api, out, stop.signal);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main(process.argv.slice(2), process.env).then(
    // Exit once what was written has reached the log file.
    (code) => process.stdout.write('', () => process.exit(code)),
    (error: unknown) => {
      console.error(error);
      process.exit(EXIT.error);
    },
  );
}
