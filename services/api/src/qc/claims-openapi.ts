import { z } from 'zod';
import type { ZodOpenApiPathsObject } from 'zod-openapi';
import { FeatureIdSchema, ProblemSchema } from '../../../shared/features/schema.js';

/** POST/DELETE /api/qc/claim/{id} in the OpenAPI document (spread into openapi.ts `paths`). */
const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: ProblemSchema } } });

export const ClaimSchema = z
  .object({
    featureId: z.string(),
    holder: z.string().meta({ description: 'the id of the reviewer holding the claim' }),
    holderName: z.string().nullable(),
    claimedAt: z.string().meta({ format: 'date-time', description: 'when the holder took it (kept on renewal)' }),
    expiresAt: z.string().meta({ format: 'date-time', description: 'the claim ends then unless renewed' }),
  })
  .meta({ id: 'QcClaim' });

const idParam = z.object({ id: FeatureIdSchema });
const guarded = { '401': problem('no credentials'), '403': problem('the role lacks qc:review') };

export const claimPaths: ZodOpenApiPathsObject = {
  '/api/qc/claim/{id}': {
    post: {
      summary: 'Claim a feature in_qc for review for 10 minutes, or renew one\'s own claim (qc:review)',
      description:
        'While the claim is live, only its holder may approve or reject the feature; others get 409 naming the holder. The claim ends on a decision, an edit of the feature, DELETE, or expiry. Concurrent claims: exactly one wins.',
      requestParams: { path: idParam },
      responses: {
        '200': { description: 'the claim, taken or renewed', content: { 'application/json': { schema: ClaimSchema } } },
        ...guarded,
        '403': problem('the role lacks qc:review, or four-eyes: the caller submitted this feature itself (admins are exempt)'),
        '404': problem('FEATURE_NOT_FOUND'),
        '409': problem('CLAIMED: another reviewer holds a live claim (named in detail), or INVALID_STATE: the feature is not in_qc'),
      },
    },
    delete: {
      summary: 'Release one\'s claim (admins: anyone\'s) (qc:review)',
      description:
        'With expiresAt (the value the last claim or renewal answered) only that claim is released: a claim renewed since, from another page or tab of the same reviewer, stays (204). Desks send it when their page closes.',
      requestParams: {
        path: idParam,
        query: z.object({ expiresAt: z.string().max(40).optional().meta({ description: 'the expiresAt of the claim to release, exactly as the claim answered it' }) }),
      },
      responses: {
        '204': { description: 'released, or there was no claim, or (with expiresAt) the claim was renewed since and stays' },
        '400': problem('VALIDATION_FAILED: expiresAt is not a claim\'s expiresAt'),
        ...guarded,
        '404': problem('FEATURE_NOT_FOUND'),
        '409': problem('CLAIMED: the live claim belongs to another reviewer'),
      },
    },
  },
};
