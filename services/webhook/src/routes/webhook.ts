/**
 * POST /webhook in three steps: parse the request, resolve what it is for, authenticate once, then act.
 *
 * 1. parse + resolve (no secret involved): the event, the body (JSON or form payload=), the push,
 *    the branch and its target. The result names who the request must authenticate as: the matched
 *    target only (another team's secret never counts for it), or — when no target is determined
 *    (malformed body, ping, other events, tags, unknown branches) — any target.
 * 2. authenticate once against those: one constant-time check per candidate secret (a genuine push
 *    costs one HMAC); failure → 401, and nothing about branches or targets is revealed.
 * 3. act: malformed → 400 · ping → 200 · other events, tags, branch deletions → 202 ignored ·
 *    branch matching no target → 404 or 202 ignored (WEBHOOK_UNMATCHED_BRANCH) · a branch name git
 *    would refuse → 400 · duplicate (redelivery, commit live/queued/running/deployed before) → 200
 *    naming that deployment · otherwise → 202 with the new deployment's id.
 * A request without any credential header is refused before its body is decoded.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Request, Response } from 'express';
import type { Logger } from 'pino';
import { AppError } from '../../../shared/errors.js';
import type { ResolvedTarget } from '../../../shared/targets.js';
import { bodyDigestsOf, releaseBody } from '../body.js';
import type { WebhookConfig } from '../config.js';
import type { Deployer } from '../deployments/deployer.js';
import { isDeletionCommit, MalformedPayload, parsePush, readPushFields } from '../payload.js';
import { deliveryIdOf, eventOf, hasCredentials, RequestAuthenticator } from '../providers.js';
import { branchOfRef, isValidBranchName, matchTarget } from '../routing.js';
import type { SecretBook } from '../secret-book.js';

export interface WebhookRouteDeps {
  config: Pick<WebhookConfig, 'targets' | 'unmatchedBranchStatus'>;
  secrets: SecretBook;
  deployer: Pick<Deployer, 'submit'>;
  logger: Logger;
}

/** What a request is, before anyone has checked who sent it. */
type Resolution =
  | { kind: 'malformed'; code: 'MALFORMED_JSON' | 'VALIDATION_FAILED'; message: string }
  | { kind: 'ping' }
  | { kind: 'ignored'; reason: string }
  | { kind: 'no-target' }
  | { kind: 'push'; target: ResolvedTarget; branch: string; commit: string };

const unauthenticated = (): AppError => new AppError('UNAUTHENTICATED', 'missing or invalid webhook token or signature');

function resolveRequest(rawBody: Buffer, headers: IncomingHttpHeaders, targets: readonly ResolvedTarget[]): Resolution {
  const event = eventOf(headers);
  let body: unknown;
  try {
    body = readPushFields(rawBody, headers['content-type']);
  } catch (error) {
    if (!(error instanceof MalformedPayload)) throw error;
    return { kind: 'malformed', code: 'MALFORMED_JSON', message: error.message };
  }
  if (event.kind === 'ping') return { kind: 'ping' };
  if (event.kind === 'other') return { kind: 'ignored', reason: `event ${event.name} is not a push` };
  let push;
  try {
    push = parsePush(body);
  } catch (error) {
    if (!(error instanceof MalformedPayload)) throw error;
    return { kind: 'malformed', code: 'VALIDATION_FAILED', message: error.message };
  }
  const branch = branchOfRef(push.ref);
  if (branch === null) return { kind: 'ignored', reason: 'not a branch push (tag or other ref)' };
  const target = matchTarget(targets, branch);
  if (!target) return { kind: 'no-target' };
  return { kind: 'push', target, branch, commit: push.after.toLowerCase() };
}

export function webhookHandler({ config, secrets, deployer, logger }: WebhookRouteDeps) {
  const githubTargets = config.targets.filter((t) => t.provider === 'github');

  return async (req: Request, res: Response): Promise<void> => {
    const rawBody = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    if (!hasCredentials(req.headers)) throw unauthenticated();

    const resolution = resolveRequest(rawBody, req.headers, config.targets);

    // The one authentication: the matched target alone, or (nothing matched) any target; a ping
    // only comes from GitHub-style hosts.
    const candidates = resolution.kind === 'push' ? [resolution.target] : resolution.kind === 'ping' ? githubTargets : config.targets;
    const auth = new RequestAuthenticator(req.headers, rawBody, bodyDigestsOf(res));
    let authenticated = false;
    for (const target of candidates) authenticated = auth.authenticates(target.provider, secrets.secretsOf(target)) || authenticated;
    // Everything needed from the body is decoded and checked: let its buffer go before the answer.
    releaseBody(req, res);
    if (!authenticated) {
      if (resolution.kind === 'push') logger.warn({ target: resolution.target.key, ip: req.ip }, 'webhook rejected: wrong token or signature for the target');
      throw unauthenticated();
    }

    const ignore = (reason: string): void => {
      logger.info({ reason, event: eventOf(req.headers).name }, 'webhook ignored');
      res.status(202).json({ status: 'ignored', reason });
    };
    switch (resolution.kind) {
      case 'malformed':
        throw new AppError(resolution.code, resolution.message);
      case 'ping':
        res.status(200).json({ status: 'pong' });
        return;
      case 'ignored':
        ignore(resolution.reason);
        return;
      case 'no-target':
        if (config.unmatchedBranchStatus === 202) ignore('no target for this branch');
        else res.status(404).json({ status: 'no-target', code: 'NO_TARGET', message: 'no deploy target matches this branch' });
        return;
      case 'push':
        break;
    }

    const { target, branch, commit } = resolution;
    if (!isValidBranchName(branch)) throw new AppError('VALIDATION_FAILED', 'push payload: ref: not a valid git branch name');
    if (isDeletionCommit(commit)) {
      ignore('branch deleted');
      return;
    }
    const result = await deployer.submit({ target, branch, commit, provider: target.provider, deliveryId: deliveryIdOf(req.headers) });
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
