import { runMain } from '../../../services/shared/config.js';
import { checkIdentityConfig, formatFinding } from './check.js';

/**
 * `npm run identity:check`: validates the rendered Kratos/Hydra configuration for the current environment.
 * Exit codes: 0 valid, 1 at least one finding (each printed with its file and key). Secrets are never printed.
 */
runMain(async () => {
  const findings = checkIdentityConfig(process.env);
  if (findings.length === 0) {
    console.log('identity config: kratos.yml, hydra.yml and identity.schema.json are valid for Ory v26.2.0');
    return;
  }
  for (const finding of findings) console.error(`FAIL ${formatFinding(finding)}`);
  console.error(`identity config: ${findings.length} problem(s)`);
  process.exitCode = 1;
});
