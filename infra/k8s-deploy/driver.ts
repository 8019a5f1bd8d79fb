import { KubeApiError, type CallTarget, type Json, type KubeClient } from './api.js';
import { recordLive, type LiveRecord } from './live.js';
import { ANNOTATIONS, BUILD_STEPS, buildTemplateName, EXIT, exitOfStep } from './protocol.js';
import { instantiate, readTemplate, TemplateError, type JobTemplate, type Site } from './template.js';

/**
 * One deploy on the Kubernetes target (the webhook's DEPLOY_SCRIPT there, see main.ts):
 *
 *   1. read the target's Job template and its site's place (ConfigMap build-<dp>, builds namespace);
 *   2. read the site Deployment: its image says which commit runs (`<image>:<commit>`); the commit
 *      that already runs is not built again (exit 0, like deploy-branch.sh);
 *   3. create the deploy's Job from the template (the commit, the branch and the live commit filled
 *      in) and wait for it, copying each step's log as it runs, up to the Job's own deadline
 *      (activeDeadlineSeconds) and BUILD_SLACK_MS more for scheduling; a failed step decides the exit
 *      code (protocol.ts exitOfStep); the Deployment is not touched;
 *   4. set the Deployment's image to `<image>:<commit>` and its replicas to its annotation's, with a
 *      JSON patch that first tests the image it read (a change meanwhile fails the patch, exit 7);
 *   5. wait until the rollout is complete (observedGeneration, updated, available and no old
 *      replicas), up to the rollout deadline; if it is not, patch the previous image and replicas
 *      back (Kubernetes rolls the previous ReplicaSet up again) and exit 8.
 *
 * Stopped (SIGTERM/SIGINT, the webhook's deadline or shutdown): the Job is deleted, a Deployment set
 * but not yet confirmed gets its previous image back, exit 143/130.
 * What runs is recorded for the webhook in the deploy directory (live.ts) whenever it is known.
 */

export interface DriverSettings {
  buildsNamespace: string;
  deployPath: string;
  deployDir: string;
  branch: string;
  commit: string;
  deploymentId: string;
  /** A 14-digit UTC stamp: this deploy's release name. */
  release: string;
  rolloutTimeoutMs: number;
  pollMs: number;
  /** Bytes of build log copied in all, over every step. */
  logMaxBytes: number;
}

export interface Output {
  log(message: string): void;
  fail(message: string): void;
  /** A build step's log, as it comes. */
  raw(chunk: Buffer): void;
  /** The last line: `release=<release> commit=<commit>`. */
  result(line: string): void;
}

/** Scheduling and image pulls beyond the Job's own deadline, before the driver gives up on it. */
const BUILD_SLACK_MS = 60_000;
/** How long the log streams may go on once the Job has finished. */
const LOG_GRACE_MS = 10_000;

class DeployFailure extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

class Stopped extends Error {}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(new Stopped());
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(new Stopped());
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });

const jsonPointer = (key: string) => key.replaceAll('~', '~0').replaceAll('/', '~1');
const COMMIT = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
const RELEASE = /^\d{14}$/;

interface SiteState {
  site: Site;
  /** Index of the site container in the pod template. */
  index: number;
  image: string;
  replicas: number;
  /** The replicas a deploy sets (the Deployment's annotation). */
  desiredReplicas: number;
  release: string | null;
  liveCommit: string | null;
  hasAnnotations: boolean;
}

interface Patched {
  state: SiteState;
  image: string;
}

type ContainerStatus = { name: string; state?: { running?: Json; terminated?: { exitCode?: number; reason?: string; message?: string }; waiting?: { reason?: string } } };
type Pod = { metadata: { name: string }; status?: { phase?: string; initContainerStatuses?: ContainerStatus[]; containerStatuses?: ContainerStatus[] } };

const statusesOf = (pod: Pod) => [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])];
const conditionTrue = (object: Json, type: string) =>
  ((object.status as { conditions?: { type: string; status: string; reason?: string; message?: string }[] } | undefined)?.conditions ?? []).find((c) => c.type === type && c.status === 'True');

export async function runDeploy(settings: DriverSettings, api: KubeClient, out: Output, stop: AbortSignal): Promise<number> {
  return new Deploy(settings, api, out, stop).run();
}

class Deploy {
  private job: { name: string; namespace: string; finished: boolean } | null = null;
  private patched: Patched | null = null;
  private readonly timings: string[] = [];
  private stepStarted = Date.now();

  constructor(
    private readonly s: DriverSettings,
    private readonly api: KubeClient,
    private readonly out: Output,
    private readonly stop: AbortSignal,
  ) {}

