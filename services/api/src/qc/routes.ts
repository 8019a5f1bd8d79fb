import { Router, type Express } from 'express';
import { authenticate, principalOf, requirePermission } from '../auth/middleware.js';
import { can } from '../auth/permissions.js';
import { requireSecondFactor } from '../auth/assurance.js';
import type { Authenticator } from '../../../shared/principal.js';
import { AppError } from '../../../shared/errors.js';
import { jsonBody } from '../http/body.js';
import { parseOrThrow } from '../http/validate.js';
import { ApproveBodySchema, JobIdSchema, JobListQuerySchema, QueueQuerySchema, RejectBodySchema, SubmitBodySchema } from './schema.js';
import { DecisionBodySchema, type DecisionService } from './decisions.js';
import type { QcService } from './service.js';

/**
 * /api/qc/* and GET /api/features/:id/reviews. Each route states its permission first, so an
 * anonymous caller gets 401 and a role without it 403 before a body is read.
 */
export function mountQc(app: Express, deps: { service: QcService; authenticator: Authenticator; decisions?: DecisionService }): void {
  const auth = authenticate(deps.authenticator);
  // Before the feature router, which would otherwise answer 404 for the sub-path.
  app.get('/api/features/:id/reviews', auth, requirePermission('read', 'read reviews'), async (req, res) => {
    res.type('application/json').send(await deps.service.reviews(featureId(req.params.id as string)));
  });
  app.use('/api/qc', auth, qcRoutes(deps.service, deps.decisions));
}

export function qcRoutes(service: QcService, decisions?: DecisionService): Router {
  const router = Router();

  // Conflation: a reviewer picks a candidate or "create new" for a job waiting in needs_decision.
  if (decisions) {
    router.post('/jobs/:id/decision', requirePermission('qc:review', 'decide conflations'), requireSecondFactor('decide conflations'), ...jsonBody(), async (req, res) => {
      const id = JobIdSchema.safeParse(req.params.id);
      if (!id.success) throw new AppError('NOT_FOUND', 'no job with this id');
      const body = parseOrThrow(DecisionBodySchema, req.body, 'VALIDATION_FAILED', 'decision');
      res.type('application/json').send(await decisions.decide(principalOf(res), Number(id.data), body));
    });
  }

  router.post('/submit', requirePermission('qc:submit', 'submit features for review'), ...jsonBody(), async (req, res) => {
    const body = parseOrThrow(SubmitBodySchema, req.body, 'VALIDATION_FAILED', 'submission');
    res.json(await service.submit(principalOf(res), body.featureId, blankToNull(body.comment)));
  });

  router.get('/queue', requirePermission('qc:review', 'see the review queue'), async (req, res) => {
    const query = parseOrThrow(QueueQuerySchema, req.query, 'INVALID_QUERY', 'query');
    res.type('application/json').send(`{"items":${await service.queue(query.limit)}}`);
  });

  // The navigation's count: polled by every reviewer's open pages, so it is one index count and the
  // answer carries a weak ETag — an unchanged count costs a 304 with no body.
  router.get('/queue/count', requirePermission('qc:review', 'see the review queue'), async (req, res) => {
    const count = await service.queueCount();
    const etag = `W/"${count}"`;
    res.setHeader('Cache-Control', 'no-cache');
    res.setHeader('ETag', etag);
    // Weak comparison (RFC 9110 §13.1.2): W/"3" and "3" name the same count.
    const weak = (tag: string) => tag.trim().replace(/^W\//, '');
    if ((req.get('if-none-match') ?? '').split(',').some((tag) => tag.trim() === '*' || weak(tag) === weak(etag))) {
      res.status(304).end();
      return;
    }
    res.json({ count });
  });

  router.post('/approve/:id', requirePermission('qc:review', 'approve features'), requireSecondFactor('approve features'), ...jsonBody({ optional: true }), async (req, res) => {
    const body = parseOrThrow(ApproveBodySchema, req.body ?? {}, 'VALIDATION_FAILED', 'approval');
    res.json(await service.approve(principalOf(res), featureId(req.params.id as string), blankToNull(body.comment)));
  });

  router.post('/reject/:id', requirePermission('qc:review', 'reject features'), requireSecondFactor('reject features'), ...jsonBody(), async (req, res) => {
    const body = parseOrThrow(RejectBodySchema, req.body, 'VALIDATION_FAILED', 'rejection');
    res.json(await service.reject(principalOf(res), featureId(req.params.id as string), body.reason.trim()));
  });

  // Admins list jobs of any status; reviewers (qc:review) only those waiting for their conflation
  // decision, with the candidates, so the review desk can show them. Re-running stays with admins.
  router.get('/jobs', requirePermission('qc:review', 'see QC jobs'), async (req, res) => {
    const query = parseOrThrow(JobListQuerySchema, req.query, 'INVALID_QUERY', 'query');
    const principal = principalOf(res);
    const onlyDecisions = query.status.every((status) => status === 'needs_decision');
    if (!onlyDecisions && !can(principal, 'jobs:admin')) {
      throw new AppError('FORBIDDEN', `role ${principal.role} may list only the jobs waiting for a conflation decision (status=needs_decision)`);
    }
    res.type('application/json').send(`{"jobs":${await service.jobs(query.status, query.task, query.limit)}}`);
  });

  router.post('/jobs/:id/rerun', requirePermission('jobs:admin', 're-run QC jobs'), requireSecondFactor('re-run QC jobs'), async (req, res) => {
    const id = JobIdSchema.safeParse(req.params.id);
    if (!id.success) throw new AppError('NOT_FOUND', 'no job with this id');
    res.type('application/json').send(await service.rerun(principalOf(res), Number(id.data)));
  });

  const allow: Record<string, string> = { '/submit': 'POST', '/queue': 'GET, HEAD', '/queue/count': 'GET, HEAD', '/jobs': 'GET, HEAD' };
  router.all(['/submit', '/queue', '/queue/count', '/jobs', '/approve/:id', '/reject/:id', '/jobs/:id/rerun', '/jobs/:id/decision'], (req, _res, next) => {
    const methods = allow[req.path] ?? 'POST';
    next(new AppError('METHOD_NOT_ALLOWED', `${req.method} is not allowed here; use ${methods}`, { headers: { Allow: methods } }));
  });
  return router;
}

/** Any string a feature row could hold is looked up; anything else cannot exist. */
function featureId(id: string): string {
  if (id.length === 0 || id.length > 255 || id.includes('\u0000')) throw new AppError('FEATURE_NOT_FOUND', 'no feature with this id');
  return id;
}

function blankToNull(comment: string | null | undefined): string | null {
  return comment?.trim() ? comment.trim() : null;
}

