import { ConfigError } from '../../services/shared/config.js';

/** What the site process may not be given through SITE_ENV_: what the supervisor sets, and what changes how node itself runs. */
const RESERVED = /^(PATH|NODE_ENV|HOME|PORT|HOST|USER|LOGNAME|NODE_OPTIONS|NODE_PATH|LD_[A-Z0-9_]*)$/;

/** The site's own variables: `SITE_ENV_<NAME>=value` → `<NAME>=value`. A reserved or malformed name stops the start (exit 2). */
export function siteEnvOf(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(env)) {
    if (!key.startsWith('SITE_ENV_') || value === undefined) continue;
    const name = key.slice('SITE_ENV_'.length);
    if (!/^[A-Z][A-Z0-9_]{0,63}$/.test(name) || RESERVED.test(name)) {
      throw new ConfigError(`${key}: a site variable must be an upper-case name other than ${RESERVED.source}`);
    }
    out[name] = value;
  }
  return out;
}
