import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { ConfigError, runMain } from '../../../services/shared/config.js';
import { renderTemplate, SECRET_VARIABLES } from '../../../services/shared/identity-config/render.js';
import { CONFIG_DIR } from './config-dir.js';

/**
 * `npm run identity:render -- --out <dir>`: writes kratos.yml, hydra.yml and identity.schema.json for the
 * containers to mount (infra/ mounts <dir>/kratos.yml at /etc/config/kratos/kratos.yml and so on). The
 * files hold no secrets; it prints which variables each container needs in its environment.
 * Exit codes: 0 written, 2 usage or a missing variable (named).
 */
runMain(async () => {
  const { values } = parseArgs({ options: { out: { type: 'string' } } });
  if (!values.out) throw new ConfigError('usage: identity:render -- --out <directory>');
  const out = resolve(values.out);
  mkdirSync(out, { recursive: true, mode: 0o755 });
  for (const service of ['kratos', 'hydra'] as const) {
    const rendered = renderTemplate(service, process.env, CONFIG_DIR);
    writeFileSync(join(out, `${service}.yml`), `# rendered by npm run identity:render; no secrets in here\n${stringify(rendered)}`);
    const names = SECRET_VARIABLES[service].map((v) => `${v.containerEnv} (from ${v.env})`).join(', ');
    console.log(`${service}.yml written; the ${service} container needs ${names}`);
  }
  copyFileSync(join(CONFIG_DIR, 'identity.schema.json'), join(out, 'identity.schema.json'));
  console.log(`identity.schema.json copied to ${out}`);
});
