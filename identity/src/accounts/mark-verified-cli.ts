import { parseArgs } from 'node:util';
import { Configuration, IdentityApi } from '@ory/kratos-client';
import { ConfigError, runMain } from '../../../services/shared/config.js';
import { markExistingAddressesVerified } from './mark-verified.js';

/**
 * `npx tsx identity/src/accounts/mark-verified-cli.ts --before 2026-12-01T00:00:00Z [--dry-run]`, with
 * KRATOS_ADMIN_URL: marks the e-mail addresses of identities created before the instant as verified
 * (docs/identity.md, "Verified e-mail before editing"). Exit codes: 0 done, 1 Kratos failed, 2 usage.
 */
runMain(async () => {
  let values: { before?: string; 'dry-run'?: boolean };
  try {
    ({ values } = parseArgs({ options: { before: { type: 'string' }, 'dry-run': { type: 'boolean' } }, strict: true }));
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
  if (!values.before || Number.isNaN(Date.parse(values.before))) throw new ConfigError('--before <ISO instant> is required: identities created before it are marked verified (e.g. the upgrade time)');
  const adminUrl = process.env.KRATOS_ADMIN_URL;
  if (!adminUrl || !URL.canParse(adminUrl)) throw new ConfigError('KRATOS_ADMIN_URL must be the Kratos admin API URL, e.g. http://kratos-admin:4434');
  const identity = new IdentityApi(new Configuration({ basePath: adminUrl.replace(/\/+$/, ''), baseOptions: { timeout: 10_000, maxRedirects: 0 } }));
  const result = await markExistingAddressesVerified({ identity, createdBefore: new Date(values.before), dryRun: values['dry-run'] === true, log: (line) => console.log(line) });
  console.log(`${result.checked} identities checked, ${result.marked} ${values['dry-run'] ? 'would be' : ''} marked verified`.replace('  ', ' '));
});
