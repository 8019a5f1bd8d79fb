import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readRevisionFile } from '../../services/shared/revision-file.mjs';
import { lacks, binary } from '../helpers/requirements.js';
import { FixtureRepo, git } from '../../services/webhook/test/support/helpers.js';
import { pushPayload, sendGitlab } from '../../services/webhook/test/support/webhook-harness.js';
import { startWebhookProcess } from '../../services/webhook/test/support/server-process.js';
import { buildTree } from '../../infra/docker/build.js';
import { instructions, finalStage } from '../../infra/docker/image.js';
import { NODE_IMAGE } from '../../infra/images.js';
import { K8S_DEPLOY_DRIVER } from '../../infra/k8s/sites.js';
import { loadValidators, type Validators } from '../../infra/k8s/schemas/validate.js';
import { EXIT } from '../../infra/k8s-deploy/protocol.js';
import { instantiate, readTemplate } from '../../infra/k8s-deploy/template.js';
import { declareKubernetesUnderMocks, EXAMPLE_KUBERNETES, type DeclaredObject } from '../../infra/testing/k8s.js';
import { startKubeApiDouble, type Json, type KubeApiDouble, type PolicyRule, type RecordedRequest, type Scenario } from '../../infra/testing/k8s-api.js';

/**
 * The webhook's deploy driver on the Kubernetes target (infra/k8s-deploy, /usr/local/bin/k8s-deploy in
 * the webhook image) as the webhook runs it: the image's wrapper script running the compiled driver
 * with plain node, against a Kubernetes API double over TLS (infra/testing/k8s-api.ts) that starts
 * with exactly what the Pulumi program declares (the build templates, the site Deployments), enforces
 * exactly the Roles the program binds to the webhook's service account, and checks every object the
 * driver sends against the pinned Kubernetes models (the schema test's validators).
 */

const REPO = join(import.meta.dirname, '../..');
const WRAPPER = join(REPO, 'infra/docker/k8s-deploy.sh');
const needsOpenssl = lacks('the deploy driver tests (the API double serves TLS)', binary('openssl'));

let objects: DeclaredObject[];
let ns: { platform: string; sites: string; preview: string; builds: string };
let validators: Validators;
let appRoot: string;
let scratch: string;
/** Every request of the runs made with the program's own Roles: what the driver does. */
const driverRequests: RecordedRequest[] = [];
const doubles: KubeApiDouble[] = [];

const commit = () => randomBytes(20).toString('hex');
const siteImage = (dp: string) => `${EXAMPLE_KUBERNETES.registry}/site-${dp}`;

/** The Roles bound to the webhook's service account, by namespace, as the program declares them. */
function webhookRules(): Map<string, PolicyRule[]> {
  const rules = new Map<string, PolicyRule[]>();
  for (const binding of objects.filter((o) => o.kind === 'RoleBinding').map((o) => o.object as { metadata: { namespace: string }; roleRef: { name: string }; subjects: Json[] })) {
    if (!binding.subjects.some((s) => s.kind === 'ServiceAccount' && s.name === 'webhook' && s.namespace === ns.platform)) continue;
    const role = objects.find((o) => o.kind === 'Role' && (o.object.metadata as Json).name === binding.roleRef.name && (o.object.metadata as Json).namespace === binding.metadata.namespace);
    rules.set(binding.metadata.namespace, [...(rules.get(binding.metadata.namespace) ?? []), ...structuredClone((role!.object as { rules: PolicyRule[] }).rules)]);
  }
  return rules;
}

async function startDouble(scenario: Scenario = {}, rules = webhookRules()): Promise<KubeApiDouble> {
  const start = objects.filter((o) => (o.kind === 'ConfigMap' && /^build-/.test(String((o.object.metadata as Json).name))) || (o.kind === 'Deployment' && /^site-/.test(String((o.object.metadata as Json).name))));
  const double = await startKubeApiDouble({ objects: start.map((o) => o.object), rules, user: `system:serviceaccount:${ns.platform}:webhook`, validators, scenario });
  doubles.push(double);
  return double;
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  deployDir: string;
}

function driverEnv(double: KubeApiDouble, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    APP_ROOT: appRoot,
    K8S_API_URL: double.url,
    K8S_CA_FILE: double.caFile,
    K8S_TOKEN_FILE: double.tokenFile,
    K8S_BUILDS_NAMESPACE: ns.builds,
    K8S_DEPLOY_POLL_MS: '20',
    HEALTH_TIMEOUT_SECONDS: '20',
    ...extra,
  };
}

