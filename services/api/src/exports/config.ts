import { z } from 'zod';
import { ConfigError } from '../../../shared/config.js';
import { DEFAULT_CONFLATION_QUALITY_FILE, autoUploadRefusal, loadConflationQuality } from './conflation-quality.js';
import { DEFAULT_OSM_TAG_MAPPING_FILE, loadOsmTagMapping, type OsmTagMapping } from './osm-tag-mapping.js';

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
/** Without EXPORT_CONTACT the User-Agent names where the software lives; production requires a contact. */
export const DEFAULT_USER_AGENT = 'feature-mapping-platform/0.1 (QC exports; +https://wiki.openstreetmap.org/wiki/Import/Guidelines)';
export const userAgentWithContact = (contact: string) => `feature-mapping-platform/0.1 (QC exports; contact: ${contact})`;
/** The production servers: writing there is an import (OSM) or a bot's edit (Wikidata). */
export const PRODUCTION_OSM_HOSTS = ['api.openstreetmap.org', 'www.openstreetmap.org', 'openstreetmap.org'];
export const PRODUCTION_WIKIBASE_HOSTS = ['www.wikidata.org', 'wikidata.org'];
const hostOf = (url: string | undefined) => {
  try {
    return url ? new URL(url).hostname.toLowerCase() : '';
  } catch {
    return '';
  }
};
export const isProductionOsm = (url: string) => PRODUCTION_OSM_HOSTS.includes(hostOf(url));
export const isProductionWikibase = (url: string | undefined) => PRODUCTION_WIKIBASE_HOSTS.includes(hostOf(url));

