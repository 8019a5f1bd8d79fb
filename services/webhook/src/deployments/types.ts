/**
 * Glossary
 * - push: one authenticated push event for a branch that matches a target.
 * - deployment: one requested run of the deploy script for a target, created from a push.
 * - lane: a target's queue — at most one running deployment and one waiting (the newest push);
 *   a newer push replaces the waiting one, which becomes `superseded`.
 * - delivery id: the provider's id of one webhook delivery, kept on redelivery; a seen id is never
 *   deployed again.
 * - live commit: the commit in `<deployDir>/live/REVISION`, written by the deploy script.
 */
import type { Provider } from '../providers.js';

export type DeploymentState =
  | 'queued'
  | 'running'
  | 'succeeded'
  | 'failed'
  | 'timed-out'
  | 'interrupted'
  | 'superseded';

export const FINAL_STATES: ReadonlySet<DeploymentState> = new Set(['succeeded', 'failed', 'timed-out', 'interrupted', 'superseded']);

export interface Deployment {
  id: string;
  /** Target key (main, feature/team-de1). */
  target: string;
  branch: string;
  /** The commit the push announced (`after`). */
  commit: string;
  /** The commit the deploy script actually put live (the branch head when it cloned). */
  deployedCommit: string | null;
  /** The release directory name (14-digit timestamp) the script created. */
  release: string | null;
  provider: Provider;
  deliveryId: string | null;
  state: DeploymentState;
  queuedAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  durationMs: number | null;
  exitCode: number | null;
  /** The log of this deployment's script run (stdout and stderr). */
  logPath: string | null;
  supersededBy: string | null;
}
