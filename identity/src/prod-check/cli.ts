import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runMain } from '../../../services/shared/config.js';
import { runChecklist } from './checklist.js';

/**
 * `npm run identity:prod-check -- [--live] [--send-test-mail ops@example.org]`
 * Prints PASS or FAIL per item of the production checklist, with the reason.
 * Exit codes: 0 every item passed, 1 at least one failed.
 */
runMain(async () => {
  const { values } = parseArgs({ options: { live: { type: 'boolean', default: false }, 'send-test-mail': { type: 'string' } } });
  const items = await runChecklist({
    env: process.env,
    repoRoot: fileURLToPath(new URL('../../../', import.meta.url)),
    live: values.live,
    ...(values['send-test-mail'] ? { testMailTo: values['send-test-mail'] } : {}),
  });
  for (const entry of items) console.log(`${entry.ok ? 'PASS' : 'FAIL'}  ${entry.name} — ${entry.detail}`);
  const failed = items.filter((i) => !i.ok).length;
  console.log(`${items.length} items: ${items.length - failed} passed, ${failed} failed`);
  if (failed > 0) process.exitCode = 1;
});
