/**
 * The deploy queue as pure decisions over one lane: no files, no database, no processes, no clock of
 * its own. One lane per target: at most one deployment runs, at most one waits; a newer push replaces
 * the waiting one (collapse to the newest commit). The lane is what the journal holds (journal.ts:
 * the file journal in one process, or PostgreSQL shared by every replica); the Deployer
 * (deployer.ts) reads it with the target locked, gathers the facts a decision needs (delivery ids
 * seen, what is live, what was deployed before), decides here and writes what was decided before the
 * lock is let go. So the same decisions hold whichever journal, and whichever replica, takes them.
 *
 * Admission rules, in order (the first that applies wins):
 *   1. a delivery id seen before                       → duplicate `delivery`
 *   2. the commit is waiting                           → duplicate `queued`
 *   3. the commit is running (whether or not another   → duplicate `running`
 *      commit waits)
 *   4. a deployment runs or waits, and an earlier push → duplicate `superseded`, naming the
 *      of this commit was superseded by a newer one      deployment that runs next
 *   5. the lane is idle and the commit is live         → duplicate `live`
 *   6. the commit was deployed successfully before     → duplicate `deployed-before` (a replayed or
 *      (and is not live): deploying it again would       old push never rolls a target back)
 *      roll the target back
 *   7. otherwise                                       → queued; a waiting deployment is superseded
 *
 * Only a push of a commit the target has never seen (rule 7) can supersede a waiting deployment.
 * Rules 3 and 4 keep a replay — the same payload with a fresh delivery id, or a stale redelivery —
 * of a commit that is already running, or that a newer push has already replaced, from displacing
 * the newer commit that waits: the waiting commit is the newest push, and a replay is not newer.
 */
import type { Deployment } from './types.js';

export type DuplicateReason = 'delivery' | 'queued' | 'running' | 'superseded' | 'live' | 'deployed-before';

export type Admission =
  | { kind: 'duplicate'; reason: DuplicateReason; deploymentId: string | null }
  | { kind: 'queued'; deployment: Deployment; superseded: Deployment | null };

/** What the Deployer found out before asking; `live` only when the lane is idle (needsLiveCommit). */
export interface AdmissionFacts {
  seenDelivery?: string;
  live?: { commit: string | null };
  /** The newest successful deployment of this commit on this target. */
  deployedBefore?: Deployment;
  /** The most recently changed deployment of this commit on this target, in any state. */
  previous?: Deployment;
}

/** A target's lane as the journal holds it: the deployment in state `running` and the one `queued`. */
export interface Lane {
  running: Deployment | null;
  waiting: Deployment | null;
}

/** True when the live commit matters for a push to this lane (nothing runs or waits). */
export function needsLiveCommit(lane: Lane): boolean {
  return !lane.running && !lane.waiting;
}

/**
 * Decide a push. `create` makes the new deployment (only called when one is queued); a superseded
 * deployment comes back as a changed copy. Throws when the lane is idle and `facts.live` is
 * missing: the caller must look first.
 */
export function admit(lane: Lane, commit: string, facts: AdmissionFacts, create: () => Deployment): Admission {
  if (facts.seenDelivery) return { kind: 'duplicate', reason: 'delivery', deploymentId: facts.seenDelivery };
  if (lane.waiting?.commit === commit) return { kind: 'duplicate', reason: 'queued', deploymentId: lane.waiting.id };
  if (lane.running?.commit === commit) return { kind: 'duplicate', reason: 'running', deploymentId: lane.running.id };
  const next = lane.waiting ?? lane.running;
  if (next) {
    if (facts.previous?.state === 'superseded') return { kind: 'duplicate', reason: 'superseded', deploymentId: next.id };
  } else {
    if (!facts.live) throw new Error('the live commit is needed for an idle lane');
    if (facts.live.commit === commit) return { kind: 'duplicate', reason: 'live', deploymentId: facts.deployedBefore?.id ?? null };
  }
  if (facts.deployedBefore) {
    return { kind: 'duplicate', reason: 'deployed-before', deploymentId: facts.deployedBefore.id };
  }
  const deployment = create();
  const superseded = lane.waiting
    ? { ...lane.waiting, state: 'superseded' as const, supersededBy: deployment.id, finishedAt: deployment.queuedAt }
    : null;
  return { kind: 'queued', deployment, superseded };
}

/** Waiting → running, when nothing runs: the deployment to start (a copy in state `running`), or null. */
export function startNext(lane: Lane, now: Date): Deployment | null {
  if (lane.running || !lane.waiting) return null;
  return { ...lane.waiting, state: 'running', startedAt: now.toISOString() };
}
