import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * GeoServer's side of "WFS-T writes are tied to platform users" (docs/infra.md):
 *
 * 1. An HTTP-header authentication filter (GeoServer's "HTTP Header" filter, class
 *    GeoServerRequestHeaderAuthenticationFilter) takes the user from X-Geodata-User and the roles from
 *    X-Geodata-Role. The proxy removes both from every client request and sets them only from the
 *    API's forward-auth answer; GeoServer is reachable by nothing but the proxy and the provisioning
 *    job (its own network), so the headers are trusted only from the proxy.
 * 2. A filter chain for the OWS services (WFS, WMS, OWS, per workspace too) runs that filter first,
 *    then Basic (GeoServer's own accounts), then anonymous.
 * 3. The PostGIS store gets the JDBC "Session startup SQL" with ${GSUSER} (provision.ts), so the
 *    history trigger (migration 013) names the user behind each WFS-T write.
 *
 * GeoServer's REST API cannot configure authentication filters or chains (the vendored contract
 * security.yaml has only the master password, self password and ACLs), so 1 and 2 are files in the
 * data directory, written by the provisioning job (which mounts it) and loaded by POST /rest/reload
 * ("reloads the configuration from disk", reload.yaml) or GeoServer's next start.
 */

export const HEADER_FILTER_NAME = 'geodata-proxy';
export const OWS_CHAIN_NAME = 'geodata-ows';
/** GeoServer matches chains in order; this one is put first so it wins over `default` (/**). */
export const OWS_CHAIN_PATHS = ['/wfs/**', '/wfs', '/ows/**', '/ows', '/wms/**', '/wms', '/*/wfs', '/*/ows', '/*/wms', '/*/*/wfs', '/*/*/ows', '/*/*/wms'];

export interface HeaderAuthentication {
  userHeader: string;
  roleHeader: string;
}

export function headerFilterXml(auth: HeaderAuthentication): string {
  return [
    '<requestHeaderAuthentication>',
    `  <id>${HEADER_FILTER_NAME}</id>`,
    `  <name>${HEADER_FILTER_NAME}</name>`,
    '  <className>org.geoserver.security.filter.GeoServerRequestHeaderAuthenticationFilter</className>',
    // Roles from the header (the API's answer), not from a GeoServer user/group service: platform
    // users have no GeoServer account.
    '  <roleSource class="org.geoserver.security.config.PreAuthenticatedUserNameFilterConfig$PreAuthenticatedUserNameRoleSource">Header</roleSource>',
    `  <principalHeaderAttribute>${auth.userHeader}</principalHeaderAttribute>`,
    `  <rolesHeaderAttribute>${auth.roleHeader}</rolesHeaderAttribute>`,
    '</requestHeaderAuthentication>',
    '',
  ].join('\n');
}

export function owsChainXml(): string {
  return [
    `    <filters name="${OWS_CHAIN_NAME}" class="org.geoserver.security.ServiceLoginFilterChain" interceptorName="interceptor" exceptionTranslationName="exception" path="${OWS_CHAIN_PATHS.join(',')}" disabled="false" allowSessionCreation="false" ssl="false" matchHTTPMethod="false">`,
    `      <filter>${HEADER_FILTER_NAME}</filter>`,
    '      <filter>basic</filter>',
    '      <filter>anonymous</filter>',
    '    </filters>',
  ].join('\n');
}

const CHAIN_BLOCK = new RegExp(`\\s*<filters name="${OWS_CHAIN_NAME}"[^>]*>[\\s\\S]*?</filters>`);

/** security/config.xml with the OWS chain first in <filterChain> (replaced when it differs). */
export function withOwsChain(configXml: string): string {
  const withoutOurs = configXml.replace(CHAIN_BLOCK, '');
  const open = /<filterChain>/.exec(withoutOurs);
  if (!open) throw new Error('security/config.xml has no <filterChain>: is this a GeoServer data directory?');
  const at = open.index + open[0].length;
  return `${withoutOurs.slice(0, at)}\n${owsChainXml()}${withoutOurs.slice(at)}`;
}

/**
 * Writes the filter and the chain into a GeoServer data directory; returns what changed (empty when
 * everything was already in place). GeoServer must have initialised the directory (security/config.xml).
 */
export function ensureHeaderAuthentication(dataDir: string, auth: HeaderAuthentication): string[] {
  const changes: string[] = [];
  const configPath = join(dataDir, 'security', 'config.xml');
  if (!existsSync(configPath)) throw new Error(`${configPath} does not exist: GeoServer has not initialised its data directory (GEOSERVER_DATA_DIR)`);
  const filterPath = join(dataDir, 'security', 'filter', HEADER_FILTER_NAME, 'config.xml');
  const filter = headerFilterXml(auth);
  if (!existsSync(filterPath) || readFileSync(filterPath, 'utf8') !== filter) {
    mkdirSync(dirname(filterPath), { recursive: true });
    writeFileSync(filterPath, filter, { mode: 0o644 });
    changes.push(`wrote authentication filter ${HEADER_FILTER_NAME} (${auth.userHeader}, ${auth.roleHeader})`);
  }
  const current = readFileSync(configPath, 'utf8');
  const wanted = withOwsChain(current);
  if (wanted !== current) {
    writeFileSync(configPath, wanted);
    changes.push(`put filter chain ${OWS_CHAIN_NAME} first (${HEADER_FILTER_NAME}, basic, anonymous)`);
  }
  return changes;
}
