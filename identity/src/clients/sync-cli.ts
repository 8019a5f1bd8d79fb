import { parseArgs } from 'node:util';
import { z } from 'zod';
import { parseEnv, runMain } from '../../../services/shared/config.js';
import { createOryClients } from '../../../services/shared/ory/clients.js';
import { RetryError } from '../../../services/shared/retry.js';
import { describeHydraFailure, loadClientDeclarations, syncClients } from './sync.js';

/**
 * `npm run identity:clients -- [--file identity/config/clients.yaml] [--dry-run]`
 * Creates or updates the declared OAuth2 clients in Hydra (HYDRA_ADMIN_URL). A generated client secret
 * is printed once, on creation; store it in the client's secret store right away.
 *
 * Hydra may still be starting (the stack's clients-sync job runs right after it): a refused connection,
 * a timeout or a 5xx is tried again with exponential backoff and jitter for up to
 * CLIENTS_SYNC_DEADLINE_SECONDS (default 120; 0 = one attempt); a 4xx fails at once.
 * Exit codes: 0 done, 1 Hydra failed (refused the request, or did not answer before the deadline),
 * 2 usage or invalid file/environment.
 */
runMain(async () => {
  const { values } = parseArgs({ options: { file: { type: 'string', default: 'identity/config/clients.yaml' }, 'dry-run': { type: 'boolean', default: false } } });
  const env = parseEnv(z.object({ HYDRA_ADMIN_URL: z.url(), CLIENTS_SYNC_DEADLINE_SECONDS: z.coerce.number().int().min(0).max(3600).default(120) }));
  const declarations = loadClientDeclarations(values.file, process.env);
  const { oauth2 } = createOryClients({ kratosPublicUrl: 'http://unused.invalid', kratosAdminUrl: 'http://unused.invalid', hydraAdminUrl: env.HYDRA_ADMIN_URL });
  const deadlineMs = env.CLIENTS_SYNC_DEADLINE_SECONDS * 1000;
  let outcomes;
  try {
    outcomes = await syncClients(oauth2, declarations, {
      dryRun: values['dry-run'],
      retry: {
        deadlineMs,
        onRetry: ({ attempt, delayMs, error }) => console.error(`clients-sync: Hydra not ready (${describeHydraFailure(error)}); attempt ${attempt + 1} in ${(delayMs / 1000).toFixed(1)} s`),
      },
    });
  } catch (error) {
    // Only the origin: the URL's user part could carry credentials.
    const hydra = new URL(env.HYDRA_ADMIN_URL).origin;
    const why =
      error instanceof RetryError
        ? `did not answer within CLIENTS_SYNC_DEADLINE_SECONDS=${env.CLIENTS_SYNC_DEADLINE_SECONDS} (${error.attempts} attempts in ${(error.elapsedMs / 1000).toFixed(1)} s; last: ${describeHydraFailure(error.lastError)})`
        : describeHydraFailure(error);
    console.error(`clients-sync failed: Hydra admin API at ${hydra} ${why}`);
    process.exitCode = 1;
    return;
  }
  for (const outcome of outcomes) {
    if (outcome.action === 'created') {
      console.log(`created   ${outcome.clientId}${values['dry-run'] ? ' (dry run)' : ''}`);
      if (outcome.clientSecret) console.log(`          client_secret (shown once, store it now): ${outcome.clientSecret}`);
    } else if (outcome.action === 'updated') {
      console.log(`updated   ${outcome.clientId} (${outcome.fields.join(', ')})${values['dry-run'] ? ' (dry run)' : ''}`);
    } else {
      console.log(`unchanged ${outcome.clientId}`);
    }
  }
});
