import { z } from 'zod';
import type { ZodOpenApiOperationObject } from 'zod-openapi';
import { ProblemSchema } from '../../../shared/features/schema.js';
import { IDEMPOTENCY_HEADER, KEY_RETENTION_HOURS } from './idempotency.js';

/** Adds the Idempotency-Key header and its answers to an operation of the OpenAPI document. */
const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: ProblemSchema } } });

export function withIdempotencyKey(operation: ZodOpenApiOperationObject): ZodOpenApiOperationObject {
  const params = operation.requestParams ?? {};
  const header = z.object({
    [IDEMPOTENCY_HEADER]: z
      .string()
      .min(1)
      .max(255)
      .regex(/^[\x21-\x7e]+$/)
      .optional()
      .meta({
        description: `a unique key per intended create (e.g. a UUID), scoped to the caller and kept ${KEY_RETENTION_HOURS} h: the same key with the same body replays the first 201 (header Idempotent-Replayed: true) and creates nothing; the same key with another body is 422`,
        example: '5b0e6c8e-2f1a-4a8e-9c3f-0d7b1e6f9a21',
      }),
  });
  return {
    ...operation,
    requestParams: { ...params, header: params.header ? (params.header as z.ZodObject).extend(header.shape) : header },
    responses: {
      ...operation.responses,
      '409': problem('a feature with this id exists, or CONFLICT: a request with the same Idempotency-Key is still in progress (Retry-After)'),
      '422': problem('IDEMPOTENCY_KEY_REUSED: the Idempotency-Key was used for a different request body'),
    },
  };
}
