import { parseEnv } from '../../shared/config.js';
import { ExportsEnvSchema, exportsSettingsFrom, type ExportsSettings } from '../src/exports/config.js';

/**
 * Export settings for tests, parsed from environment variables exactly as the API does, with a
 * licence that permits both targets (exports refuse to run without one) and a test User-Agent.
 */
export function testExportsSettings(env: Record<string, string | undefined> = {}): ExportsSettings {
  const defined = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined)) as Record<string, string>;
  return exportsSettingsFrom(parseEnv(ExportsEnvSchema, { EXPORT_DATA_LICENCE: 'CC0-1.0', EXPORT_USER_AGENT: 'feature-mapping-platform-tests/1.0', ...defined }));
}
