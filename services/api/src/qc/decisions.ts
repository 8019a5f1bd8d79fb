import { z } from 'zod';
import { AppError } from '../../../shared/errors.js';
import type { Principal } from '../../../shared/principal.js';
import { query, withTransaction, type Db } from '../db/pool.js';
import { heldElements } from './jobs/held.js';
import type { OsmConflationDecision, ScoredCandidate } from '../exports/conflation/osm.js';
import type { WikibaseCandidate, WikibaseConflationDecision } from '../exports/conflation/wikibase.js';
import { insertDecision } from './jobs/journal.js';
import * as sql from './queries.js';
import type { JobTask } from './states.js';

/**
 * A reviewer settles a conflation that stopped an export with `needs_decision`: one of the
 * candidates the lookup found, or "create new". The decision is recorded with who made it, and the
 * job is queued again in the same transaction; it then exports according to the decision.
 */
export const DecisionBodySchema = z
  .object({
    choice: z.union([
      z.literal('create').meta({ description: 'create a new element / item' }),
      z.object({ type: z.enum(['node', 'way', 'relation']), id: z.number().int().positive() }).strict().meta({ description: 'an OSM candidate' }),
      z.object({ itemId: z.string().regex(/^Q[1-9]\d*$/) }).strict().meta({ description: 'a Wikibase candidate' }),
    ]),
    moveGeometry: z.boolean().default(false).meta({ description: 'OSM only: move the chosen element onto the feature geometry (default: keep its geometry)' }),
    comment: z.string().max(4000).nullish(),
  })
  .strict();
export type DecisionBody = z.output<typeof DecisionBodySchema>;

export function createDecisionService(db: Db, options: { maxAttempts: number }) {
  return {
    async decide(principal: Principal, jobId: number, body: DecisionBody): Promise<string> {
      const actor = principal.id;
      if (actor === null) throw new AppError('UNAUTHENTICATED', 'authentication required');
      return withTransaction(
        db,
        async (client) => {
          const locked = await query(client, sql.lockJob(jobId));
          const job = locked.rows[0] as { id: string; task: JobTask; status: string; featureId: string } | undefined;
          if (!job) throw new AppError('NOT_FOUND', `no job with id ${jobId}`);
          if (job.status !== 'needs_decision') throw new AppError('INVALID_STATE', `job ${jobId} is ${job.status}; only a job waiting for a decision (needs_decision) can be decided`);
          const target = job.task === 'osm_export' ? 'osm' : 'wikibase';
          const pending = await query(client, sql.latestDecision(jobId, target));
          const candidates = ((pending.rows[0] as { candidates: unknown[] } | undefined)?.candidates ?? []) as (ScoredCandidate | WikibaseCandidate)[];
          const decidedBy = { id: actor, name: principal.name ?? null };
          const why = body.comment?.trim() ? `: ${body.comment.trim()}` : '';
          let decision: OsmConflationDecision | WikibaseConflationDecision;
          let chosen: string | null = null;
          if (body.choice === 'create') {
            decision = { outcome: 'create', reason: `reviewer chose to create a new ${target === 'osm' ? 'element' : 'item'}${why}`, candidates: candidates as never[], decidedBy };
          } else if ('type' in body.choice) {
            const { type, id } = body.choice;
            if (target !== 'osm') throw new AppError('VALIDATION_FAILED', 'this is a Wikibase export: choose {"itemId": "Q…"} or "create"');
            if (!(candidates as ScoredCandidate[]).some((c) => c.type === type && c.id === id)) throw new AppError('VALIDATION_FAILED', `${type} ${id} is not one of the candidates of job ${jobId}`);
            // One feature per element (exports/conflation/assignment.ts): a reviewer cannot link an
            // element another feature already holds (its export record, or its export on the way).
            const holder = (await heldElements(client, [`${type}/${id}`], [jobId])).find((h) => h.featureId !== job.featureId);
            if (holder) throw new AppError('CONFLICT', `${type} ${id} is already the OSM element of feature ${holder.featureId}; choose another candidate or create a new element`);
            decision = { outcome: 'link', target: { type, id }, moveGeometry: body.moveGeometry, reason: `reviewer chose ${type} ${id}${body.moveGeometry ? ' and to move its geometry' : ''}${why}`, candidates: candidates as ScoredCandidate[], decidedBy };
            chosen = `${type}/${id}`;
          } else {
            const { itemId } = body.choice;
            if (target !== 'wikibase') throw new AppError('VALIDATION_FAILED', 'this is an OSM export: choose {"type", "id"} or "create"');
            if (!(candidates as WikibaseCandidate[]).some((c) => c.itemId === itemId)) throw new AppError('VALIDATION_FAILED', `${itemId} is not one of the candidates of job ${jobId}`);
            decision = { outcome: 'link', itemId, reason: `reviewer chose ${itemId}${why}`, candidates: candidates as WikibaseCandidate[], decidedBy };
            chosen = itemId;
          }
          if (body.moveGeometry && (target !== 'osm' || body.choice === 'create')) throw new AppError('VALIDATION_FAILED', 'moveGeometry applies only when an OSM element is chosen');
          await insertDecision(client, jobId, target, decision, chosen);
          await query(client, sql.requeueJob(jobId, actor, options.maxAttempts));
          const fresh = await query(client, sql.jobJson(jobId));
          return (fresh.rows[0] as { json: string }).json;
        },
        { actor },
      );
    },
  };
}

export type DecisionService = ReturnType<typeof createDecisionService>;
