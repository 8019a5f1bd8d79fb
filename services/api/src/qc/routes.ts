import type { FastifyInstance } from 'fastify';
import { principalOf, requirePermission } from '../auth/middleware.js';
import { can } from '../auth/permissions.js';
import { requireSecondFactor } from '../auth/assurance.js';
import { AppError } from '../../../shared/errors.js';
import { jsonBody } from '../http/body.js';
import { featureIdParam, header, methodNotAllowed, param, sendJson, sendText } from '../http/fastify.js';
import { parseOrThrow } from '../http/validate.js';
import { ApproveBodySchema, JobIdSchema, JobListQuerySchema, QueueQuerySchema, RejectBodySchema, SubmitBodySchema } from './schema.js';
import { DecisionBodySchema, type DecisionService } from './decisions.js';
import type { QcService } from './service.js';

/**
 * GET /api/features/:id/reviews, in the /api scope (app.ts), beside the feature routes' paths.
 */
export async function reviewRoutes(app: FastifyInstance, { service }: { service: QcService }): Promise<void> {
  app.get('/features/:id/reviews', { onRequest: requirePermission('read', 'read reviews') }, async (request, reply) => {
    return sendText(reply, 'application/json', await service.reviews(featureIdParam(request)));
  });
}

/**
 * /api/qc/*. Each route states its permission first, so an anonymous caller gets 401 and a role
 * without it 403 before a body is read.
 */
export async function qcRoutes(app: FastifyInstance, { service, decisions }: { service: QcService; decisions?: DecisionService }): Promise<void> {
  // Conflation: a reviewer picks a candidate or "create new" for a job waiting in needs_decision.
  if (decisions) {
    app.post('/jobs/:id/decision', { onRequest: [requirePermission('qc:review', 'decide conflations'), requireSecondFactor('decide conflations')], ...jsonBody() }, async (request, reply) => {
      const id = JobIdSchema.safeParse(param(request, 'id'));
      if (!id.success) throw new AppError('NOT_FOUND', 'no job with this id');
      const body = parseOrThrow(DecisionBodySchema, request.body, 'VALIDATION_FAILED', 'decision');
      return sendText(reply, 'application/json', await decisions.decide(principalOf(request), Number(id.data), body));
    });
  }

  app.post('/submit', { onRequest: requirePermission('qc:submit', 'submit features for review'), ...jsonBody() }, async (request, reply) => {
    const body = parseOrThrow(SubmitBodySchema, request.body, 'VALIDATION_FAILED', 'submission');
    return sendJson(reply, await service.submit(principalOf(request), body.featureId, blankToNull(body.comment)));
  });

  app.get('/queue', { onRequest: requirePermission('qc:review', 'see the review queue') }, async (request, reply) => {
    const query = parseOrThrow(QueueQuerySchema, request.query, 'INVALID_QUERY', 'query');
    return sendText(reply, 'application/json', `{"items":${await service.queue(query.limit)}}`);
  });

  // The navigation's count: polled by every reviewer's open pages, so it is one index count and the
  // answer carries a weak ETag — an unchanged count costs a 304 with no body.
  app.get('/queue/count', { onRequest: requirePermission('qc:review', 'see the review queue') }, async (request, reply) => {
    const count = await service.queueCount();
    const etag = `W/"${count}"`;
    reply.header('Cache-Control', 'no-cache').header('ETag', etag);
    // Weak comparison (RFC 9110 §13.1.2): W/"3" and "3" name the same count.
    const weak = (tag: string) => tag.trim().replace(/^W\//, '');
    if ((header(request, 'if-none-match') ?? '').split(',').some((tag) => tag.trim() === '*' || weak(tag) === weak(etag))) return reply.code(304).send();
    return sendJson(reply, { count });
  });

  app.post('/approve/:id', { onRequest: [requirePermission('qc:review', 'approve features'), requireSecondFactor('approve features')], ...jsonBody({ optional: true }) }, async (request, reply) => {
    const body = parseOrThrow(ApproveBodySchema, request.body ?? {}, 'VALIDATION_FAILED', 'approval');
    return sendJson(reply, await service.approve(principalOf(request), featureIdParam(request), blankToNull(body.comment)));
  });

  app.post('/reject/:id', { onRequest: [requirePermission('qc:review', 'reject features'), requireSecondFactor('reject features')], ...jsonBody() }, async (request, reply) => {
    const body = parseOrThrow(RejectBodySchema, request.body, 'VALIDATION_FAILED', 'rejection');
    return sendJson(reply, await service.reject(principalOf(request), featureIdParam(request), body.reason.trim()));
  });

  // Admins list jobs of any status; reviewers (qc:review) only those waiting for their conflation
  // decision, with the candidates, so the review desk can show them. Re-running stays with admins.
  app.get('/jobs', { onRequest: requirePermission('qc:review', 'see QC jobs') }, async (request, reply) => {
    const query = parseOrThrow(JobListQuerySchema, request.query, 'INVALID_QUERY', 'query');
    const principal = principalOf(request);
    const onlyDecisions = query.status.every((status) => status === 'needs_decision');
    if (!onlyDecisions && !can(principal, 'jobs:admin')) {
      throw new AppError('FORBIDDEN', `role ${principal.role} may list only the jobs waiting for a conflation decision (status=needs_decision)`);
    }
    return sendText(reply, 'application/json', `{"jobs":${await service.jobs(query.status, query.task, query.limit)}}`);
  });

  app.post('/jobs/:id/rerun', { onRequest: [requirePermission('jobs:admin', 're-run QC jobs'), requireSecondFactor('re-run QC jobs')] }, async (request, reply) => {
    const id = JobIdSchema.safeParse(param(request, 'id'));
    if (!id.success) throw new AppError('NOT_FOUND', 'no job with this id');
    return sendText(reply, 'application/json', await service.rerun(principalOf(request), Number(id.data)));
  });

  const allow: Record<string, string> = { '/submit': 'POST', '/queue': 'GET, HEAD', '/queue/count': 'GET, HEAD', '/jobs': 'GET, HEAD' };
  const paths = ['/submit', '/queue', '/queue/count', '/jobs', '/approve/:id', '/reject/:id', '/jobs/:id/rerun', ...(decisions ? ['/jobs/:id/decision'] : [])];
  methodNotAllowed(app, paths, (url) => allow[url] ?? 'POST', (method, methods) => `${method} is not allowed here; use ${methods}`);
}


function blankToNull(comment: string | null | undefined): string | null {
  return comment?.trim() ? comment.trim() : null;
}

