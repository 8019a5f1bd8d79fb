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
 * Before any of that, on the headers alone, a request that cannot authenticate is refused (401) and
 * its connection closed without a byte of its body read: one without a GitLab token equal to some
 * GitLab target's secret and without a well-formed GitHub-style signature header (which can only be
 * checked against the whole body). So only a sender with a valid token, or one willing to present a
 * signature, gets its body read, and then within the body budget (body.ts).
 *
 * The body is read from Node's own request (body.ts, as it streams in, hashed on the way), never by
 * Fastify: the signature is over the exact bytes sent. The route answers with the acknowledgement
 * as JSON, or throws for app.ts' problem+json answer.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyPluginAsync } from 'fastify';
import type { Logger } from 'pino';
import { AppError } from '../../../shared/errors.js';
import type { ResolvedTarget } from '../../../shared/targets.js';
import { BodyBudget, BodyReader, InflateBudget } from '../body.js';
import type { WebhookConfig } from '../config.js';
import type { Deployer } from '../deployments/deployer.js';
import { isDeletionCommit, MalformedPayload, parsePush, readPushFields } from '../payload.js';
import { deliveryIdOf, eventOf, hasWellFormedSignature, RequestAuthenticator } from '../providers.js';
import { branchOfRef, isValidBranchName, matchTarget } from '../routing.js';
import type { SecretBook } from '../secret-book.js';
import { speculativeDigests } from '../streaming-digest.js';
import { methodNotAllowed } from './method-not-allowed.js';

export interface WebhookRouteDeps {
  config: Pick<WebhookConfig, 'targets' | 'unmatchedBranchStatus' | 'maxBodyBytes' | 'inflateBudgetBytes' | 'bodyBudgetBytes'>;
  secrets: SecretBook;
  deployer: Pick<Deployer, 'submit'>;
  logger: Logger;
}

/** POST /webhook, and 405 with `Allow: POST` for every other method. */
export function webhookRoutes(deps: WebhookRouteDeps): FastifyPluginAsync {
  return async (app) => {
    const { config } = deps;
    // One body reader per server: the budgets are shared by every request in flight.
    const bodies = new BodyReader(
      config.maxBodyBytes,
      new InflateBudget(config.inflateBudgetBytes),
      speculativeDigests(config.targets, deps.secrets),
      new BodyBudget(config.bodyBudgetBytes),
    );
    const acknowledge = webhookAcknowledger({ ...deps, bodies });
    app.post('/webhook', async (request, reply) => {
      const answer = await acknowledge(request.raw, reply.raw, () => request.ip);
      return reply.code(answer.status).send(answer.body);
    });
    methodNotAllowed(app, '/webhook', 'POST');
  };
}

/** The answer to a delivery that is not a failure: written as JSON with this status. */
interface Acknowledgement {
  status: 200 | 202 | 404;
  body: Record<string, string | null>;
}

/**
 * Reads, resolves, authenticates and acts on one delivery. Resolves with the answer to write, or
 * rejects with an AppError (or, for a defect, anything else) for the caller's problem+json answer.
 * `clientAddress` is asked only when it is logged.
 */
type Acknowledge = (req: IncomingMessage, res: ServerResponse, clientAddress: () => string | undefined) => Promise<Acknowledgement>;

/** What a request is, before anyone has checked who sent it. */
type Resolution =
  | { kind: 'malformed'; code: 'MALFORMED_JSON' | 'VALIDATION_FAILED'; message: string }
  | { kind: 'ping' }
  | { kind: 'ignored'; reason: string }
  | { kind: 'no-target' }
  | { kind: 'push'; target: ResolvedTarget; branch: string; commit: string };

const unauthenticated = (): AppError => new AppError('UNAUTHENTICATED', 'missing or invalid webhook token or signature');
/**
 * Refused on its headers: the body is not read, so the connection cannot be kept for another request
 * (that would mean reading the body to its end); it is closed after the answer.
 */
const unauthenticatedUnread = (): AppError =>
  new AppError('UNAUTHENTICATED', 'missing or invalid webhook token or signature', { headers: { Connection: 'close' } });
const NO_BODY = Buffer.alloc(0);

