/**
 * One lane per target: at most one deploy runs, at most one waits. A push arriving while a deploy
 * runs replaces the waiting one (collapse to the newest commit). A push is not deployed again when
 * its delivery id was seen before, or its commit is already live, running or waiting.
 */
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Target } from '../../../shared/targets.js';
import type { Provider } from '../providers.js';
import { startDeploy, type DeployOutcome, type ProcessLauncher, type RunningDeploy } from './runner.js';
import type { DeploymentStore } from './store.js';
import type { Deployment, DeploymentState } from './types.js';

export interface Push {
  target: Target;
  branch: string;
  commit: string;
  provider: Provider;
  deliveryId: string | null;
}

export type SubmitResult =
  | { kind: 'queued'; deployment: Deployment }
  | { kind: 'duplicate'; reason: 'delivery' | 'live' | 'running' | 'queued'; deploymentId: string | null };

export interface DeployQueueOptions {
  store: DeploymentStore;
  logger: Logger;
  deployScript: string;
  deployTimeoutMs: number;
  /** DEPLOY_ROOT + deployPath. */
  deployDirOf: (target: Target) => string;
  serviceNameOf: (target: Target) => string;
  /** Environment for the script, already stripped of secrets. */
  scriptEnv: NodeJS.ProcessEnv;
  targets: readonly Target[];
  killGraceMs?: number;
  /** Starts the deploy processes (a DeployLauncher: a small helper process, see launcher.ts). */
  launcher: ProcessLauncher;
}

interface Lane {
  running: { deployment: Deployment; process: RunningDeploy | null; done: Promise<void> } | null;
  waiting: Deployment | null;
}

export class DeployQueue {
  private readonly lanes = new Map<string, Lane>();
  private readonly targetsByKey: Map<string, Target>;
  private stopping = false;

  constructor(private readonly options: DeployQueueOptions) {
    this.targetsByKey = new Map(options.targets.map((t) => [t.key, t]));
  }

