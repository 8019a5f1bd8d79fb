import type { Target } from '../services/shared/targets.js';
import type { ProxyRoute } from './caddy.js';
import { isPreviewTarget, isWithinDomain, type Domains } from './config.js';
import { siteHostOf } from './stack/targets.js';

/** Where Kratos' self-service POSTs go first (identity/src/app/kratos-gate.ts GATED_PATH and GATE_PREFIX). */
export const KRATOS_GATE = { path: '/self-service/', prefix: '/kratos-gate' } as const;

/**
 * Upstream names and ports on the stack's networks, in one place: the containers' aliases, the
 * proxy routes and the services' URLs all come from here.
 */
export const UPSTREAMS = {
  api: { host: 'api', port: 8080 },
  webhook: { host: 'webhook', port: 9321 },
  geoserver: { host: 'geoserver', port: 8080 },
  login: { host: 'login', port: 3000 },
  accountsUi: { host: 'accounts-ui', port: 4455 },
  kratosPublic: { host: 'kratos', port: 4433 },
  hydraPublic: { host: 'hydra', port: 4444 },
  /**
   * The builds' only way out (infra/egress): an HTTP CONNECT proxy on the build networks that lets
   * through the package registry, and the git hosts for the builders' own fetch.
   */
  egress: { host: 'egress', port: 3128 },
} as const;

/** Admin listeners: reachable only on the internal admin network, under these aliases. */
export const ADMIN_UPSTREAMS = {
  kratosAdmin: { host: 'kratos-admin', port: 4434 },
  hydraAdmin: { host: 'hydra-admin', port: 4445 },
} as const;

/**
 * GeoServer writes (WFS-T) are tied to platform users: the proxy asks the API who the caller is
 * (services/api/src/auth/forward-route.ts) and hands GeoServer the answer in these headers, which its
 * HTTP-header authentication filter trusts (infra/geoserver/security.ts).
 */
export const GEOSERVER_IDENTITY = {
  userHeader: 'X-Geodata-User',
  roleHeader: 'X-Geodata-Role',
  forwardAuthUri: '/api/auth/forward',
} as const;

export const ADMIN_PORTS = [ADMIN_UPSTREAMS.kratosAdmin.port, ADMIN_UPSTREAMS.hydraAdmin.port];

const at = (u: { host: string; port: number }): string => `${u.host}:${u.port}`;

/** Every public route of the platform: the services' domains, then one per deploy target. */
export function proxyRoutes(domains: Domains, targets: Target[], options: { selfServiceUi: boolean }): ProxyRoute[] {
  const routes: ProxyRoute[] = [
    { domain: domains.api, upstream: at(UPSTREAMS.api), description: 'Feature API' },
    {
      domain: domains.geo,
      upstream: at(UPSTREAMS.geoserver),
      // GeoServer's REST configuration API and web admin are operator tools, like /admin.
      internalOnlyPaths: ['/geoserver/rest*', '/geoserver/gwc/rest*', '/geoserver/web*'],
      description: 'GeoServer (WMS 1.3.0, WFS-T; writes authenticated by the API)',
      forwardAuth: {
        upstream: at(UPSTREAMS.api),
        uri: GEOSERVER_IDENTITY.forwardAuthUri,
        // Every POST: WFS-T may arrive on /wfs, /ows and the per-workspace and per-layer services.
        writePaths: ['/geoserver*'],
        identityHeaders: [GEOSERVER_IDENTITY.userHeader, GEOSERVER_IDENTITY.roleHeader],
      },
    },
    { domain: domains.auth, upstream: at(UPSTREAMS.login), description: 'Login, consent and logout app' },
    {
      domain: domains.kratos,
      upstream: at(UPSTREAMS.kratosPublic),
      description: 'Ory Kratos public API (admin API 4434 is never routed); every self-service submission through the login app\'s limiters',
      gate: { path: KRATOS_GATE.path, upstream: at(UPSTREAMS.login), prefix: KRATOS_GATE.prefix },
    },
    { domain: domains.hydra, upstream: at(UPSTREAMS.hydraPublic), description: 'Ory Hydra public API and OIDC issuer (admin API 4445 is never routed)' },
    { domain: domains.webhook, upstream: at(UPSTREAMS.webhook), description: 'Deployment webhook server' },
  ];
  if (options.selfServiceUi) {
    routes.push({ domain: domains.accounts, upstream: at(UPSTREAMS.accountsUi), description: 'Kratos self-service UI' });
  }
  for (const target of targets) {
    routes.push({
      domain: target.domain,
      // Each target's site container, on its own network, on the target's port and nothing else.
      upstream: `${siteHostOf(target)}:${target.port}`,
      description: `Branch site ${target.key} (deploy target, port ${target.port})`,
    });
  }
  return routes;
}

/**
 * The platform's own origins: the only ones CORS with credentials lets call the API and GeoServer from
 * a browser. Preview sites (untrusted team code) are never among them, nor any site outside the
 * session cookie domain.
 */
/** A site of the platform itself (main, develop): not a preview, on the session cookie's domain. */
export function isPlatformSite(target: Target, parentDomain: string): boolean {
  return !isPreviewTarget(target) && isWithinDomain(target.domain, parentDomain);
}

/**
 * What a target's site is told (its `SITE_ENV_*`, infra/sites/site-env.ts), as the web app reads it
 * (services/web/src/config.ts): every site learns where the API is and its own public URL; a platform
 * site also where sign-in happens (Kratos' public API for the route guard, its browser login),
 * where signing out does (Hydra's end-session endpoint) and GeoServer's WMS. A preview site gets no sign-in setting: its users' sessions never reach it.
 * The site's server reaches these names through the proxy (the proxy carries them as aliases on the
 * site's network, infra/stack/edge.ts), so the server-side and the browser's calls take one path.
 */
export function siteSettings(domains: Domains, target: Target, parentDomain: string): Record<string, string> {
  const common = { API_PUBLIC_URL: `https://${domains.api}`, PUBLIC_BASE_URL: `https://${target.domain}` };
  if (!isPlatformSite(target, parentDomain)) return common;
  return {
    ...common,
    KRATOS_PUBLIC_URL: `https://${domains.kratos}`,
    LOGIN_URL: `https://${domains.kratos}/self-service/login/browser`,
    // "Abmelden" ends the Hydra login and the Kratos session there (the logout app, docs/identity.md).
    LOGOUT_URL: `https://${domains.hydra}/oauth2/sessions/logout`,
    WMS_URL: `https://${domains.geo}/geoserver/wms`,
  };
}

/** The public names a site's server calls (siteSettings), which the proxy answers on that site's network. */
export function siteUpstreamNames(domains: Domains, target: Target, parentDomain: string): string[] {
  return isPlatformSite(target, parentDomain) ? [domains.api, domains.kratos] : [domains.api];
}

export function platformOrigins(domains: Domains, targets: Target[], parentDomain: string): string[] {
  const trustedSites = targets.filter((t) => isPlatformSite(t, parentDomain)).map((t) => t.domain);
  const hosts = [domains.api, domains.geo, domains.auth, domains.accounts, ...trustedSites];
  return [...new Set(hosts.map((h) => `https://${h.toLowerCase()}`))];
}