  private step(name: string) {
    const now = Date.now();
    this.timings.push(`${name}=${now - this.stepStarted}ms`);
    this.stepStarted = now;
  }

  private call(call: CallTarget, path: string, options: { query?: Record<string, string>; body?: unknown; contentType?: string } = {}) {
    return this.api.call(call, path, { ...options, signal: this.stop });
  }

  async run(): Promise<number> {
    const { s, out } = this;
    try {
      out.log(`deploying ${s.branch} at ${s.commit} to target ${s.deployPath} (Kubernetes, release ${s.release})`);
      const { template, site } = await this.readTemplate();
      this.step('template');
      const state = await this.readSite(site);
      this.step('site');
      if (state.liveCommit === s.commit) {
        const release = state.release ?? s.release;
        this.record({ release, commit: s.commit });
        out.log(`commit ${s.commit} already runs as ${state.image}; nothing deployed`);
        out.result(`release=${release} commit=${s.commit}`);
        return EXIT.deployed;
      }
      await this.build(template, state);
      this.step('build');
      const generation = await this.setImage(state);
      this.step('patch');
      const rollout = await this.awaitRollout(state.site, generation);
      if (!rollout.ok) {
        out.fail(`${state.site.deployment} did not become available within ${s.rolloutTimeoutMs / 1000} s (${rollout.detail}); restoring ${state.image}`);
        await this.restore(true);
        return EXIT.rollout;
      }
      this.patched = null;
      this.step('rollout');
      this.record({ release: s.release, commit: s.commit });
      out.log(`timings: ${this.timings.join(' ')}`);
      out.log(`deployed ${s.commit} as ${rollout.image} (${state.site.namespace}/${state.site.deployment}, ${state.desiredReplicas} replicas)`);
      out.result(`release=${s.release} commit=${s.commit}`);
      return EXIT.deployed;
    } catch (error) {
      if (this.stop.aborted || error instanceof Stopped) return this.stopped();
      const code = error instanceof DeployFailure ? error.code : error instanceof TemplateError ? EXIT.usage : EXIT.error;
      out.fail((error as Error).message);
      await this.cleanUp();
      return code;
    }
  }

  private async readTemplate(): Promise<{ template: JobTemplate; site: Site }> {
    const name = buildTemplateName(this.s.deployPath);
    const ns = this.s.buildsNamespace;
    const configMap = await this.call({ verb: 'get', resource: 'configmaps', namespace: ns, name }, `/api/v1/namespaces/${ns}/configmaps/${name}`);
    const read = readTemplate(configMap);
    if (read.template.namespace !== ns) throw new TemplateError(`its Job is for namespace ${read.template.namespace}, the builds namespace is ${ns}`);
    for (const step of Object.values(BUILD_STEPS)) {
      if (!read.template.steps.includes(step)) throw new TemplateError(`no ${step} step (the pod has ${read.template.steps.join(', ')})`);
    }
    return read;
  }

  private deploymentPath(site: Site) {
    return `/apis/apps/v1/namespaces/${site.namespace}/deployments/${site.deployment}`;
  }

  private async readSite(site: Site): Promise<SiteState> {
    const deployment = await this.call({ verb: 'get', resource: 'deployments', namespace: site.namespace, name: site.deployment }, this.deploymentPath(site));
    const spec = deployment.spec as { replicas?: number; template?: { spec?: { containers?: { name: string; image?: string }[] } } } | undefined;
    const containers = spec?.template?.spec?.containers ?? [];
    const index = containers.findIndex((c) => c.name === site.container);
    if (index < 0) throw new TemplateError(`${site.deployment} has no container ${site.container}`);
    const annotations = (deployment.metadata as { annotations?: Record<string, string> } | undefined)?.annotations;
    const desired = Number(annotations?.[ANNOTATIONS.replicas]);
    if (!Number.isInteger(desired) || desired < 1 || desired > 100) {
      throw new TemplateError(`${site.deployment} has no replica count in its annotation ${ANNOTATIONS.replicas}`);
    }
    const image = containers[index]?.image ?? '';
    const tag = image.startsWith(`${site.image}:`) ? image.slice(site.image.length + 1) : '';
    const release = annotations?.[ANNOTATIONS.release];
    return {
      site,
      index,
      image,
      replicas: spec?.replicas ?? 0,
      desiredReplicas: desired,
      release: release && RELEASE.test(release) ? release : null,
      liveCommit: COMMIT.test(tag) ? tag : null,
      hasAnnotations: annotations !== undefined,
    };
  }