export const exportsEnvShape = {
  OSM_API_URL: z.url({ protocol: /^https?$/ }).default(DEFAULT_OSM_API_URL),
  OSM_ACCESS_TOKEN: optionalSecret,
  // A contact (e-mail or page) for the OSM and Wikidata operators; part of the default User-Agent.
  EXPORT_CONTACT: z.string().min(3).max(200).optional(),
  EXPORT_USER_AGENT: z.string().min(8).optional(),
  EXPORT_HTTP_TIMEOUT_MS: z.coerce.number().int().min(100).max(300_000).default(15_000),
  WIKIBASE_URL: z.url({ protocol: /^https?$/ }).optional(),
  WIKIBASE_USERNAME: z.string().min(1).optional(),
  WIKIBASE_PASSWORD: optionalSecret,
  WIKIBASE_OAUTH2_TOKEN: optionalSecret,
  WIKIBASE_BOT: booleanFlag.default(false),
  WIKIBASE_LANGUAGE: z.string().regex(/^[a-z]{2,3}(-[a-z0-9]+)*$/).default('de'),
  WIKIBASE_PROPERTY_INSTANCE_OF: z.string().regex(/^P[1-9]\d*$/).default('P31'),
  WIKIBASE_PROPERTY_COORDINATES: z.string().regex(/^P[1-9]\d*$/).default('P625'),
  // Conflation (docs/qc.md, "Conflation"): look for existing objects before the first write.
  OSM_CONFLATION: booleanFlag.default(true),
  OVERPASS_URL: z.url({ protocol: /^https?$/ }).optional(),
  OSM_CONFLATION_SOURCE: z.enum(['overpass', 'map']).optional(),
  OSM_CONFLATION_POINT_RADIUS_M: z.coerce.number().min(1).max(500).default(30),
  OSM_CONFLATION_NAME_STRONG: z.coerce.number().min(0.5).max(1).default(0.8),
  OSM_CONFLATION_NAME_WEAK: z.coerce.number().min(0).max(1).default(0.5),
  // One-to-one assignment: scores closer than this are a tie for a reviewer (docs/qc.md).
  OSM_CONFLATION_AMBIGUITY_MARGIN: z.coerce.number().min(0).max(0.5).default(0.05),
  OSM_TAG_MAPPING_FILE: z.string().min(1).default(DEFAULT_OSM_TAG_MAPPING_FILE),
  // Import conventions: changeset tags and the edit rate.
  OSM_CHANGESET_COMMENT: z.string().min(1).max(255).default('{kategorie} "{name}" (feature {featureId}, version {version})'),
  // The dataset the import takes from (not survey: nobody surveyed it for OSM).
  OSM_CHANGESET_SOURCE: z.string().min(1).max(255).default('municipal feature register (city feature platform)'),
  // The import's documentation page on the OSM wiki (changeset tag url=*), and the dedicated import
  // account's display name; both required for the production API.
  OSM_IMPORT_PAGE_URL: z.url({ protocol: /^https$/ }).optional(),
  OSM_IMPORT_ACCOUNT: z.string().min(1).max(255).optional(),
  OSM_CHANGESET_HASHTAGS: z.string().regex(/^#[\w-]+(;#[\w-]+)*$/, 'hashtags like #city-import;#fmp').default('#fmp-import'),
  OSM_CHANGESET_IMPORT: booleanFlag.default(true),
  // Changes (elements created, modified or deleted), not features, per hour across all batches.
  OSM_MAX_EDITS_PER_HOUR: z.coerce.number().int().min(1).max(100_000).default(500),
  // OSM closes a changeset at 10 000 changes; a batch fills changesets up to this many.
  // Categories whose exports go up without a reviewer confirming the plan (comma-separated). Empty:
  // every plan is reviewed. List a category only when the labelled set shows precision >= 0.98 for
  // it on at least 20 of its cases (docs/qc.md "Nothing reaches OSM unseen").
  OSM_AUTO_UPLOAD_CATEGORIES: z
    .string()
    .transform((raw) => raw.split(',').map((s) => s.trim()).filter((s) => s.length > 0))
    .default([]),
  // After a Wikibase export, an OSM export of the same approval writes wikidata=<item> on the element
  // (a reviewed plan like any other), so the link goes both ways from the first approval.
  OSM_WIKIDATA_LINK_BACK: booleanFlag.default(true),
  OSM_CONFLATION_QUALITY_FILE: z.string().min(1).default(DEFAULT_CONFLATION_QUALITY_FILE),
  OSM_MAX_CHANGES_PER_CHANGESET: z.coerce.number().int().min(10).max(10_000).default(10_000),
  // One changeset per batch of nearby approvals: at most this many features, all within this
  // distance of the first one's centroid (1 = one changeset per feature).
  OSM_BATCH_MAX_FEATURES: z.coerce.number().int().min(1).max(500).default(50),
  OSM_BATCH_RADIUS_M: z.coerce.number().min(0).max(50_000).default(2_000),
  OSM_CHANGESET_BATCH_COMMENT: z.string().min(1).max(255).default('{count} features ({kategorien}) from the city feature platform'),
  // Licence of the data: exports refuse to run unless it allows ODbL (OSM) and CC0 (Wikidata).
  EXPORT_DATA_LICENCE: z.string().min(1).max(100).optional(),
  EXPORT_LICENCE_STATEMENT: z.string().min(1).max(1000).optional(),
  // Wikidata bot conventions.
  WIKIBASE_MAXLAG: z.coerce.number().int().min(1).max(60).default(5),
  WIKIBASE_MAXLAG_RETRIES: z.coerce.number().int().min(0).max(10).default(4),
  WIKIBASE_BOT_ACCOUNT: z.string().min(1).max(255).optional(),
  WIKIBASE_BOT_APPROVAL_URL: z.url({ protocol: /^https?$/ }).optional(),
  WIKIBASE_REFERENCE_ITEM: z.string().regex(/^Q[1-9]\d*$/).optional(),
  // The feature's public page, for Wikidata references (P854). No default: a reference to
  // localhost would be published for everyone to follow.
  FEATURE_PUBLIC_URL: z
    .string()
    .regex(/^https?:\/\/.*\{featureId\}/, 'an http(s) URL containing {featureId}')
    .optional(),
  WIKIBASE_PROPERTY_STATED_IN: z.string().regex(/^P[1-9]\d*$/).default('P248'),
  WIKIBASE_PROPERTY_REFERENCE_URL: z.string().regex(/^P[1-9]\d*$/).default('P854'),
  WIKIBASE_PROPERTY_RETRIEVED: z.string().regex(/^P[1-9]\d*$/).default('P813'),
  WIKIBASE_PROPERTY_OSM_RELATION: z.string().regex(/^P[1-9]\d*$/).default('P402'),
  // The OSM link for ways and nodes (P402 is for relations); on Wikidata P10689 and P11693. Unset: none.
  WIKIBASE_PROPERTY_OSM_WAY: z.string().regex(/^P[1-9]\d*$/).optional(),
  WIKIBASE_PROPERTY_OSM_NODE: z.string().regex(/^P[1-9]\d*$/).optional(),
  WIKIBASE_PROPERTY_SUBCLASS_OF: z.string().regex(/^P[1-9]\d*$/).default('P279'),
  WIKIBASE_PROPERTY_COUNTRY: z.string().regex(/^P[1-9]\d*$/).default('P17'),
  WIKIBASE_PROPERTY_LOCATED_IN: z.string().regex(/^P[1-9]\d*$/).default('P131'),
  // Where the features are: country (P17) and administrative unit (P131) of every new item, when set.
  WIKIBASE_COUNTRY_ITEM: z.string().regex(/^Q[1-9]\d*$/).optional(),
  WIKIBASE_LOCATED_IN_ITEM: z.string().regex(/^Q[1-9]\d*$/).optional(),
  // The description of a new item: {Kategorie} (capitalised category) and {place} are replaced.
  WIKIBASE_DESCRIPTION: z.string().min(3).max(250).default('{Kategorie} in {place}'),
  WIKIBASE_PLACE_NAME: z.string().min(1).max(100).optional(),
  WIKIBASE_CONFLATION_RADIUS_M: z.coerce.number().min(10).max(10_000).default(100),
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
  if (env.OSM_CONFLATION_SOURCE === 'overpass' && !env.OVERPASS_URL) issue('OVERPASS_URL', 'required when OSM_CONFLATION_SOURCE=overpass');
  if (env.OSM_CONFLATION_NAME_WEAK > env.OSM_CONFLATION_NAME_STRONG) issue('OSM_CONFLATION_NAME_WEAK', 'must not exceed OSM_CONFLATION_NAME_STRONG');
  if (env.WIKIBASE_BOT && !env.WIKIBASE_BOT_APPROVAL_URL) issue('WIKIBASE_BOT_APPROVAL_URL', 'required when WIKIBASE_BOT is on: the page where the bot was approved');
  if (env.WIKIBASE_OAUTH2_TOKEN && env.WIKIBASE_USERNAME) issue('WIKIBASE_OAUTH2_TOKEN', 'use either WIKIBASE_OAUTH2_TOKEN or WIKIBASE_USERNAME/PASSWORD, not both');
  // A category's exports go up unreviewed only when the labelled set measured it good enough.
  if (env.OSM_AUTO_UPLOAD_CATEGORIES.length > 0) {
    try {
      const quality = loadConflationQuality(env.OSM_CONFLATION_QUALITY_FILE);
      for (const kategorie of env.OSM_AUTO_UPLOAD_CATEGORIES) {
        const refusal = autoUploadRefusal(quality, kategorie);
        if (refusal) issue('OSM_AUTO_UPLOAD_CATEGORIES', `${refusal} (threshold: precision ${quality.threshold.precision} on at least ${quality.threshold.minCases} cases, ${env.OSM_CONFLATION_QUALITY_FILE}); its plans must be reviewed`);
      }
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      issue('OSM_CONFLATION_QUALITY_FILE', error.message);
    }
  }
  if (env.FEATURE_PUBLIC_URL && /^https?:\/\/(localhost|127\.|\[::1\])/i.test(env.FEATURE_PUBLIC_URL)) issue('FEATURE_PUBLIC_URL', 'must be a public URL, not localhost: references point readers there');
  // Going live is gated (docs/qc.md "Going live"): the production servers only with the import's
  // paperwork configured, so no undocumented import or unapproved bot can start by a changed URL.
  if (isProductionOsm(env.OSM_API_URL)) {
    const live = 'required to write to the production OSM API (an import: docs/qc.md "Going live")';
    if (!env.OSM_IMPORT_PAGE_URL) issue('OSM_IMPORT_PAGE_URL', `${live}: the import's page on the OSM wiki`);
    if (!env.OSM_IMPORT_ACCOUNT) issue('OSM_IMPORT_ACCOUNT', `${live}: the dedicated import account (e.g. "Kleinbergen_import")`);
    if (!env.FEATURE_PUBLIC_URL) issue('FEATURE_PUBLIC_URL', `${live}: the public page of each feature`);
    if (!env.EXPORT_CONTACT) issue('EXPORT_CONTACT', `${live}: a contact for the OSM operators (User-Agent)`);
    if (!env.EXPORT_DATA_LICENCE) issue('EXPORT_DATA_LICENCE', `${live}: the dataset's licence (changeset source:license)`);
    if (/survey/i.test(env.OSM_CHANGESET_SOURCE)) issue('OSM_CHANGESET_SOURCE', 'a municipal dataset is not a survey: name the dataset');
  }
  if (isProductionWikibase(env.WIKIBASE_URL)) {
    const live = 'required to edit Wikidata (a bot: docs/qc.md "Going live")';
    if (!env.WIKIBASE_BOT_ACCOUNT) issue('WIKIBASE_BOT_ACCOUNT', `${live}: the dedicated bot account`);
    if (!env.WIKIBASE_BOT_APPROVAL_URL) issue('WIKIBASE_BOT_APPROVAL_URL', `${live}: the bot's approval (Wikidata:Requests for permissions/Bot/…)`);
    if (!env.WIKIBASE_BOT) issue('WIKIBASE_BOT', `${live}: edits carry the bot flag`);
    if (!env.WIKIBASE_REFERENCE_ITEM) issue('WIKIBASE_REFERENCE_ITEM', `${live}: the dataset's item for "stated in"`);
    if (!env.FEATURE_PUBLIC_URL) issue('FEATURE_PUBLIC_URL', `${live}: the public page of each feature`);
    if (!env.EXPORT_CONTACT) issue('EXPORT_CONTACT', `${live}: a contact for the Wikidata operators (User-Agent)`);
  }
}

/** The stand-alone schema (tests, CLIs); the API composes the fragment into its own schema instead. */
export const ExportsEnvSchema = z.object(exportsEnvShape).superRefine(checkExportsEnv);

export interface ConflationSettings {
  enabled: boolean;
  /** Where candidates come from: Overpass (OVERPASS_URL) or the OSM API's map call. */
  source: 'overpass' | 'map';
  overpassUrl: string | undefined;
  pointRadiusM: number;
  /** Name similarity (0..1) at or above which a spatial candidate is strong. */
  nameStrong: number;
  /** Below this a differently named object nearby is not a candidate at all. */
  nameWeak: number;
  /**
   * One-to-one assignment across a batch (conflation/assignment.ts): two scores closer than this —
   * a feature's best and second-best element, or two features on one element — are asked about.
   */
  ambiguityMargin: number;
}
export interface ChangesetSettings {
  comment: string;
  source: string;
  hashtags: string;
  /** The import's wiki page (changeset tag url=*), when configured. */
  importPage: string | undefined;
  /** The dedicated import account; the exporter refuses when the token belongs to another. */
  account: string | undefined;
  importTag: boolean;
  /** Changes per hour (OSM_MAX_EDITS_PER_HOUR). */
  maxEditsPerHour: number;
  /** Changes per changeset, at most OSM's 10 000. */
  maxChangesPerChangeset: number;
  /** The comment of a changeset with several features ({count}, {kategorien}, {names}). */
  batchComment: string;
  /** Nearby approvals uploaded in one changeset: at most maxFeatures within radiusM of the first. */
  batch: { maxFeatures: number; radiusM: number };
}
export interface OsmSettings {
  apiUrl: string;
  /** Categories uploaded without a reviewer confirming the plan; every other plan waits for one. */
  autoUpload: ReadonlySet<string>;
  /** Queue an OSM export that writes wikidata=* after a Wikibase export made or found the item. */
  wikidataLinkBack: boolean;
  accessToken: string | undefined;
  conflation: ConflationSettings;
  changeset: ChangesetSettings;
  tagMapping: OsmTagMapping;
}
/**
 * The data's licence as configured (an SPDX-like id). OSM needs data it may publish under ODbL,
 * Wikidata needs CC0; see LICENCES_FOR.
 */
export interface LicenceSettings {
  licence: string | undefined;
  statement: string | undefined;
}
export interface WikibaseReferenceSettings {
  statedInItem: string | undefined;
  /** The feature's public page ({featureId}); undefined: no reference URL. */
  publicUrl: string | undefined;
  statedInProperty: string;
  referenceUrlProperty: string;
  retrievedProperty: string;
}
export type WikibaseCredentials = { username: string; password: string } | { oauth2Token: string };
export interface WikibaseSettings {
  instanceUrl: string | undefined;
  credentials: WikibaseCredentials | undefined;
  bot: boolean;
  language: string;
  instanceOfProperty: string;
  coordinatesProperty: string;
  osmRelationProperty: string;
  /** The OSM link of a way / a node, when configured (P402 is for relations). */
  osmWayProperty: string | undefined;
  osmNodeProperty: string | undefined;
  subclassOfProperty: string;
  /** P17 / P131 of new items, when configured. */
  country: { property: string; item: string | undefined };
  locatedIn: { property: string; item: string | undefined };
  /** The description of a new item ({Kategorie}, {place}); null when the template needs a place that is not configured. */
  description: { template: string; place: string | undefined };
  maxlag: number;
  maxlagRetries: number;
  botAccount: string | undefined;
  botApprovalUrl: string | undefined;
  references: WikibaseReferenceSettings;
  conflationRadiusM: number;
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
  licence: LicenceSettings;
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
    userAgent: env.EXPORT_USER_AGENT ?? (env.EXPORT_CONTACT ? userAgentWithContact(env.EXPORT_CONTACT) : DEFAULT_USER_AGENT),
    httpTimeoutMs: env.EXPORT_HTTP_TIMEOUT_MS,
    licence: { licence: env.EXPORT_DATA_LICENCE, statement: env.EXPORT_LICENCE_STATEMENT },
    osm: {
      apiUrl: env.OSM_API_URL.replace(/\/+$/, ''),
      autoUpload: new Set(env.OSM_AUTO_UPLOAD_CATEGORIES),
      wikidataLinkBack: env.OSM_WIKIDATA_LINK_BACK,
      accessToken: env.OSM_ACCESS_TOKEN,
      conflation: {
        enabled: env.OSM_CONFLATION,
        source: env.OSM_CONFLATION_SOURCE ?? (env.OVERPASS_URL ? 'overpass' : 'map'),
        overpassUrl: env.OVERPASS_URL?.replace(/\/+$/, ''),
        pointRadiusM: env.OSM_CONFLATION_POINT_RADIUS_M,
        nameStrong: env.OSM_CONFLATION_NAME_STRONG,
        nameWeak: env.OSM_CONFLATION_NAME_WEAK,
        ambiguityMargin: env.OSM_CONFLATION_AMBIGUITY_MARGIN,
      },
      changeset: {
        comment: env.OSM_CHANGESET_COMMENT,
        source: env.OSM_CHANGESET_SOURCE,
        hashtags: env.OSM_CHANGESET_HASHTAGS,
        importPage: env.OSM_IMPORT_PAGE_URL,
        account: env.OSM_IMPORT_ACCOUNT,
        importTag: env.OSM_CHANGESET_IMPORT,
        maxEditsPerHour: env.OSM_MAX_EDITS_PER_HOUR,
        maxChangesPerChangeset: env.OSM_MAX_CHANGES_PER_CHANGESET,
        batchComment: env.OSM_CHANGESET_BATCH_COMMENT,
        batch: { maxFeatures: env.OSM_BATCH_MAX_FEATURES, radiusM: env.OSM_BATCH_RADIUS_M },
      },
      tagMapping: loadOsmTagMapping(env.OSM_TAG_MAPPING_FILE),
    },
    wikibase: {
      instanceUrl: env.WIKIBASE_URL?.replace(/\/+$/, ''),
      credentials,
      bot: env.WIKIBASE_BOT,
      language: env.WIKIBASE_LANGUAGE,
      instanceOfProperty: env.WIKIBASE_PROPERTY_INSTANCE_OF,
      coordinatesProperty: env.WIKIBASE_PROPERTY_COORDINATES,
      osmRelationProperty: env.WIKIBASE_PROPERTY_OSM_RELATION,
      subclassOfProperty: env.WIKIBASE_PROPERTY_SUBCLASS_OF,
      osmWayProperty: env.WIKIBASE_PROPERTY_OSM_WAY,
      osmNodeProperty: env.WIKIBASE_PROPERTY_OSM_NODE,
      country: { property: env.WIKIBASE_PROPERTY_COUNTRY, item: env.WIKIBASE_COUNTRY_ITEM },
      locatedIn: { property: env.WIKIBASE_PROPERTY_LOCATED_IN, item: env.WIKIBASE_LOCATED_IN_ITEM },
      description: { template: env.WIKIBASE_DESCRIPTION, place: env.WIKIBASE_PLACE_NAME },
      maxlag: env.WIKIBASE_MAXLAG,
      maxlagRetries: env.WIKIBASE_MAXLAG_RETRIES,
      botAccount: env.WIKIBASE_BOT_ACCOUNT,
      botApprovalUrl: env.WIKIBASE_BOT_APPROVAL_URL,
      references: {
        statedInItem: env.WIKIBASE_REFERENCE_ITEM,
        publicUrl: env.FEATURE_PUBLIC_URL,
        statedInProperty: env.WIKIBASE_PROPERTY_STATED_IN,
        referenceUrlProperty: env.WIKIBASE_PROPERTY_REFERENCE_URL,
        retrievedProperty: env.WIKIBASE_PROPERTY_RETRIEVED,
      },
      conflationRadiusM: env.WIKIBASE_CONFLATION_RADIUS_M,
    },
    mail: { smtpUrl: env.SMTP_URL, from: env.MAIL_FROM },
    reviewers: { emails: env.REVIEWER_EMAILS, reviewLink: env.QC_REVIEW_LINK ?? `${env.WEB_PUBLIC_URL.replace(/\/+$/, '')}/qc/{featureId}` },
    agency: { webhookUrl: env.AGENCY_WEBHOOK_URL, webhookSecret: env.AGENCY_WEBHOOK_SECRET, email: env.AGENCY_EMAIL },
  };
}