  private lane(key: string): Lane {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { running: null, waiting: null };
      this.lanes.set(key, lane);
    }
    return lane;
  }

  /** Accept a push; the deploy itself starts after the caller has answered (next tick). */
  async submit(push: Push): Promise<SubmitResult> {
    const { store } = this.options;
    const commit = push.commit.toLowerCase();
    const lane = this.lane(push.target.key);
    // The live commit only matters when the lane is idle, so it is read (from disk: a manual
    // deploy or rollback may have changed it) only then. Each pass of the checks below runs
    // without awaiting, so two concurrent pushes of one commit or one delivery id cannot both
    // pass; when the read had to wait, the checks run again on what is true after it.
    let liveCommit: string | null | undefined;
    let duplicate: Extract<SubmitResult, { kind: 'duplicate' }> | null;
    for (;;) {
      duplicate = null;
      const seenDelivery = push.deliveryId ? store.deploymentOfDelivery(push.deliveryId) : undefined;
      if (seenDelivery) return { kind: 'duplicate', reason: 'delivery', deploymentId: seenDelivery };
      // Only the last word counts: a commit that is live but about to be replaced by a waiting or
      // running deploy of another commit is queued again, so the newest push still wins.
      if (lane.waiting) {
        if (lane.waiting.commit === commit) duplicate = { kind: 'duplicate', reason: 'queued', deploymentId: lane.waiting.id };
      } else if (lane.running) {
        if (lane.running.deployment.commit === commit) duplicate = { kind: 'duplicate', reason: 'running', deploymentId: lane.running.deployment.id };
      } else {
        if (liveCommit === undefined) {
          liveCommit = await this.liveCommit(push.target);
          continue; // the lane may have changed while reading
        }
        if (liveCommit === commit) {
          const lastGood = store.list({ target: push.target.key, limit: 500 }).find((d) => d.state === 'succeeded' && d.deployedCommit === commit);
          duplicate = { kind: 'duplicate', reason: 'live', deploymentId: lastGood?.id ?? null };
        }
      }
      break;
    }
    if (duplicate) {
      if (push.deliveryId && duplicate.deploymentId) await store.recordDelivery(push.deliveryId, duplicate.deploymentId);
      return duplicate;
    }

    const deployment: Deployment = {
      id: randomUUID(),
      target: push.target.key,
      branch: push.branch,
      commit,
      deployedCommit: null,
      release: null,
      provider: push.provider,
      deliveryId: push.deliveryId,
      state: 'queued',
      queuedAt: new Date().toISOString(),
      startedAt: null,
      finishedAt: null,
      durationMs: null,
      exitCode: null,
      logPath: null,
      supersededBy: null,
    };
    const writes: Promise<void>[] = [];
    if (lane.waiting) {
      lane.waiting.state = 'superseded';
      lane.waiting.supersededBy = deployment.id;
      lane.waiting.finishedAt = deployment.queuedAt;
      writes.push(store.save(lane.waiting));
      this.options.logger.info({ deploymentId: lane.waiting.id, supersededBy: deployment.id, target: push.target.key }, 'waiting deploy superseded');
    }
    lane.waiting = deployment;
    writes.push(store.save(deployment));
    if (push.deliveryId) writes.push(store.recordDelivery(push.deliveryId, deployment.id));
    // Persisted before the 202: a redelivery after a crash is still recognised.
    await Promise.all(writes);
    setImmediate(() => this.drain(push.target.key));
    return { kind: 'queued', deployment };
  }

  /** The commit in <deployDir>/live/REVISION, lower-case, or null when nothing is live. */
  async liveCommit(target: Target): Promise<string | null> {
    try {
      return (await readFile(join(this.options.deployDirOf(target), 'live', 'REVISION'), 'utf8')).trim().toLowerCase() || null;
    } catch {
      return null;
    }
  }

  private drain(key: string): void {
    const lane = this.lane(key);
    if (this.stopping || lane.running || !lane.waiting) return;
    const target = this.targetsByKey.get(key);
    const deployment = lane.waiting;
    lane.waiting = null;
    if (!target) return;
    const running: NonNullable<Lane['running']> = { deployment, process: null, done: Promise.resolve() };
    lane.running = running;
    running.done = this.run(target, deployment, running)
      .catch(async (error: unknown) => {
        this.options.logger.error({ err: error, deploymentId: deployment.id }, 'deploy failed to run');
        // Never leave a record "running" forever: whatever broke, this deploy is over.
        deployment.state = 'failed';
        deployment.finishedAt = new Date().toISOString();
        await this.options.store.save(deployment).catch(() => undefined);
      })
      .finally(() => {
        lane.running = null;
        this.drain(key);
      });
  }

  private async run(target: Target, deployment: Deployment, running: NonNullable<Lane['running']>): Promise<void> {
    const { store, logger } = this.options;
    const deployDir = this.options.deployDirOf(target);
    const startedAt = Date.now();
    deployment.state = 'running';
    deployment.startedAt = new Date(startedAt).toISOString();
    deployment.logPath = join(deployDir, 'logs', `deploy-${deployment.id}.log`);
    await store.save(deployment);
    logger.info({ deploymentId: deployment.id, target: target.key, branch: deployment.branch, commit: deployment.commit }, 'deploy started');

    const child = startDeploy({
      script: this.options.deployScript,
      args: [deployment.branch, deployDir, String(target.port), target.repo],
      env: { ...this.options.scriptEnv, SERVICE_NAME: this.options.serviceNameOf(target) },
      logPath: deployment.logPath,
      timeoutMs: this.options.deployTimeoutMs,
      killGraceMs: this.options.killGraceMs,
    }, this.options.launcher);
    running.process = child;
    const outcome = await child.outcome;

    deployment.state = stateOf(outcome);
    deployment.exitCode = outcome.exitCode;
    deployment.finishedAt = new Date().toISOString();
    deployment.durationMs = Date.now() - startedAt;
    if (deployment.state === 'succeeded') {
      deployment.deployedCommit = await this.liveCommit(target);
      deployment.release = await this.liveRelease(deployDir);
    }
    await store.save(deployment);
    const log = { deploymentId: deployment.id, target: target.key, state: deployment.state, exitCode: outcome.exitCode, durationMs: deployment.durationMs, logPath: deployment.logPath };
    if (deployment.state === 'succeeded') logger.info(log, 'deploy succeeded');
    else logger.error({ ...log, signal: outcome.signal, spawnError: outcome.spawnError }, 'deploy did not succeed');
  }

  private async liveRelease(deployDir: string): Promise<string | null> {
    const { readlink } = await import('node:fs/promises');
    try {
      return (await readlink(join(deployDir, 'live'))).split('/').pop() ?? null;
    } catch {
      return null;
    }
  }

  /**
   * After a restart: deployments the previous process left running are recorded as interrupted;
   * the newest waiting one per target is started again, older ones are superseded.
   */
  async resume(): Promise<void> {
    const { store, logger } = this.options;
    const waitingByTarget = new Map<string, Deployment>();
    for (const deployment of store.all()) {
      if (deployment.state === 'running') {
        await store.save({ ...deployment, state: 'interrupted', finishedAt: deployment.finishedAt ?? new Date().toISOString() });
        logger.warn({ deploymentId: deployment.id, target: deployment.target }, 'deploy was interrupted by a restart');
      } else if (deployment.state === 'queued') {
        const older = waitingByTarget.get(deployment.target);
        if (older) await store.save({ ...older, state: 'superseded', supersededBy: deployment.id, finishedAt: new Date().toISOString() });
        waitingByTarget.set(deployment.target, deployment);
      }
    }
    for (const [key, deployment] of waitingByTarget) {
      if (!this.targetsByKey.has(key)) {
        await store.save({ ...deployment, state: 'interrupted', finishedAt: new Date().toISOString() });
        continue;
      }
      this.lane(key).waiting = { ...deployment };
      setImmediate(() => this.drain(key));
    }
  }

  /**
   * Stop taking work; give running deploys `graceMs` to finish, then stop them (recorded as
   * interrupted). Waiting deploys stay queued in the store and are resumed by the next start.
   */
  async shutdown(graceMs: number): Promise<void> {
    this.stopping = true;
    const running = [...this.lanes.values()].flatMap((lane) => (lane.running ? [lane.running] : []));
    if (running.length === 0) return;
    this.options.logger.info({ running: running.length, graceMs }, 'waiting for running deploys before shutdown');
    const allDone = Promise.all(running.map((r) => r.done));
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<'expired'>((resolve) => (timer = setTimeout(() => resolve('expired'), graceMs)));
    if ((await Promise.race([allDone, expired])) === 'expired') {
      for (const r of running) r.process?.stop('shutdown');
      await allDone;
    }
    clearTimeout(timer);
  }

  /** Deploys running or waiting right now (for tests and the shutdown log). */
  activity(): { running: string[]; waiting: string[] } {
    const lanes = [...this.lanes.values()];
    return {
      running: lanes.flatMap((l) => (l.running ? [l.running.deployment.id] : [])),
      waiting: lanes.flatMap((l) => (l.waiting ? [l.waiting.id] : [])),
    };
  }
}

function stateOf(outcome: DeployOutcome): DeploymentState {
  if (outcome.stoppedBecause === 'timeout') return 'timed-out';
  if (outcome.stoppedBecause === 'shutdown') return 'interrupted';
  return outcome.exitCode === 0 ? 'succeeded' : 'failed';
}