  /** Create the Job, copy its steps' logs, and wait until it succeeded (or throw the failed step's exit). */
  private async build(template: JobTemplate, state: SiteState): Promise<void> {
    const { s, out } = this;
    const ns = template.namespace;
    const job = instantiate(template, { branch: s.branch, commit: s.commit, liveCommit: state.liveCommit, deploymentId: s.deploymentId, release: s.release });
    const name = String((job.metadata as Json).name);
    await this.call({ verb: 'create', resource: 'jobs', namespace: ns }, `/apis/batch/v1/namespaces/${ns}/jobs`, { body: job, query: { fieldValidation: 'Strict' } });
    this.job = { name, namespace: ns, finished: false };
    out.log(`build Job ${name} created in ${ns}${state.liveCommit ? ` (the site runs ${state.liveCommit})` : ''}`);

    const logs = new LogCopier(this.api, ns, template.steps, out, s.logMaxBytes, s.pollMs);
    const deadline = Date.now() + template.activeDeadlineSeconds * 1000 + BUILD_SLACK_MS;
    let pods: Pod[] = [];
    let running: string | undefined;
    let finished: 'Complete' | 'Failed' | undefined;
    let failure: { reason?: string; message?: string } | undefined;
    try {
      for (;;) {
        const current = await this.call({ verb: 'get', resource: 'jobs', namespace: ns, name }, `/apis/batch/v1/namespaces/${ns}/jobs/${name}`);
        const list = await this.call({ verb: 'list', resource: 'pods', namespace: ns }, `/api/v1/namespaces/${ns}/pods`, { query: { labelSelector: `batch.kubernetes.io/job-name=${name}` } });
        pods = ((list.items as Pod[] | undefined) ?? []).slice(0, 10);
        for (const pod of pods) {
          const active = statusesOf(pod).find((c) => c.state?.running);
          if (active) running = active.name;
        }
        const complete = conditionTrue(current, 'Complete');
        const failed = conditionTrue(current, 'Failed');
        finished = complete ? 'Complete' : failed ? 'Failed' : undefined;
        failure = failed;
        logs.update(pods, finished !== undefined);
        if (finished) break;
        if (Date.now() > deadline) {
          throw new DeployFailure(exitOfStep(running ?? BUILD_STEPS.build, undefined), `the build Job ${name} did not finish within ${template.activeDeadlineSeconds} s and ${BUILD_SLACK_MS / 1000} s to start; it is deleted`);
        }
        await sleep(s.pollMs, this.stop);
      }
      this.job.finished = true;
    } finally {
      await logs.finish(this.stop.aborted ? 0 : LOG_GRACE_MS);
    }

    if (finished === 'Complete') {
      out.log(`build Job ${name} succeeded: ${state.site.image}:${s.commit} published`);
      return;
    }
    for (const pod of pods) {
      for (const step of template.steps) {
        const terminated = statusesOf(pod).find((c) => c.name === step)?.state?.terminated;
        if (terminated && terminated.exitCode !== 0) {
          const code = exitOfStep(step, terminated.exitCode);
          throw new DeployFailure(code, `the ${step} step of build Job ${name} failed (exit ${String(terminated.exitCode)}${terminated.reason ? `, ${terminated.reason}` : ''})${code === EXIT.refused ? ': the commit is not on the branch, or older than the one the site runs' : ''}`);
        }
      }
    }
    // The Job's deadline: its pods are gone with whatever ran; the step last seen running failed.
    const step = running ?? BUILD_STEPS.build;
    throw new DeployFailure(exitOfStep(step, undefined), `build Job ${name} failed in its ${step} step (${failure?.reason ?? 'no reason given'}${failure?.message ? `: ${failure.message}` : ''})`);
  }

  /** The new image and the replicas; resolves with the Deployment's generation that carries them. */
  private async setImage(state: SiteState): Promise<number> {
    const image = `${state.site.image}:${this.s.commit}`;
    const containerPath = `/spec/template/spec/containers/${state.index}`;
    const release = `/metadata/annotations/${jsonPointer(ANNOTATIONS.release)}`;
    const ops = [
      { op: 'test', path: `${containerPath}/name`, value: state.site.container },
      { op: 'test', path: `${containerPath}/image`, value: state.image },
      { op: 'replace', path: `${containerPath}/image`, value: image },
      { op: 'replace', path: '/spec/replicas', value: state.desiredReplicas },
      state.hasAnnotations ? { op: 'add', path: release, value: this.s.release } : { op: 'add', path: '/metadata/annotations', value: { [ANNOTATIONS.release]: this.s.release } },
    ];
    let answer: Json;
    try {
      answer = await this.patch(state.site, ops);
    } catch (error) {
      if (this.stop.aborted) throw error;
      throw new DeployFailure(EXIT.patch, `${state.site.deployment} was not set to ${image}; it runs what it ran. ${(error as Error).message}`);
    }
    this.patched = { state, image };
    this.out.log(`${state.site.namespace}/${state.site.deployment}: image ${image}, ${state.desiredReplicas} replicas (was ${state.image}, ${state.replicas})`);
    return Number((answer.metadata as { generation?: number } | undefined)?.generation ?? 0);
  }

