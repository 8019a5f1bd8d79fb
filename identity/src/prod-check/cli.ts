import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runMain } from '../../../services/shared/config.js';
import { runChecklist } from './checklist.js';

/**
 * `npm run identity:prod-check -- [--stack-file infra/Pulumi.<stack>.yaml] [--live] [--send-test-mail ops@example.org]`
 * The deployment items check the stack the Pulumi program declares with that stack file.
 * Prints PASS or FAIL per item of the production checklist, with the reason.
 * Exit codes: 0 every item passed, 1 at least one failed.
 */
runMain(async () => {
  const { values } = parseArgs({ options: { live: { type: 'boolean', default: false }, 'send-test-mail': { type: 'string' }, 'stack-file': { type: 'string' } } });
  const items = await runChecklist({
    env: process.env,
    repoRoot: fileURLToPath(new URL('../../../', import.meta.url)),
    live: values.live,
    ...(values['stack-file'] ? { stackFile: resolve(values['stack-file']) } : {}),
    ...(values['send-test-mail'] ? { testMailTo: values['send-test-mail'] } : {}),
  });
  for (const entry of items) console.log(`${entry.ok ? 'PASS' : 'FAIL'}  ${entry.name} — ${entry.detail}`);
  const failed = items.filter((i) => !i.ok).length;
  console.log(`${items.length} items: ${items.length - failed} passed, ${failed} failed`);
  if (failed > 0) process.exitCode = 1;
});
