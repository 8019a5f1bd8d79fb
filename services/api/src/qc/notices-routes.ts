import { Router } from 'express';
import { AppError } from '../../../shared/errors.js';
import { principalOf, requirePermission } from '../auth/middleware.js';
import { jsonBody } from '../http/body.js';
import { parseOrThrow } from '../http/validate.js';
import { CommentBodySchema, type NoticeService } from './notices.js';

/**
 * GET /api/qc/notices, POST /api/qc/notices/read: the caller's notices about decisions on their
 * submissions. GET and POST /api/qc/items/{featureId}/comments: the review's comment thread, for those
 * who take part in reviews — contributors (who submit) and up; guests get 403.
 */
export function noticeRoutes(notices: NoticeService): Router {
  const router = Router();
  const participant = (what: string) => requirePermission('qc:submit', what);
  router.get('/notices', participant('read notices'), async (_req, res) => {
    res.setHeader('Cache-Control', 'no-store');
    res.type('application/json').send(await notices.mine(principalOf(res)));
  });
  router.post('/notices/read', participant('read notices'), async (_req, res) => {
    await notices.markRead(principalOf(res));
    res.status(204).end();
  });
  router.get('/items/:id/comments', participant('read review comments'), async (req, res) => {
    res.setHeader('Cache-Control', 'no-store');
    res.type('application/json').send(await notices.comments(featureId(req.params.id as string)));
  });
  router.post('/items/:id/comments', participant('comment on reviews'), ...jsonBody(), async (req, res) => {
    const body = parseOrThrow(CommentBodySchema, req.body, 'VALIDATION_FAILED', 'comment');
    res.status(201).type('application/json').send(await notices.addComment(principalOf(res), featureId(req.params.id as string), body.body));
  });
  router.all(['/notices', '/notices/read', '/items/:id/comments'], (req, _res, next) => {
    const methods = req.path === '/notices' ? 'GET, HEAD' : req.path === '/notices/read' ? 'POST' : 'GET, HEAD, POST';
    next(new AppError('METHOD_NOT_ALLOWED', `${req.method} is not allowed here; use ${methods}`, { headers: { Allow: methods } }));
  });
  return router;
}

function featureId(id: string): string {
  if (id.length === 0 || id.length > 255 || id.includes('\u0000')) throw new AppError('FEATURE_NOT_FOUND', 'no feature with this id');
  return id;
}