  private patch(site: Site, ops: unknown[], signal?: AbortSignal) {
    const target: CallTarget = { verb: 'patch', resource: 'deployments', namespace: site.namespace, name: site.deployment };
    return this.api.call(target, this.deploymentPath(site), {
      body: ops,
      contentType: 'application/json-patch+json',
      query: { fieldManager: 'geodata-k8s-deploy', fieldValidation: 'Strict' },
      signal: signal ?? this.stop,
    });
  }

  /** Until the rollout of `generation` is complete, or the deadline. */
  private async awaitRollout(site: Site, generation: number, timeoutMs = this.s.rolloutTimeoutMs, signal = this.stop): Promise<{ ok: true; image: string } | { ok: false; detail: string }> {
    const deadline = Date.now() + timeoutMs;
    let detail = 'not observed yet';
    for (;;) {
      const d = await this.api.call({ verb: 'get', resource: 'deployments', namespace: site.namespace, name: site.deployment }, this.deploymentPath(site), { signal });
      const spec = d.spec as { replicas?: number; template?: { spec?: { containers?: { name: string; image?: string }[] } } };
      const status = (d.status ?? {}) as { observedGeneration?: number; replicas?: number; updatedReplicas?: number; availableReplicas?: number };
      const want = spec.replicas ?? 1;
      const observed = (status.observedGeneration ?? 0) >= generation;
      const updated = status.updatedReplicas ?? 0;
      const available = status.availableReplicas ?? 0;
      const total = status.replicas ?? 0;
      detail = observed ? `updated ${updated}/${want}, available ${available}/${want}, ${Math.max(0, total - updated)} old` : `generation ${generation} not observed yet`;
      if (observed && updated === want && total === updated && available >= want) {
        return { ok: true, image: spec.template?.spec?.containers?.find((c) => c.name === site.container)?.image ?? '' };
      }
      const progressing = ((d.status as { conditions?: { type: string; status: string; reason?: string }[] } | undefined)?.conditions ?? []).find((c) => c.type === 'Progressing');
      if (observed && progressing?.status === 'False' && progressing.reason === 'ProgressDeadlineExceeded') return { ok: false, detail: `${detail}, ProgressDeadlineExceeded` };
      if (Date.now() > deadline) return { ok: false, detail };
      await sleep(this.s.pollMs, signal);
    }
  }

  /**
   * The previous image and replicas back, if this deploy set others (the patch tests that the image is
   * still ours, so a later change is never undone); then, when `wait`, its rollout too.
   */
  private async restore(wait: boolean): Promise<void> {
    const patched = this.patched;
    if (!patched) return;
    this.patched = null;
    const { state } = patched;
    const containerPath = `/spec/template/spec/containers/${state.index}`;
    const release = `/metadata/annotations/${jsonPointer(ANNOTATIONS.release)}`;
    const ops = [
      { op: 'test', path: `${containerPath}/image`, value: patched.image },
      { op: 'replace', path: `${containerPath}/image`, value: state.image },
      { op: 'replace', path: '/spec/replicas', value: state.replicas },
      state.release ? { op: 'replace', path: release, value: state.release } : { op: 'remove', path: release },
    ];
    // Its own time limits: the deploy may be stopping, and the restore must still happen.
    const signal = AbortSignal.timeout(wait ? this.s.rolloutTimeoutMs + 30_000 : 8_000);
    try {
      const answer = await this.patch(state.site, ops, signal);
      this.out.log(`${state.site.deployment}: previous image ${state.image} and ${state.replicas} replicas restored`);
      this.record(state.liveCommit ? { release: state.release ?? this.s.release, commit: state.liveCommit } : null);
      if (!wait) return;
      const generation = Number((answer.metadata as { generation?: number } | undefined)?.generation ?? 0);
      const back = await this.awaitRollout(state.site, generation, this.s.rolloutTimeoutMs, signal);
      if (back.ok) this.out.log(`${state.site.deployment} runs ${state.image} again`);
      else this.out.fail(`${state.site.deployment} has not become available on ${state.image} either (${back.detail}); see \`kubectl -n ${state.site.namespace} rollout status deployment/${state.site.deployment}\``);
    } catch (error) {
      this.out.fail(`restoring ${state.image} on ${state.site.deployment} failed: ${(error as Error).message}`);
    }
  }

