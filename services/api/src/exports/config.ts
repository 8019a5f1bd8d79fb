import { z } from 'zod';

/**
 * Environment variables of the QC side effects (exports and notices), as a zod shape fragment:
 * phase 2 spreads `exportsEnvShape` into the API's config schema and calls `checkExportsEnv` from its
 * superRefine, then `exportsSettingsFrom(parsed)` to get the structured settings these modules take.
 * Nothing here reads process.env. Every variable is documented in docs/qc.md.
 */
const optionalSecret = z.string().min(1).optional();
const emailList = z
  .string()
  .transform((raw) => raw.split(',').map((s) => s.trim()).filter((s) => s.length > 0))
  .pipe(z.array(z.email()));
const booleanFlag = z.enum(['true', 'false', '1', '0']).transform((v) => v === 'true' || v === '1');

export const DEFAULT_OSM_API_URL = 'https://master.apis.dev.openstreetmap.org';
export const DEFAULT_USER_AGENT = 'feature-mapping-platform/0.1 (QC exports)';

export const exportsEnvShape = {
  OSM_API_URL: z.url({ protocol: /^https?$/ }).default(DEFAULT_OSM_API_URL),
  OSM_ACCESS_TOKEN: optionalSecret,
  EXPORT_USER_AGENT: z.string().min(8).default(DEFAULT_USER_AGENT),
  EXPORT_HTTP_TIMEOUT_MS: z.coerce.number().int().min(100).max(300_000).default(15_000),
  WIKIBASE_URL: z.url({ protocol: /^https?$/ }).optional(),
  WIKIBASE_USERNAME: z.string().min(1).optional(),
  WIKIBASE_PASSWORD: optionalSecret,
  WIKIBASE_OAUTH2_TOKEN: optionalSecret,
  WIKIBASE_BOT: booleanFlag.default(false),
  WIKIBASE_LANGUAGE: z.string().regex(/^[a-z]{2,3}(-[a-z0-9]+)*$/).default('de'),
  WIKIBASE_PROPERTY_INSTANCE_OF: z.string().regex(/^P[1-9]\d*$/).default('P31'),
  WIKIBASE_PROPERTY_COORDINATES: z.string().regex(/^P[1-9]\d*$/).default('P625'),
  SMTP_URL: z.url({ protocol: /^smtps?$/ }).optional(),
  MAIL_FROM: z.string().min(3).default('Feature platform <noreply@localhost>'),
  REVIEWER_EMAILS: emailList.default([]),
  // The web app's public origin: the reviewer notice links to the item on its QC desk,
  // <WEB_PUBLIC_URL>/qc/{featureId}, unless QC_REVIEW_LINK names another page.
  WEB_PUBLIC_URL: z.url({ protocol: /^https?$/, error: 'the http(s) URL the web app is served on' }).default('http://localhost:4321'),
  QC_REVIEW_LINK: z
    .string()
    .regex(/^https?:\/\/.*\{featureId\}/, 'an http(s) URL containing {featureId}')
    .optional(),
  AGENCY_WEBHOOK_URL: z.url({ protocol: /^https?$/ }).optional(),
  AGENCY_WEBHOOK_SECRET: z.string().min(32, 'at least 32 characters').optional(),
  AGENCY_EMAIL: emailList.optional(),
};

export type ExportsEnv = z.output<z.ZodObject<typeof exportsEnvShape>>;

/** Cross-variable rules; call from the API schema's superRefine (the fragment cannot carry them itself). */
export function checkExportsEnv(env: ExportsEnv, ctx: z.RefinementCtx): void {
  const issue = (path: keyof ExportsEnv, message: string) => ctx.addIssue({ code: 'custom', path: [path], message });
  if (env.AGENCY_WEBHOOK_URL && !env.AGENCY_WEBHOOK_SECRET) issue('AGENCY_WEBHOOK_SECRET', 'required when AGENCY_WEBHOOK_URL is set');
  if (env.WIKIBASE_USERNAME && !env.WIKIBASE_PASSWORD) issue('WIKIBASE_PASSWORD', 'required when WIKIBASE_USERNAME is set');
  if (env.WIKIBASE_OAUTH2_TOKEN && env.WIKIBASE_USERNAME) issue('WIKIBASE_OAUTH2_TOKEN', 'use either WIKIBASE_OAUTH2_TOKEN or WIKIBASE_USERNAME/PASSWORD, not both');
}

/** The stand-alone schema (tests, CLIs); the API composes the fragment into its own schema instead. */
export const ExportsEnvSchema = z.object(exportsEnvShape).superRefine(checkExportsEnv);

export interface OsmSettings {
  apiUrl: string;
  accessToken: string | undefined;
}
export type WikibaseCredentials = { username: string; password: string } | { oauth2Token: string };
export interface WikibaseSettings {
  instanceUrl: string | undefined;
  credentials: WikibaseCredentials | undefined;
  bot: boolean;
  language: string;
  instanceOfProperty: string;
  coordinatesProperty: string;
}
export interface MailSettings {
  smtpUrl: string | undefined;
  from: string;
}
export interface AgencySettings {
  webhookUrl: string | undefined;
  webhookSecret: string | undefined;
  email: string[] | undefined;
}
export interface ExportsSettings {
  userAgent: string;
  httpTimeoutMs: number;
  osm: OsmSettings;
  wikibase: WikibaseSettings;
  mail: MailSettings;
  reviewers: { emails: string[]; reviewLink: string };
  agency: AgencySettings;
}

export function exportsSettingsFrom(env: ExportsEnv): ExportsSettings {
  let credentials: WikibaseCredentials | undefined;
  if (env.WIKIBASE_OAUTH2_TOKEN) credentials = { oauth2Token: env.WIKIBASE_OAUTH2_TOKEN };
  else if (env.WIKIBASE_USERNAME && env.WIKIBASE_PASSWORD) credentials = { username: env.WIKIBASE_USERNAME, password: env.WIKIBASE_PASSWORD };
  return {
    userAgent: env.EXPORT_USER_AGENT,
    httpTimeoutMs: env.EXPORT_HTTP_TIMEOUT_MS,
    osm: { apiUrl: env.OSM_API_URL.replace(/\/+$/, ''), accessToken: env.OSM_ACCESS_TOKEN },
    wikibase: {
      instanceUrl: env.WIKIBASE_URL?.replace(/\/+$/, ''),
      credentials,
      bot: env.WIKIBASE_BOT,
      language: env.WIKIBASE_LANGUAGE,
      instanceOfProperty: env.WIKIBASE_PROPERTY_INSTANCE_OF,
      coordinatesProperty: env.WIKIBASE_PROPERTY_COORDINATES,
    },
    mail: { smtpUrl: env.SMTP_URL, from: env.MAIL_FROM },
    reviewers: { emails: env.REVIEWER_EMAILS, reviewLink: env.QC_REVIEW_LINK ?? `${env.WEB_PUBLIC_URL.replace(/\/+$/, '')}/qc/{featureId}` },
    agency: { webhookUrl: env.AGENCY_WEBHOOK_URL, webhookSecret: env.AGENCY_WEBHOOK_SECRET, email: env.AGENCY_EMAIL },
  };
}
