import * as pulumi from '@pulumi/pulumi';
import * as random from '@pulumi/random';
import type { Target } from '../services/shared/targets.js';
import { loadOidcClientSecrets } from './config.js';

/**
 * Every secret of the stack, each either set by the operator (`pulumi config set --secret <key> ...`)
 * or generated once with RandomPassword and kept in the (encrypted) stack state. Either way the value
 * is a Pulumi secret Output: it is encrypted in state, masked in logs, and never lands in a committed
 * stack file. Rotating one = set a new value (or `pulumi up --replace` the RandomPassword) and `pulumi up`.
 */

export interface SecretSpec {
  /** Length of a generated value; Ory rules: Kratos cipher exactly 32, Hydra system ≥ 32. */
  length: number;
  /** When true, generated values use only [A-Za-z0-9] (safe in DSNs and URLs without escaping). */
  alphanumeric?: boolean;
  /** Rules for operator-set values (Ory ignores a cipher secret that is not exactly 32 characters). */
  exactLength?: number;
  minLength?: number;
  /**
   * A rotatable Ory secret: the value may be several comma-separated secrets, newest first
   * (`new,old`); Ory signs or encrypts with the first and still accepts the others. The length rules
   * apply to each one.
   */
  rotatable?: boolean;
}

export const SECRET_SPECS = {
  featuresDbSuperuserPassword: { length: 40, alphanumeric: true },
  featuresDbPassword: { length: 40, alphanumeric: true },
  identityDbSuperuserPassword: { length: 40, alphanumeric: true },
  kratosDbPassword: { length: 40, alphanumeric: true },
  hydraDbPassword: { length: 40, alphanumeric: true },
  /** Role `login`: the login app's rate-limit counters, its own database on the identity PostgreSQL. */
  loginDbPassword: { length: 40, alphanumeric: true },
  /** Role `webhook` (Kubernetes target): the webhook replicas' shared journal, its own database on features-db. */
  webhookDbPassword: { length: 40, alphanumeric: true },
  geoserverDbPassword: { length: 40, alphanumeric: true },
  kratosCookieSecret: { length: 48, alphanumeric: true, minLength: 16, rotatable: true },
  kratosCipherSecret: { length: 32, alphanumeric: true, exactLength: 32, rotatable: true },
  kratosDefaultSecret: { length: 48, alphanumeric: true, minLength: 16, rotatable: true },
  hydraSystemSecret: { length: 48, alphanumeric: true, minLength: 32, rotatable: true },
  hydraCookieSecret: { length: 48, alphanumeric: true, minLength: 16, rotatable: true },
  loginCookieSecret: { length: 48, alphanumeric: true, minLength: 32 },
  accountsUiSecret: { length: 48, alphanumeric: true },
  geoserverAdminPassword: { length: 32, alphanumeric: true },
  webhookAdminToken: { length: 48, alphanumeric: true },
  /** The builders' credential at the egress proxy: lets their git fetch (never a build) reach the git hosts. */
  egressGitToken: { length: 48, alphanumeric: true },
} as const satisfies Record<string, SecretSpec>;

/** Pulumi secret keys of the QC worker's credentials → the variables the worker reads (docs/qc.md). */
export const EXPORT_SECRET_KEYS = {
  osmAccessToken: 'OSM_ACCESS_TOKEN',
  wikibasePassword: 'WIKIBASE_PASSWORD',
  wikibaseOauth2Token: 'WIKIBASE_OAUTH2_TOKEN',
  agencyWebhookSecret: 'AGENCY_WEBHOOK_SECRET',
} as const;

export type SecretName = keyof typeof SECRET_SPECS;
export type StackSecrets = Record<SecretName, pulumi.Output<string>> & {
  /** SMTP connection URI for the Kratos courier (contains credentials); operator-provided, required. */
  smtpConnectionUri: pulumi.Output<string>;
  /**
   * The QC worker's credentials, each optional (an export without its credential stays off): the
   * variable the worker reads → the value. SMTP_URL is `exportsSmtpUrl`, else smtpConnectionUri.
   */
  exportSecrets: Record<string, pulumi.Output<string>>;
  /** The social sign-in providers' client secrets, a JSON object by provider id (config oidcClientSecrets); unset: none. */
  oidcClientSecrets: pulumi.Output<string> | undefined;
  /** One shared webhook secret per deploy target, keyed by the target's `secret` variable name. */
  webhookTargetSecrets: Record<string, pulumi.Output<string>>;
  /**
   * Previous secrets during a rotation (`<NAME>_PREVIOUS` in webhookSecrets): the webhook server
   * accepts both while both are set, so the git host can be switched without failed deliveries.
   */
  webhookPreviousSecrets: pulumi.Output<Record<string, string>>;
};

