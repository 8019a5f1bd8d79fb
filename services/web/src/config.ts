import { z } from 'zod';
import { loadBasemaps, type Basemap } from './basemaps.js';

/**
 * The site's runtime configuration, read from the environment when the server starts — never at build
 * time, so one build serves every deploy target. A bad value stops the server with a message naming
 * the variable. Nothing else in the site reads process.env.
 */
const httpUrl = (what: string) => z.url({ protocol: /^https?$/, error: `an http(s) URL of ${what}` });

const WebEnvSchema = z.object({
  NODE_ENV: z.enum(['development', 'test', 'production']).default('development'),
  /** Where the browser reaches the API (CORS_ORIGINS of the API must list this site's origin). */
  API_PUBLIC_URL: httpUrl('the feature API as the browser reaches it').default('http://localhost:8080'),
  /** Where this server reaches the API (server-rendered pages, development sign-in); defaults to API_PUBLIC_URL. */
  API_URL: httpUrl('the feature API as this server reaches it').optional(),
  /** Ory Kratos public API: whoami for the route guard. Unset: only the development sign-in exists. */
  KRATOS_PUBLIC_URL: httpUrl('the Kratos public API').optional(),
  /** Where the browser starts a login (Kratos' self-service login for browsers, or the login app). */
  LOGIN_URL: httpUrl('the login start page').optional(),
  /**
   * The platform's sign-out page, where "Abmelden" sends the browser: Hydra's end-session endpoint
   * (`…/oauth2/sessions/logout`), whose logout app ends the Hydra login and the Kratos session, so
   * every site and OAuth2 client is signed out. Unset: "Abmelden" ends the Kratos session alone.
   */
  LOGOUT_URL: httpUrl('the sign-out page').optional(),
  /** This site's public base URL, for return URLs (never taken from the Host header). */
  PUBLIC_BASE_URL: httpUrl('this site').default('http://localhost:4321'),
  /** Background maps: config/basemaps.yaml (or BASEMAPS_FILE); BASEMAP_URL adds one XYZ source in front (src/basemaps.ts). */
  BASEMAPS_FILE: z.string().min(1).optional(),
  BASEMAP_URL: z.string().optional(),
  BASEMAP_ATTRIBUTION: z.string().optional(),
  /** GeoServer WMS endpoint for the optional overlay (e.g. https://geo.example.org/geoserver/wms). */
  WMS_URL: httpUrl('a WMS endpoint').optional(),
  WMS_LAYERS: z.string().default('features:features'),
  /**
   * A Nominatim-compatible geocoder for the map's place search (its /search?format=jsonv2), e.g.
   * https://nominatim.openstreetmap.org. Unset: no place search. Asked only when a search is submitted
   * (Nominatim's usage policy forbids search-as-you-type).
   */
  GEOCODER_URL: httpUrl('a Nominatim-compatible geocoder').optional(),
  GEOCODER_ATTRIBUTION: z.string().min(1).default('© OpenStreetMap contributors (Nominatim)'),
  /** The development sign-in (/login?as=role&sub=name); always off with NODE_ENV=production. */
  DEV_SIGNIN: z.enum(['true', 'false']).default('true'),
});

export interface WebConfig {
  production: boolean;
  apiPublicUrl: string;
  apiUrl: string;
  kratosPublicUrl: string | undefined;
  loginUrl: string | undefined;
  logoutUrl: string | undefined;
  publicBaseUrl: string;
  /** The switcher's background maps, the default first. */
  basemaps: Basemap[];
  wms: { url: string; layers: string } | undefined;
  geocoder: { url: string; attribution: string } | undefined;
  devSignIn: boolean;
}

const strip = (url: string) => url.replace(/\/+$/, '');

export function loadWebConfig(env: Record<string, string | undefined> = process.env): WebConfig {
  const result = WebEnvSchema.safeParse(env);
  if (!result.success) {
    const problems = result.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ');
    throw new Error(`invalid web configuration: ${problems}`);
  }
  const parsed = result.data;
  const production = parsed.NODE_ENV === 'production';
  return {
    production,
    apiPublicUrl: strip(parsed.API_PUBLIC_URL),
    apiUrl: strip(parsed.API_URL ?? parsed.API_PUBLIC_URL),
    kratosPublicUrl: parsed.KRATOS_PUBLIC_URL,
    loginUrl: parsed.LOGIN_URL,
    logoutUrl: parsed.LOGOUT_URL,
    publicBaseUrl: strip(parsed.PUBLIC_BASE_URL),
    basemaps: loadBasemaps(env),
    wms: parsed.WMS_URL ? { url: parsed.WMS_URL, layers: parsed.WMS_LAYERS } : undefined,
    geocoder: parsed.GEOCODER_URL ? { url: strip(parsed.GEOCODER_URL), attribution: parsed.GEOCODER_ATTRIBUTION } : undefined,
    devSignIn: !production && parsed.DEV_SIGNIN === 'true',
  };
}

let cached: WebConfig | undefined;
/** Parsed on first use in the server process (the standalone server has no separate boot hook). */
export function webConfig(): WebConfig {
  cached ??= loadWebConfig();
  return cached;
}
