/**
 * POST /webhook: authenticate, route the pushed branch to its target, queue the deploy, answer.
 *
 * Order of checks (every answer is JSON):
 *   no credential header, or a GitLab token that is no GitLab target's secret (without a signature
 *   header) → 401 before the body is decoded · body not JSON / not a push → 400 (401 if it authenticates for no
 *   target) · ping → 200 · other events, tags, branch deletions → 202 ignored · branch matching no
 *   target → 404 or 202 ignored (WEBHOOK_UNMATCHED_BRANCH) · wrong secret for the matched target
 *   → 401 · a branch name git would refuse → 400 · redelivery → 200 duplicate · otherwise → 202 with the deployment id.
 * Requests for which no target is determined are only answered beyond 401 when they authenticate
 * for at least one target of their provider, so an outsider learns nothing about branches.
 */
import type { Request, Response } from 'express';
import type { Logger } from 'pino';
import { AppError } from '../../../shared/errors.js';
import type { Target } from '../../../shared/targets.js';
import type { WebhookConfig } from '../config.js';
import type { DeployQueue } from '../deployments/queue.js';
import { decodeBody, isDeletionCommit, MalformedPayload, parsePush } from '../payload.js';
import { deliveryIdOf, eventOf, hasCredentials, hasWellFormedSignature, RequestAuthenticator } from '../providers.js';
import { branchOfRef, isValidBranchName, matchTarget } from '../routing.js';
import type { SecretBook } from '../secret-book.js';

export interface WebhookRouteDeps {
  config: Pick<WebhookConfig, 'targets' | 'unmatchedBranchStatus'>;
  secrets: SecretBook;
  queue: DeployQueue;
  logger: Logger;
}

const unauthenticated = (): AppError => new AppError('UNAUTHENTICATED', 'missing or invalid webhook token or signature');

export function webhookHandler({ config, secrets, queue, logger }: WebhookRouteDeps) {
  /** Does the request authenticate for any target (optionally: any of these)? */
  const authenticatesForAny = (auth: RequestAuthenticator, targets: readonly Target[] = config.targets): boolean => {
    let ok = false;
    for (const target of targets) ok = auth.authenticates(target.provider, secrets.secretsOf(target)) || ok;
    return ok;
  };

  return async (req: Request, res: Response): Promise<void> => {
    const rawBody = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    if (!hasCredentials(req.headers)) throw unauthenticated();
    const auth = new RequestAuthenticator(req.headers, rawBody);
    // Authenticate before decoding where that is cheap: a GitLab token is the secret itself, so a
    // request whose token is no GitLab target's secret (and that has no signature to check
    // instead) is refused before its body is decoded or parsed. A signature is an HMAC of the
    // body under the target's secret; it is checked once the payload names the target, so a
    // genuine delivery costs one HMAC, not one per configured secret.
    if (!hasWellFormedSignature(req.headers) && !authenticatesForAny(auth, config.targets.filter((t) => t.provider === 'gitlab'))) {
      throw unauthenticated();
    }
    const event = eventOf(req.headers);
    const ignore = (reason: string): void => {
      logger.info({ reason, event: event.name }, 'webhook ignored');
      res.status(202).json({ status: 'ignored', reason });
    };

    let body: unknown;
    try {
      body = decodeBody(rawBody, req.headers['content-type']);
    } catch (error) {
      if (!(error instanceof MalformedPayload)) throw error;
      if (!authenticatesForAny(auth)) throw unauthenticated();
      throw new AppError('MALFORMED_JSON', error.message);
    }

    if (event.kind === 'ping') {
      if (!authenticatesForAny(auth, config.targets.filter((t) => t.provider === 'github'))) throw unauthenticated();
      res.status(200).json({ status: 'pong' });
      return;
    }
    if (event.kind === 'other') {
      if (!authenticatesForAny(auth)) throw unauthenticated();
      ignore(`event ${event.name} is not a push`);
      return;
    }

    let push;
    try {
      push = parsePush(body);
    } catch (error) {
      if (!(error instanceof MalformedPayload)) throw error;
      if (!authenticatesForAny(auth)) throw unauthenticated();
      throw new AppError('VALIDATION_FAILED', error.message);
    }

    const branch = branchOfRef(push.ref);
    if (branch === null) {
      if (!authenticatesForAny(auth)) throw unauthenticated();
      ignore('not a branch push (tag or other ref)');
      return;
    }
    const target = matchTarget(config.targets, branch);
    if (!target) {
      if (!authenticatesForAny(auth)) throw unauthenticated();
      if (config.unmatchedBranchStatus === 202) ignore('no target for this branch');
      else res.status(404).json({ status: 'no-target', code: 'NO_TARGET', message: 'no deploy target matches this branch' });
      return;
    }
    // The matched target's own secrets and provider only: another team's secret never counts.
    if (!auth.authenticates(target.provider, secrets.secretsOf(target))) {
      logger.warn({ target: target.key, ip: req.ip }, 'webhook rejected: wrong token or signature for the target');
      throw unauthenticated();
    }
    if (!isValidBranchName(branch)) throw new AppError('VALIDATION_FAILED', 'push payload: ref: not a valid git branch name');
    if (isDeletionCommit(push.after)) {
      ignore('branch deleted');
      return;
    }

    const result = await queue.submit({
      target,
      branch,
      commit: push.after,
      provider: target.provider,
      deliveryId: deliveryIdOf(req.headers),
    });
    if (result.kind === 'duplicate') {
      logger.info({ target: target.key, reason: result.reason, deploymentId: result.deploymentId }, 'webhook duplicate: not deployed again');
      res.status(200).json({ status: 'duplicate', reason: result.reason, deploymentId: result.deploymentId });
      return;
    }
    const { deployment } = result;
    logger.info({ deploymentId: deployment.id, target: target.key, branch, commit: deployment.commit }, 'deploy queued');
    res.status(202).json({ status: 'queued', deploymentId: deployment.id, target: target.key, branch, commit: deployment.commit });
  };
}