function configOrGenerated(config: pulumi.Config, name: string, spec: SecretSpec): pulumi.Output<string> {
  const given = config.getSecret(name);
  if (given !== undefined) {
    // Checked when the value is known; the message names the key, never the value.
    return given.apply((value) => {
      checkSecretValue(name, spec, value);
      return value;
    });
  }
  const generated = new random.RandomPassword(name, {
    length: spec.length,
    special: !spec.alphanumeric,
    minNumeric: 1,
    minUpper: 1,
    minLower: 1,
  });
  // The provider marks `result` secret too; wrapping here makes it so regardless of provider version.
  return pulumi.secret(generated.result);
}

/**
 * The rules for an operator-set secret; throws naming the key (and the position in a rotation list),
 * never the value. Ory silently ignores a cipher secret that is not exactly 32 characters, so a wrong
 * one must stop the deployment here rather than break decryption later.
 */
export function checkSecretValue(name: string, spec: SecretSpec, value: string): void {
  const values = spec.rotatable ? value.split(',').map((v) => v.trim()) : [value];
  values.forEach((secret, i) => {
    const which = values.length > 1 ? `${name} (value ${i + 1} of ${values.length})` : name;
    if (secret === '') throw new Error(`config ${which} is empty`);
    if (spec.exactLength !== undefined && secret.length !== spec.exactLength) throw new Error(`config ${which} must be exactly ${spec.exactLength} characters`);
    if (spec.minLength !== undefined && secret.length < spec.minLength) throw new Error(`config ${which} must be at least ${spec.minLength} characters`);
  });
}

export function loadSecrets(config: pulumi.Config, targets: Target[]): StackSecrets {
  const secrets = Object.fromEntries(
    (Object.entries(SECRET_SPECS) as [SecretName, SecretSpec][]).map(([name, spec]) => [name, configOrGenerated(config, name, spec)]),
  ) as Record<SecretName, pulumi.Output<string>>;
  const smtpConnectionUri = config.requireSecret('smtpConnectionUri');
  // The seed's webhook secrets are 32 random bytes in hex; a config value webhookSecrets.<NAME> wins.
  const givenWebhookSecrets = config.getSecretObject<Record<string, string>>('webhookSecrets');
  const webhookTargetSecrets = Object.fromEntries(
    targets.map((target) => {
      const given = givenWebhookSecrets?.apply((all) => all?.[target.secret]);
      const generated = new random.RandomBytes(`webhook-${target.secret.toLowerCase()}`, { length: 32 }).hex;
      const value = given ? pulumi.all([given, generated]).apply(([g, gen]) => g ?? gen) : generated;
      return [target.secret, pulumi.secret(value)];
    }),
  );
  const previousNames = new Set(targets.map((t) => `${t.secret}_PREVIOUS`));
  const webhookPreviousSecrets = pulumi.secret(
    (givenWebhookSecrets ?? pulumi.output<Record<string, string> | undefined>(undefined)).apply((all) =>
      Object.fromEntries(Object.entries(all ?? {}).filter(([name]) => previousNames.has(name))),
    ),
  );
  const exportSecrets: Record<string, pulumi.Output<string>> = { SMTP_URL: config.getSecret('exportsSmtpUrl') ?? smtpConnectionUri };
  for (const [key, variable] of Object.entries(EXPORT_SECRET_KEYS)) {
    const given = config.getSecret(key);
    if (given) exportSecrets[variable] = given;
  }
  const oidcClientSecrets = loadOidcClientSecrets(config);
  return { ...secrets, smtpConnectionUri, exportSecrets, oidcClientSecrets, webhookTargetSecrets, webhookPreviousSecrets };
}