async function resolveRequest(rawBody: Buffer, headers: IncomingHttpHeaders, targets: readonly ResolvedTarget[]): Promise<Resolution> {
  const event = eventOf(headers);
  let body: unknown;
  try {
    body = await readPushFields(rawBody, headers['content-type']);
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

function webhookAcknowledger({ config, secrets, deployer, logger, bodies }: WebhookRouteDeps & { bodies: BodyReader }): Acknowledge {
  const githubTargets = config.targets.filter((t) => t.provider === 'github');
  const gitlabTargets = config.targets.filter((t) => t.provider === 'gitlab');

  /**
   * Can the request authenticate for any target, judged before its body is read? A GitLab token is
   * the secret itself, so it is checked here already (constant time, against every GitLab target's
   * secrets; which target the push is for is still checked after the body); a GitHub-style signature
   * can only be checked against the body, so here only its shape counts.
   */
  const mayAuthenticate = async (headers: IncomingHttpHeaders, clientAddress: () => string | undefined): Promise<boolean> => {
    if (githubTargets.length > 0 && hasWellFormedSignature(headers)) return true;
    if (headers['x-gitlab-token'] === undefined) return false;
    const ok = await new RequestAuthenticator(headers, NO_BODY).authenticates('gitlab', gitlabTargets.flatMap((t) => secrets.secretsOf(t)));
    if (!ok) logger.warn({ ip: clientAddress() }, 'webhook rejected: the GitLab token is no GitLab target\'s secret');
    return ok;
  };

  return async (req, res, clientAddress) => {
    if (!(await mayAuthenticate(req.headers, clientAddress))) throw unauthenticatedUnread();
    const read = await bodies.read(req, res);

    const resolution = await resolveRequest(read.bytes, req.headers, config.targets);

    // The one authentication: the matched target alone, or (nothing matched) any target; a ping
    // only comes from GitHub-style hosts.
    const candidates = resolution.kind === 'push' ? [resolution.target] : resolution.kind === 'ping' ? githubTargets : config.targets;
    const auth = new RequestAuthenticator(req.headers, read.bytes, read.digests);
    let authenticated = false;
    for (const target of candidates) authenticated = (await auth.authenticates(target.provider, secrets.secretsOf(target))) || authenticated;
    // Everything needed from the body is decoded and checked: let its buffer go before the answer.
    read.release();
    if (!authenticated) {
      if (resolution.kind === 'push') logger.warn({ target: resolution.target.key, ip: clientAddress() }, 'webhook rejected: wrong token or signature for the target');
      throw unauthenticated();
    }

    const ignore = (reason: string): Acknowledgement => {
      logger.info({ reason, event: eventOf(req.headers).name }, 'webhook ignored');
      return { status: 202, body: { status: 'ignored', reason } };
    };
    switch (resolution.kind) {
      case 'malformed':
        throw new AppError(resolution.code, resolution.message);
      case 'ping':
        return { status: 200, body: { status: 'pong' } };
      case 'ignored':
        return ignore(resolution.reason);
      case 'no-target':
        if (config.unmatchedBranchStatus === 202) return ignore('no target for this branch');
        return { status: 404, body: { status: 'no-target', code: 'NO_TARGET', message: 'no deploy target matches this branch' } };
      case 'push':
        break;
    }

    const { target, branch, commit } = resolution;
    if (!isValidBranchName(branch)) throw new AppError('VALIDATION_FAILED', 'push payload: ref: not a valid git branch name');
    if (isDeletionCommit(commit)) return ignore('branch deleted');
    const result = await deployer.submit({ target, branch, commit, provider: target.provider, deliveryId: deliveryIdOf(req.headers) });
    if (result.kind === 'duplicate') {
      logger.info({ target: target.key, reason: result.reason, deploymentId: result.deploymentId }, 'webhook duplicate: not deployed again');
      return { status: 200, body: { status: 'duplicate', reason: result.reason, deploymentId: result.deploymentId } };
    }
    const { deployment } = result;
    logger.info({ deploymentId: deployment.id, target: target.key, branch, commit: deployment.commit }, 'deploy queued');
    return { status: 202, body: { status: 'queued', deploymentId: deployment.id, target: target.key, branch, commit: deployment.commit } };
  };
}
