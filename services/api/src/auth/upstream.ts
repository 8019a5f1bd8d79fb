import { AppError } from '../../../shared/errors.js';

/**
 * A failed call to Ory (Kratos or Hydra) as an AppError that is safe to log. The original AxiosError is
 * never kept as the cause: it carries the request config, and with it the forwarded Kratos cookie or the
 * token being introspected. Only describeError()'s summary (method, path, status, code) survives.
 * Asynchronous because the Ory clients' module (and axios under it) is loaded only by an API that
 * calls Ory (auth/index.ts), and by the time a call has failed it is loaded already.
 */
export async function oryFailure(code: 'SERVICE_UNAVAILABLE' | 'UPSTREAM_FAILED', message: string, error: unknown): Promise<AppError> {
  const { describeError } = await import('../../../shared/ory/clients.js');
  const summary = describeError(error);
  const cause = new Error(`${String(summary.method ?? '')} ${String(summary.path ?? '')} failed: ${String(summary.status ?? summary.code ?? '')} ${String(summary.message ?? '')}`.trim());
  return new AppError(code, message, { statusCode: code === 'UPSTREAM_FAILED' ? 502 : 503, cause });
}