/**
 * Licences under which the data may go to each target. OSM: the data must be publishable under the
 * ODbL (public-domain dedications and Germany's "Datenlizenz Deutschland – Zero" qualify, so does
 * ODbL itself). Wikidata: CC0 or equivalent only. Attribution licences (CC-BY, dl-de/by) need an
 * explicit waiver, which is a licence statement of its own: configure it as one of these ids.
 */
export const LICENCES_FOR = {
  osm: ['CC0-1.0', 'PDDL-1.0', 'ODbL-1.0', 'dl-de-zero-2.0'],
  wikidata: ['CC0-1.0', 'PDDL-1.0', 'dl-de-zero-2.0'],
} as const;

/** null when the configured licence allows the target; otherwise why the export refuses to run. */
export function licenceRefusal(licence: LicenceSettings, target: 'osm' | 'wikidata'): string | null {
  const allowed: readonly string[] = LICENCES_FOR[target];
  const what = target === 'osm' ? 'OpenStreetMap (ODbL)' : 'Wikidata (CC0)';
  if (!licence.licence) return `EXPORT_DATA_LICENCE is not set: state the data's licence before exporting to ${what}`;
  if (!allowed.includes(licence.licence)) return `EXPORT_DATA_LICENCE ${licence.licence} does not permit publishing in ${what}; allowed: ${allowed.join(', ')}`;
  return null;
}
