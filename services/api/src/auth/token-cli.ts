/**
 * `npm run token -- --role reviewer --sub alice [--expires 12h] [--email a@example.org] [--name Alice]`
 * Prints a token signed with the development key, which the locally started API accepts (it is used
 * only when AUTH_JWKS_URL is unset). Exit codes: 0 printed, 2 usage error, 1 anything else.
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { parseEnv, runMain, ConfigError } from '../../../shared/config.js';
import { loadOrCreateDevKeys } from './dev-keys.js';
import { ROLES } from '../../../shared/principal.js';

const Env = z.object({
  DATA_DIR: z.string().default('./data'),
  NODE_ENV: z.string().default('development'),
  AUTH_JWKS_URL: z.string().optional(),
});

runMain(async () => {
  const env = parseEnv(Env);
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        role: { type: 'string', default: 'contributor' },
        sub: { type: 'string' },
        expires: { type: 'string', default: '12h' },
        email: { type: 'string' },
        name: { type: 'string' },
      },
      strict: true,
    }));
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
  if (!values.sub) throw new ConfigError('--sub <user id> is required');
  if (!(ROLES as readonly string[]).includes(values.role)) throw new ConfigError(`--role must be one of ${ROLES.join(', ')}`);
  if (!/^\d+[smhd]$/.test(values.expires)) throw new ConfigError('--expires takes a duration like 30m, 12h or 7d');
  if (env.NODE_ENV === 'production') throw new ConfigError('development tokens are refused with NODE_ENV=production');
  if (env.AUTH_JWKS_URL) console.error('note: AUTH_JWKS_URL is set, so an API started with this environment will not accept this token');
  const keys = await loadOrCreateDevKeys(env.DATA_DIR);
  // A development token stands for a complete sign-in, second factor included (acr aal2, auth/assurance.ts).
  const claims: { sub: string; role: string; acr: string; email?: string; name?: string } = { sub: values.sub, role: values.role, acr: 'aal2' };
  if (values.email) claims.email = values.email;
  if (values.name) claims.name = values.name;
  console.log(await keys.sign(claims, values.expires));
});
