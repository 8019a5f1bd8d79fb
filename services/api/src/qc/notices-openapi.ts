import { z } from 'zod';
import type { ZodOpenApiPathsObject } from 'zod-openapi';
import { ProblemSchema } from '../../../shared/features/schema.js';
import { CommentBodySchema } from './notices.js';

/** The notices and comment routes in the OpenAPI document (spread into openapi.ts `paths`). */
const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: ProblemSchema } } });
const Notice = z.object({
  id: z.number().int(),
  featureId: z.string(),
  featureName: z.string(),
  action: z.enum(['approve', 'reject']),
  reason: z.string().nullable().meta({ description: 'the rejection reason or the approval comment' }),
  actor: z.string(),
  actorName: z.string().nullable(),
  createdAt: z.string(),
  readAt: z.string().nullable(),
});
const Comment = z.object({ id: z.number().int(), author: z.string(), authorName: z.string().nullable(), body: z.string(), createdAt: z.string() });
const forbidden = problem('guests take no part in reviews (contributor and up)');
const featurePath = z.object({ id: z.string().meta({ description: 'the feature id' }) });

export const noticePaths: ZodOpenApiPathsObject = {
  '/api/qc/notices': {
    get: {
      summary: 'My notices: decisions on features I submitted, with the reason, newest first (at most 100)',
      responses: { '200': { description: 'the notices and how many are unread', content: { 'application/json': { schema: z.object({ items: z.array(Notice), unread: z.number().int() }) } } }, '403': forbidden },
    },
  },
  '/api/qc/notices/read': {
    post: { summary: 'Mark all my notices read', responses: { '204': { description: 'marked' }, '403': forbidden } },
  },
  '/api/qc/items/{id}/comments': {
    get: {
      summary: 'The comment thread of a feature\'s review, oldest first (the newest 500)',
      requestParams: { path: featurePath },
      responses: { '200': { description: 'the comments', content: { 'application/json': { schema: z.object({ items: z.array(Comment) }) } } }, '403': forbidden },
    },
    post: {
      summary: 'Add a comment to a feature\'s review thread',
      requestParams: { path: featurePath },
      requestBody: { required: true, content: { 'application/json': { schema: CommentBodySchema } } },
      responses: { '201': { description: 'the comment as stored', content: { 'application/json': { schema: Comment } } }, '403': forbidden, '404': problem('no feature with this id') },
    },
  },
};