/** The driver as the webhook's launcher starts it: deploy-branch.sh's arguments, its own process group. */
function startDriver(double: KubeApiDouble, args: { branch: string; dp: string; commit?: string; extra?: string[] }, env: Record<string, string> = {}) {
  const deployDir = join(scratch, 'sites', args.dp);
  const argv = [args.branch, deployDir, '3000', 'https://git.example.org/ignored.git', ...(args.commit ? [args.commit] : []), ...(args.extra ?? [])];
  const child = spawn(WRAPPER, argv, { env: { ...driverEnv(double), DEPLOY_LOG: join(deployDir, 'logs', `deploy-20261128000000-${randomBytes(16).toString('hex')}.log`), ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const done = new Promise<Run>((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr, deployDir })));
  return { child, done };
}

const runDriver = (double: KubeApiDouble, args: Parameters<typeof startDriver>[1], env?: Record<string, string>) => startDriver(double, args, env).done;

const deploymentOf = (double: KubeApiDouble, namespace: string, dp: string) => double.object('deployments', namespace, `site-${dp}`) as Json & { metadata: { annotations: Record<string, string>; resourceVersion: string }; spec: { replicas: number; template: { spec: { containers: { name: string; image: string }[] } } }; status: Json };
const imageOf = (d: ReturnType<typeof deploymentOf>) => d.spec.template.spec.containers.find((c) => c.name === 'site')?.image;
const jobsIn = (double: KubeApiDouble) => double.list('jobs', ns.builds) as (Json & { metadata: { name: string }; spec: { template: { spec: { initContainers: Json[]; containers: Json[] } } } })[];
const envOf = (job: ReturnType<typeof jobsIn>[number], step: string) =>
  Object.fromEntries((([...job.spec.template.spec.initContainers, ...job.spec.template.spec.containers].find((c) => c.name === step)?.env ?? []) as { name: string; value?: string }[]).map((e) => [e.name, e.value]));

/** What the kubelet makes of `$(NAME)` and `$$` in a command, an argument or an env value (earlier variables only). */
const kubeletExpand = (value: string, vars: Record<string, string>) =>
  value.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (match, name: string | undefined) => (match === '$$' ? '$' : name !== undefined && Object.hasOwn(vars, name) ? vars[name]! : match));

beforeAll(async () => {
  if (needsOpenssl) return;
  const declared = await declareKubernetesUnderMocks();
  objects = declared.objects;
  ns = declared.stack.ctx.ns;
  validators = await loadValidators(['batch/v1 Job', 'apps/v1 Deployment', 'v1 ConfigMap']);
  // What the webhook image ships of the driver, compiled as its Dockerfile compiles it.
  scratch = mkdtempSync(join(tmpdir(), 'k8s-deploy-'));
  appRoot = join(scratch, 'app');
  await buildTree(REPO, ['infra/k8s-deploy', 'infra/stack/targets.ts', 'services/shared/targets.ts', 'services/shared/config.ts'], appRoot);
  symlinkSync(join(REPO, 'node_modules'), join(appRoot, 'node_modules'));
}, 120_000);