  /** A build still running is deleted (its pods with it). */
  private async deleteJob(): Promise<void> {
    const job = this.job;
    if (!job || job.finished) return;
    job.finished = true;
    try {
      await this.api.call({ verb: 'delete', resource: 'jobs', namespace: job.namespace, name: job.name }, `/apis/batch/v1/namespaces/${job.namespace}/jobs/${job.name}`, {
        query: { propagationPolicy: 'Background' },
        signal: AbortSignal.timeout(8_000),
      });
      this.out.log(`build Job ${job.name} deleted`);
    } catch (error) {
      this.out.fail(`deleting build Job ${job.name} failed (its deadline ends it): ${(error as Error).message}`);
    }
  }

  private async cleanUp(): Promise<void> {
    await this.deleteJob();
    await this.restore(false);
  }

  private async stopped(): Promise<number> {
    const code = this.stop.reason === 'SIGINT' ? EXIT.interrupted : EXIT.terminated;
    this.out.fail(`stopped (${String(this.stop.reason)}); the previous image stays`);
    await this.cleanUp();
    return code;
  }

  private record(live: LiveRecord | null): void {
    try {
      recordLive(this.s.deployDir, live);
    } catch (error) {
      this.out.fail(`could not record what runs in ${this.s.deployDir}: ${(error as Error).message}`);
    }
  }
}

/**
 * The build pod's logs, step by step in the order the steps run: a step's log is followed from when
 * it starts until it ends, so the deploy log grows while the build runs. At most `budget` bytes in
 * all; a step that never started (an earlier one failed) is skipped.
 */
class LogCopier {
  private readonly pods = new Map<string, { statuses: Map<string, ContainerStatus>; done: boolean; follower: Promise<void> }>();
  private readonly abort = new AbortController();
  private left: number;

  constructor(
    private readonly api: KubeClient,
    private readonly namespace: string,
    private readonly steps: string[],
    private readonly out: Output,
    budget: number,
    private readonly pollMs: number,
  ) {
    this.left = budget;
  }

  update(pods: Pod[], jobFinished: boolean): void {
    for (const pod of pods) {
      const name = pod.metadata.name;
      const statuses = new Map(statusesOf(pod).map((c) => [c.name, c]));
      const done = jobFinished || pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed';
      const known = this.pods.get(name);
      if (known) {
        known.statuses = statuses;
        known.done = done;
      } else {
        const entry = { statuses, done, follower: Promise.resolve() };
        this.pods.set(name, entry);
        entry.follower = this.follow(name, entry);
      }
    }
    if (jobFinished) for (const entry of this.pods.values()) entry.done = true;
  }

  private async follow(pod: string, entry: { statuses: Map<string, ContainerStatus>; done: boolean }): Promise<void> {
    for (const step of this.steps) {
      // Wait until the step has started, or the pod is done without it.
      for (;;) {
        const state = entry.statuses.get(step)?.state;
        if (state?.running || state?.terminated) break;
        if (entry.done || this.abort.signal.aborted) return;
        await sleep(this.pollMs, this.abort.signal).catch(() => undefined);
      }
      if (this.left <= 0 || this.abort.signal.aborted) return;
      this.out.log(`--- ${step} (pod ${pod}) ---`);
      try {
        const written = await this.api.followLog(this.namespace, pod, step, this.left, (chunk) => this.out.raw(chunk), this.abort.signal);
        this.left -= written;
        if (this.left <= 0) this.out.log('--- build log cut here: the deploy log keeps at most K8S_DEPLOY_LOG_MAX_BYTES of it ---');
      } catch (error) {
        if (this.abort.signal.aborted) return;
        // A log that cannot be read (the pod deleted at the Job's deadline) says so and the deploy goes on.
        this.out.log(`--- the ${step} log could not be read: ${error instanceof KubeApiError ? error.serverMessage : (error as Error).message} ---`);
      }
    }
  }

  /** Let the streams end on their own for up to `graceMs`, then cut them. */
  async finish(graceMs: number): Promise<void> {
    const all = Promise.all([...this.pods.values()].map((p) => p.follower));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([all, new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)))]);
    clearTimeout(timer);
    this.abort.abort();
    await all;
  }
}
