/**
 * Glossary
 * - push: one authenticated push event for a branch that matches a target.
 * - deployment: one requested run of the deploy script for a target, created from a push.
 * - lane: a target's queue — at most one running deployment and one waiting (the newest push);
 *   a newer push replaces the waiting one, which becomes `superseded`.
 * - delivery id: the provider's id of one webhook delivery, kept on redelivery; a seen id is never
 *   deployed again.
 * - live commit: the commit in `<deployDir>/live/REVISION`, written by the deploy script as root
 *   after sealing; the launcher reports it only when it is a commit id (commitIdOrNull).
 * - refused: the deploy script would not deploy the commit (exit 9): it is not on the branch, or it
 *   is older than the live commit. Pushes never roll a target back; `npm run host -- rollback` does.
 */
import type { Provider } from '../providers.js';

export type DeploymentState =
  | 'queued'
  | 'running'
  | 'succeeded'
  | 'failed'
  | 'refused'
  | 'timed-out'
  | 'interrupted'
  | 'superseded';

// What a target's directory says is never more than a commit id and a release name (services/shared/revision-file.mjs).
export { COMMIT_ID, RELEASE_NAME, commitIdOrNull, releaseNameOrNull } from '../../../shared/revision-file.mjs';

export const FINAL_STATES: ReadonlySet<DeploymentState> = new Set(['succeeded', 'failed', 'refused', 'timed-out', 'interrupted', 'superseded']);

export interface Deployment {
  id: string;
  /** Target key (main, feature/team-de1). */
  target: string;
  branch: string;
  /** The commit the push announced (`after`): exactly this commit is deployed. */
  commit: string;
  /** The commit live after the deploy succeeded (the pushed one); only ever a commit id. */
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