afterAll(async () => {
  await Promise.all(doubles.map((d) => d.close()));
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe.skipIf(needsOpenssl)('the deploy driver against the Kubernetes API', () => {
  it('the webhook image installs it as /usr/local/bin/k8s-deploy, the DEPLOY_SCRIPT the program gives the webhook', () => {
    const dockerfile = readFileSync(join(REPO, 'infra/docker/webhook.Dockerfile'), 'utf8');
    const copies = finalStage(dockerfile).filter((i) => i.keyword === 'COPY').map((i) => i.args);
    expect(copies).toContain(`--chmod=755 infra/docker/k8s-deploy.sh ${K8S_DEPLOY_DRIVER}`);
    const build = instructions(dockerfile).find((i) => i.keyword === 'RUN' && i.args.includes('infra/docker/build.ts'));
    expect(build?.args.split(/\s+/)).toEqual(expect.arrayContaining(['infra/k8s-deploy', 'infra/stack/targets.ts']));
    const env = objects.find((o) => o.kind === 'Secret' && (o.object.metadata as Json).name === 'webhook-env')?.object as { stringData: Record<string, string> };
    expect(env.stringData.DEPLOY_SCRIPT).toBe(K8S_DEPLOY_DRIVER);
    expect(env.stringData.DEPLOY_ENV_PASS?.split(' ').sort()).toEqual(['K8S_BUILDS_NAMESPACE', 'KUBERNETES_SERVICE_HOST', 'KUBERNETES_SERVICE_PORT']);
    expect(Number(env.stringData.DEPLOY_TIMEOUT_SECONDS)).toBeGreaterThan(840 + Number(env.stringData.HEALTH_TIMEOUT_SECONDS));
  });

  it('a pushed commit is built by a Job from the target template and runs on the site Deployment: exit 0, the commit reported', async () => {
    const double = await startDouble();
    const c = commit();
    const run = await runDriver(double, { branch: 'main', dp: 'main', commit: c });
    driverRequests.push(...double.requests);
    expect(run.code, run.stdout + run.stderr).toBe(EXIT.deployed);
    // deploy-branch.sh's last line, and the live record the webhook's launcher reads.
    const last = run.stdout.trim().split('\n').at(-1)!;
    expect(last).toMatch(new RegExp(`^release=\\d{14} commit=${c}$`));
    const release = /release=(\d{14})/.exec(last)![1]!;
    expect(readlinkSync(join(run.deployDir, 'live'))).toBe(`deploys/${release}`);
    expect(await readRevisionFile(join(run.deployDir, 'deploys', release, 'REVISION'))).toBe(c);

    // One Job, named for the deploy, the commit filled in where the steps read it, nothing left unfilled.
    const [job, ...others] = jobsIn(double);
    expect(others).toEqual([]);
    expect(job!.metadata.name).toMatch(new RegExp(`^build-main-${c.slice(0, 7)}-[0-9a-f]{8}$`));
    expect(envOf(job!, 'fetch')).toMatchObject({ BRANCH: 'main', COMMIT: c, LIVE_COMMIT: '' });
    const publish = job!.spec.template.spec.containers.find((x) => x.name === 'publish') as { args: string[] };
    expect(publish.args).toContain(`${siteImage('main')}:${c}`);
    expect(JSON.stringify(job)).not.toMatch(/\$\((BRANCH|COMMIT|LIVE_COMMIT)\)/);
    // The steps' logs, in the order they ran, in the deploy log.
    const at = (step: string) => run.stdout.indexOf(`--- ${step} (pod ${job!.metadata.name}-`);
    expect(at('fetch')).toBeGreaterThan(-1);
    expect([at('fetch') < at('build'), at('build') < at('publish')]).toEqual([true, true]);
    expect(run.stdout).toContain('build: done');

    // The site runs the image the Job published, with the replicas of its annotation, rolled out.
    const site = deploymentOf(double, ns.sites, 'main');
    expect(imageOf(site)).toBe(`${siteImage('main')}:${c}`);
    expect(site.spec.replicas).toBe(Number(site.metadata.annotations['geodata.example.org/replicas']));
    expect(site.spec.replicas).toBeGreaterThan(0);
    expect(site.status).toMatchObject({ availableReplicas: site.spec.replicas, updatedReplicas: site.spec.replicas });
    expect(site.metadata.annotations['geodata.example.org/release']).toBe(release);
    // Nothing the API refused on the way.
    expect(double.requests.filter((r) => r.status >= 400)).toEqual([]);
  });

  it('the next push names the running commit to the fetch step (which refuses an older one); the running commit again builds nothing; a branch named like a variable stays text', async () => {
    const double = await startDouble();
    const dp = 'feature-de1';
    const first = commit();
    const branch = 'feature/team-de1/$(EGRESS_GIT_TOKEN)';
    expect((await runDriver(double, { branch, dp, commit: first })).code).toBe(EXIT.deployed);
    // The kubelet reads `$$` as `$`: the fetch step sees the branch's name, never the credential's value.
    const escaped = envOf(jobsIn(double)[0]!, 'fetch').BRANCH!;
    expect(escaped).toBe('feature/team-de1/$$(EGRESS_GIT_TOKEN)');
    expect(kubeletExpand(escaped, { EGRESS_GIT_TOKEN: 'the-credential' })).toBe(branch);
    expect(imageOf(deploymentOf(double, ns.preview, dp))).toBe(`${siteImage(dp)}:${first}`);

    const again = await runDriver(double, { branch, dp, commit: first });
    expect(again.code).toBe(EXIT.deployed);
    expect(again.stdout).toContain('already runs');
    expect(jobsIn(double)).toHaveLength(1);

    const second = commit();
    const next = await runDriver(double, { branch, dp, commit: second });
    driverRequests.push(...double.requests);
    expect(next.code, next.stdout + next.stderr).toBe(EXIT.deployed);
    const newest = jobsIn(double).find((j) => j.metadata.name.includes(second.slice(0, 7)))!;
    expect(envOf(newest, 'fetch')).toMatchObject({ COMMIT: second, LIVE_COMMIT: first });
    expect(imageOf(deploymentOf(double, ns.preview, dp))).toBe(`${siteImage(dp)}:${second}`);
  });

  it('the fetch step checks out exactly the pushed commit, and refuses (9) one that is not on the branch or older than the running one', () => {
    const repo = new FixtureRepo(join(scratch, 'repo'));
    const a = repo.head('main');
    const b = repo.commit('main', { VERSION: '2\n' });
    const elsewhere = repo.commit('elsewhere', { VERSION: 'x\n' });
    const configMap = objects.find((o) => o.kind === 'ConfigMap' && (o.object.metadata as Json).name === 'build-main')!.object;
    const { template } = readTemplate(configMap);
    const fetchStep = (c: string, live: string | null, url = repo.url) => {
      const job = instantiate(template, { branch: 'main', commit: c, liveCommit: live, deploymentId: '00000000', release: '20261128000000' }) as { spec: { template: { spec: { initContainers: { name: string; command: string[]; env: { name: string; value?: string }[] }[] } } } };
      const step = job.spec.template.spec.initContainers.find((x) => x.name === 'fetch')!;
      const vars: Record<string, string> = {};
      for (const e of step.env) if (e.value !== undefined) vars[e.name] = kubeletExpand(e.value, vars);
      // The pod's volume and the egress proxy are this machine's folder and a file:// repository here.
      const src = mkdtempSync(join(scratch, 'src-'));
      const script = kubeletExpand(step.command[2]!, vars).replaceAll('/work/src', src);
      const { HTTPS_PROXY: _proxy, ...env } = vars;
      const result = spawnSync('sh', ['-c', script], { env: { ...env, PATH: process.env.PATH, HOME: src, REPO: url, GIT_ALLOW_PROTOCOL: 'file', GIT_CONFIG_NOSYSTEM: '1' }, encoding: 'utf8', timeout: 30_000 });
      return { code: result.status, head: result.status === 0 ? git(src, 'rev-parse', 'HEAD') : undefined, stderr: result.stderr };
    };
    const pick = ({ code, head }: { code: number | null; head: string | undefined }) => ({ code, head });
    expect(pick(fetchStep(a, null))).toEqual({ code: 0, head: a });
    expect(pick(fetchStep(b, a))).toEqual({ code: 0, head: b });
    expect(fetchStep(a, b)).toMatchObject({ code: EXIT.refused, stderr: expect.stringContaining('older than the live commit') });
    expect(fetchStep(elsewhere, null)).toMatchObject({ code: EXIT.refused, stderr: expect.stringContaining('is not on branch main') });
    expect(fetchStep(a, null, `file://${join(scratch, 'no-such-repo')}`).code).toBe(EXIT.fetch);
  });

  it.each([
    ['the fetch step refuses the commit (not on the branch, or older than live)', 'fetch', 9, EXIT.refused],
    ['npm ci fails', 'build', 5, EXIT.dependencies],
    ['the build fails', 'build', 6, EXIT.build],
  ])('%s: the deploy exits with its code, the site Deployment untouched', async (_title, step, stepExit, expected) => {
    const double = await startDouble({ build: () => ({ [step]: { exitCode: stepExit, log: `${step}: it went wrong here\n` } }) });
    const before = structuredClone(deploymentOf(double, ns.sites, 'main'));
    const run = await runDriver(double, { branch: 'main', dp: 'main', commit: commit() });
    driverRequests.push(...double.requests);
    expect(run.code, run.stdout + run.stderr).toBe(expected);
    expect(run.stdout).toContain(`${step}: it went wrong here`);
    expect(run.stdout).not.toContain('--- publish');
    expect(run.stderr).toMatch(new RegExp(`the ${step} step of build Job \\S+ failed \\(exit ${stepExit}`));
    expect(double.requests.filter((r) => r.verb === 'patch')).toEqual([]);
    expect(deploymentOf(double, ns.sites, 'main')).toEqual(before);
  });

  it('a rollout that does not become available within the deadline: the previous image and replicas back, exit 8', async () => {
    const good = commit();
    const bad = commit();
    const double = await startDouble({ rollout: (image) => (image.endsWith(bad) ? 'stuck' : undefined) });
    expect((await runDriver(double, { branch: 'main', dp: 'main', commit: good })).code).toBe(EXIT.deployed);
    const before = deploymentOf(double, ns.sites, 'main');
    const release = before.metadata.annotations['geodata.example.org/release'];

    const run = await runDriver(double, { branch: 'main', dp: 'main', commit: bad }, { HEALTH_TIMEOUT_SECONDS: '1' });
    driverRequests.push(...double.requests);
    expect(run.code, run.stdout + run.stderr).toBe(EXIT.rollout);
    expect(run.stderr).toMatch(/did not become available within 1 s \(updated 1\/2, available 2\/2, 2 old\); restoring/);
    const after = deploymentOf(double, ns.sites, 'main');
    expect({ image: imageOf(after), replicas: after.spec.replicas, release: after.metadata.annotations['geodata.example.org/release'] }).toEqual({
      image: `${siteImage('main')}:${good}`,
      replicas: before.spec.replicas,
      release,
    });
    expect(run.stdout).toContain(`runs ${siteImage('main')}:${good} again`);
    // Two patches: the new image, then the previous one, which first tests that the image is still the new one.
    const patches = double.requests.filter((r) => r.verb === 'patch').slice(-2).map((r) => r.body as { op: string; path: string; value: unknown }[]);
    expect(patches[1]).toContainEqual({ op: 'test', path: '/spec/template/spec/containers/0/image', value: `${siteImage('main')}:${bad}` });
    expect(await readRevisionFile(join(run.deployDir, 'deploys', release!, 'REVISION'))).toBe(good);
  });

  it('a first deploy whose rollout fails leaves the target as it was: the placeholder image, no replica', async () => {
    const double = await startDouble({ rollout: (image) => (image.startsWith(siteImage('develop')) ? 'stuck' : undefined) });
    const run = await runDriver(double, { branch: 'develop', dp: 'develop', commit: commit() }, { HEALTH_TIMEOUT_SECONDS: '1' });
    expect(run.code, run.stdout + run.stderr).toBe(EXIT.rollout);
    const site = deploymentOf(double, ns.sites, 'develop');
    expect({ image: imageOf(site), replicas: site.spec.replicas }).toEqual({ image: NODE_IMAGE, replicas: 0 });
    expect(existsSync(join(run.deployDir, 'live'))).toBe(false);
  });

  it('stopped by the webhook (SIGTERM) while the Job runs: the Job and its pod deleted, the site untouched, exit 143', async () => {
    const double = await startDouble({ stepMs: 60_000 });
    const before = structuredClone(deploymentOf(double, ns.sites, 'main'));
    const { child, done } = startDriver(double, { branch: 'main', dp: 'main', commit: commit() });
    await expect.poll(() => double.list('pods', ns.builds).length, { timeout: 15_000 }).toBe(1);
    child.kill('SIGTERM');
    const run = await done;
    driverRequests.push(...double.requests);
    expect(run.code, run.stdout + run.stderr).toBe(EXIT.terminated);
    expect(double.requests.find((r) => r.verb === 'delete')?.path).toMatch(/propagationPolicy=Background/);
    expect([jobsIn(double), double.list('pods', ns.builds)]).toEqual([[], []]);
    expect(deploymentOf(double, ns.sites, 'main')).toEqual(before);
  });

  it('the API refusing a call (RBAC) is named as such: which call, the 403, the Roles to look at', async () => {
    const noTemplate = webhookRules();
    noTemplate.set(ns.builds, noTemplate.get(ns.builds)!.filter((r) => !r.resources.includes('configmaps')));
    const first = await startDouble({}, noTemplate);
    const refused = await runDriver(first, { branch: 'main', dp: 'main', commit: commit() });
    expect(refused.code).toBe(EXIT.error);
    expect(refused.stderr).toContain('the Kubernetes API refused to get configmaps build-main in geodata-builds (403 Forbidden)');
    expect(refused.stderr).toContain('webhook-builds');
    expect(first.requests.filter((r) => r.verb === 'create')).toEqual([]);

    const noPatch = webhookRules();
    noPatch.set(ns.sites, noPatch.get(ns.sites)!.map((r) => ({ ...r, verbs: r.verbs.filter((v) => v !== 'patch') })));
    const second = await startDouble({}, noPatch);
    const before = structuredClone(deploymentOf(second, ns.sites, 'main'));
    const unpatched = await runDriver(second, { branch: 'main', dp: 'main', commit: commit() });
    expect(unpatched.code).toBe(EXIT.patch);
    expect(unpatched.stderr).toMatch(/site-main was not set to \S+; it runs what it ran\. the Kubernetes API refused to patch deployments site-main in geodata-sites \(403 Forbidden\): deployments\.apps "site-main" is forbidden/);
    expect(deploymentOf(second, ns.sites, 'main')).toEqual(before);
  });

  it('refuses bad arguments before any call, exit 2: a branch starting with a dash or one git refuses, a commit in capitals, a short one, none, a sixth argument', async () => {
    const id = commit();
    const cases: Parameters<typeof startDriver>[1][] = [
      { branch: '-main', dp: 'main', commit: id },
      { branch: 'main..x', dp: 'main', commit: id },
      { branch: 'main', dp: 'main', commit: id.toUpperCase() },
      { branch: 'main', dp: 'main', commit: id.slice(0, 7) },
      { branch: 'main', dp: 'main' },
      { branch: 'main', dp: 'main', commit: id, extra: ['--force'] },
    ];
    const double = await startDouble();
    const runs = await Promise.all(cases.map((c) => runDriver(double, c)));
    expect(runs.map((r) => r.code)).toEqual(cases.map(() => EXIT.usage));
    for (const run of runs) expect(run.stderr).toMatch(/usage: k8s-deploy <branch> <deployDir> <port> <repoUrl> <commit>/);
    expect(runs.map((r) => /error: ([^\n]+)/.exec(r.stderr)?.[1])).toEqual([
      'invalid branch name',
      'invalid branch name',
      'invalid commit: 40 or 64 lower-case hex digits',
      'invalid commit: 40 or 64 lower-case hex digits',
      'the commit is required: the site image is tagged with it',
      'expected 5 arguments',
    ]);
    expect(double.requests).toEqual([]);
  });

  it('the Roles bound to the webhook allow exactly what the driver does, and every call it made was allowed', () => {
    const rules = webhookRules();
    const allowed = new Set([...rules].flatMap(([namespace, list]) => list.flatMap((r) => r.resources.flatMap((resource) => r.verbs.map((verb) => `${namespace} ${resource} ${verb}`)))));
    const used = new Set(driverRequests.map((r) => `${r.namespace} ${r.resource} ${r.verb}`));
    expect(driverRequests.filter((r) => r.status === 401 || r.status === 403)).toEqual([]);
    expect([...used].sort()).toEqual([...allowed].sort());
  });

  it('a signed push goes through a real webhook process to the driver and the cluster: succeeded, the commit reported', async () => {
    const double = await startDouble();
    const adminToken = randomBytes(24).toString('hex');
    const server = await startWebhookProcess('k8s-deploy', {
      ...driverEnv(double),
      DEPLOY_SCRIPT: WRAPPER,
      DEPLOY_ISOLATION: 'none',
      WEBHOOK_ADMIN_TOKEN: adminToken,
      DEPLOY_ENV_PASS: 'APP_ROOT K8S_API_URL K8S_CA_FILE K8S_TOKEN_FILE K8S_BUILDS_NAMESPACE K8S_DEPLOY_POLL_MS',
    });
    try {
      const c = commit();
      const res = await sendGitlab(server.url, pushPayload('main', c), server.secrets.SECRET_MAIN!);
      expect(res.status).toBe(202);
      const id = String(res.json.deploymentId);
      let deployment: Json = {};
      await expect
        .poll(
          async () => {
            const answer = await fetch(`${server.url}/deployments/${id}`, { headers: { authorization: `Bearer ${adminToken}` } });
            deployment = (await answer.json()) as Json;
            return deployment.state;
          },
          { timeout: 30_000, interval: 100 },
        )
        .not.toMatch(/^(queued|running)$/);
      expect(deployment).toMatchObject({ state: 'succeeded', exitCode: 0, deployedCommit: c });
      expect(imageOf(deploymentOf(double, ns.sites, 'main'))).toBe(`${siteImage('main')}:${c}`);
      // The Job is named for the webhook's deployment.
      expect(jobsIn(double)[0]?.metadata.name).toBe(`build-main-${c.slice(0, 7)}-${id.replace(/-/g, '').slice(0, 8)}`);
    } finally {
      server.child.kill('SIGTERM');
      await new Promise((resolve) => server.child.once('exit', resolve));
    }
  }, 60_000);
});
