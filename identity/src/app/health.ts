import type { RequestHandler } from 'express';
import type { OryClients } from '../../../services/shared/ory/clients.js';

/**
 * GET /health/ready: 200 when Kratos and Hydra both answer their readiness endpoints (admin ports),
 * 503 otherwise, with one entry per dependency so an operator sees which one is down.
 */
export function createReadinessRoute(ory: Pick<OryClients, 'kratosMetadata' | 'hydraMetadata'>): RequestHandler {
  const probe = async (check: () => Promise<unknown>): Promise<'ok' | 'unavailable'> => {
    try {
      await check();
      return 'ok';
    } catch {
      return 'unavailable';
    }
  };
  return async (_req, res) => {
    const [kratos, hydra] = await Promise.all([probe(() => ory.kratosMetadata.isReady()), probe(() => ory.hydraMetadata.isReady())]);
    const checks = { self: 'ok' as const, kratos, hydra };
    const ready = kratos === 'ok' && hydra === 'ok';
    res.status(ready ? 200 : 503).json({ status: ready ? 'ok' : 'unavailable', checks });
  };
}
