import { parseArgs } from 'node:util';
import { z } from 'zod';
import { parseEnv, runMain } from '../../../services/shared/config.js';
import { createOryClients } from '../../../services/shared/ory/clients.js';
import { loadClientDeclarations, syncClients } from './sync.js';

/**
 * `npm run identity:clients -- [--file identity/config/clients.yaml] [--dry-run]`
 * Creates or updates the declared OAuth2 clients in Hydra (HYDRA_ADMIN_URL). A generated client secret
 * is printed once, on creation; store it in the client's secret store right away.
 * Exit codes: 0 done, 1 Hydra failed, 2 usage or invalid file/environment.
 */
runMain(async () => {
  const { values } = parseArgs({ options: { file: { type: 'string', default: 'identity/config/clients.yaml' }, 'dry-run': { type: 'boolean', default: false } } });
  const env = parseEnv(z.object({ HYDRA_ADMIN_URL: z.url() }));
  const declarations = loadClientDeclarations(values.file, process.env);
  const { oauth2 } = createOryClients({ kratosPublicUrl: 'http://unused.invalid', kratosAdminUrl: 'http://unused.invalid', hydraAdminUrl: env.HYDRA_ADMIN_URL });
  const outcomes = await syncClients(oauth2, declarations, { dryRun: values['dry-run'] });
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
