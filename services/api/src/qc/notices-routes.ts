import type { FastifyInstance } from 'fastify';
import { principalOf, requirePermission } from '../auth/middleware.js';
import { jsonBody } from '../http/body.js';
import { featureIdParam, methodNotAllowed, sendText } from '../http/fastify.js';
import { parseOrThrow } from '../http/validate.js';
import { CommentBodySchema, type NoticeService } from './notices.js';

/**
 * GET /api/qc/notices, POST /api/qc/notices/read: the caller's notices about decisions on their
 * submissions. GET and POST /api/qc/items/{featureId}/comments: the review's comment thread, for those
 * who take part in reviews — contributors (who submit) and up; guests get 403.
 */
export async function noticeRoutes(app: FastifyInstance, { notices }: { notices: NoticeService }): Promise<void> {
  const participant = (what: string) => ({ onRequest: requirePermission('qc:submit', what) });
  app.get('/notices', participant('read notices'), async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    return sendText(reply, 'application/json', await notices.mine(principalOf(request)));
  });
  app.post('/notices/read', participant('read notices'), async (request, reply) => {
    await notices.markRead(principalOf(request));
    return reply.code(204).send();
  });
  app.get('/items/:id/comments', participant('read review comments'), async (request, reply) => {
    reply.header('Cache-Control', 'no-store');
    return sendText(reply, 'application/json', await notices.comments(featureIdParam(request)));
  });
  app.post('/items/:id/comments', { ...participant('comment on reviews'), ...jsonBody() }, async (request, reply) => {
    const body = parseOrThrow(CommentBodySchema, request.body, 'VALIDATION_FAILED', 'comment');
    reply.code(201);
    return sendText(reply, 'application/json', await notices.addComment(principalOf(request), featureIdParam(request), body.body));
  });
  methodNotAllowed(app, ['/notices', '/notices/read', '/items/:id/comments'], (url) => (url === '/notices' ? 'GET, HEAD' : url === '/notices/read' ? 'POST' : 'GET, HEAD, POST'), (method, methods) => `${method} is not allowed here; use ${methods}`);
}

