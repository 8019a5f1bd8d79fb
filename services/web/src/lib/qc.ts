import type { Feature } from './types.js';

/** The QC API's answers as the desk reads them (docs/qc.md). */
export interface QcClaim {
  featureId: string;
  holder: string;
  holderName: string | null;
  claimedAt: string;
  expiresAt: string;
}

export interface QueueItem {
  featureId: string;
  version: number;
  name: string;
  kategorie: string;
  submitter: string;
  submitterName: string | null;
  submittedAt: string;
  comment: string | null;
  claim: QcClaim | null;
}

export interface ReviewCheck {
  code: string;
  message: string;
  details?: Record<string, unknown>;
}

export interface ReviewItem {
  featureId: string;
  status: string;
  version: number;
  feature: Feature;
  submission: { actor: string; actorName: string | null; comment: string | null; at: string; version: number } | null;
  claim: QcClaim | null;
  lastApproved: { version: number; at: string; actor: string; actorName: string | null; feature: Feature } | null;
  diff: Array<{ field: string; before: unknown; after: unknown }>;
  geometryChanged: boolean;
  checks: ReviewCheck[];
}

export interface QcTransition {
  id: number;
  action: string;
  fromStatus: string | null;
  toStatus: string;
  version: number;
  actor: string;
  actorName: string | null;
  comment: string | null;
  at: string;
}

export interface QcJob {
  id: number;
  task: string;
  status: string;
  reason: string | null;
  result: unknown;
  attempts: number;
  lastError: string | null;
}

export interface FeatureReviews {
  featureId: string;
  status: string;
  transitions: QcTransition[];
  jobs: QcJob[];
}

export interface MySubmission {
  featureId: string;
  name: string;
  kategorie: string;
  status: string;
  version: number;
  submittedVersion: number;
  submittedAt: string;
  comment: string | null;
  decision: { action: string; actor: string; actorName: string | null; comment: string | null; at: string } | null;
  rejectionReason: string | null;
}

/** Who may use the desk; the API checks `qc:review` again on every call. */
export function mayReview(role: string | undefined): boolean {
  return role === 'reviewer' || role === 'admin';
}

/** A reviewer may not decide its own submission (four-eyes); admins are exempt, as in the API. */
export function ownSubmission(user: { id: string; role: string } | undefined, item: Pick<ReviewItem, 'submission'>): boolean {
  return user !== undefined && user.role !== 'admin' && item.submission?.actor === user.id;
}

/** The reason of the rejection that holds now: the last `reject` transition while the feature is rejected. */
export function currentRejection(reviews: FeatureReviews | undefined): QcTransition | undefined {
  if (!reviews || reviews.status !== 'rejected') return undefined;
  return [...reviews.transitions].reverse().find((transition) => transition.action === 'reject');
}

/** A job's result in words: OSM element ids, the Wikidata item, the notice's recipient, or why it did not run. */
export function jobOutcome(job: QcJob): string {
  const parts: string[] = [];
  if (job.reason) parts.push(job.reason);
  if (job.result !== null && job.result !== undefined) parts.push(typeof job.result === 'string' ? job.result : JSON.stringify(job.result));
  if (job.lastError && job.status !== 'skipped') parts.push(job.lastError);
  return parts.join(' · ');
}

export const RERUNNABLE = new Set(['conflict', 'failed', 'skipped']);
export const PENDING = new Set(['queued', 'running', 'retrying']);

/** The common rejection reasons offered on the desk (message keys). */
export const COMMON_REASONS = ['qc.commonReason.address', 'qc.commonReason.duplicate', 'qc.commonReason.geometry', 'qc.commonReason.name', 'qc.commonReason.kategorie'] as const;
