import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { OAuth2Api, OAuth2Client } from '@ory/hydra-client';
import { isAxiosError } from 'axios';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { ConfigError } from '../../../services/shared/config.js';
import { substitute, type Env } from '../../../services/shared/identity-config/render.js';
import { oryStatus } from '../../../services/shared/ory/clients.js';
import { isTransientStatus, retry, type RetryOptions } from '../../../services/shared/retry.js';

/**
 * OAuth2 clients declared in YAML (identity/config/clients.yaml), synced into Hydra through the admin API.
 *
 * Idempotent: a client that matches its declaration is left alone; one that differs is replaced with PUT
 * (which keeps its secret); a missing one is created with a freshly generated secret, which is returned
 * once and never stored anywhere by this tool. Hydra itself only keeps a hash of it.
 *
 * Hydra may still be starting when the stack's clients-sync job runs: with `retry`, each client's step
 * (read, then create or update) is tried again on a refused connection, a timeout or a 5xx, with
 * exponential backoff and jitter until the deadline (services/shared/retry.ts); a 4xx fails at once.
 * The step reads before it writes, so a repeated one does not create a client twice.
 */

/** Grants and scopes are the platform's, not the operator's: code flow, refresh tokens, OIDC identity. */
export const CLIENT_GRANT_TYPES = ['authorization_code', 'refresh_token'];
export const CLIENT_RESPONSE_TYPES = ['code'];
/** `offline_access` is what makes Hydra issue the refresh token the refresh_token grant needs. */
export const CLIENT_SCOPE = 'openid offline_access profile email';

const redirectUri = z.string().regex(/^[a-z][a-z0-9+.-]*:\/?\/?[^\s]*$/i, 'an absolute URI (https://… or an app scheme)');

export const ClientDeclarationSchema = z
  .object({
    client_id: z.string().regex(/^[a-z0-9][a-z0-9._-]{2,63}$/, 'lower-case letters, digits, . _ -, 3 to 64 characters'),
    client_name: z.string().min(1).max(100),
    public: z.boolean().default(false),
    first_party: z.boolean().default(false),
    redirect_uris: z.array(redirectUri).min(1),
    post_logout_redirect_uris: z.array(redirectUri).default([]),
    /**
     * Resource servers the client may request access tokens for (Hydra's audience whitelist). The API
     * accepts only tokens granted for its audience (AUTH_AUDIENCE, geodata-api), so a client that calls
     * the API lists it here and asks for it with `audience=geodata-api` in the authorization request.
     */
    audience: z.array(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/, 'an audience such as geodata-api')).default([]),
  })
  .strict()
  .superRefine((client, ctx) => {
    client.redirect_uris.forEach((uri, i) => {
      if (uri.startsWith('http://') && !/^http:\/\/(127\.0\.0\.1|localhost)[:/]/.test(uri)) {
        ctx.addIssue({ code: 'custom', path: ['redirect_uris', i], message: 'http is only allowed for localhost; use https' });
      }
    });
  });

export const ClientsFileSchema = z.object({ clients: z.array(ClientDeclarationSchema) }).strict().superRefine((file, ctx) => {
  const seen = new Set<string>();
  file.clients.forEach((c, i) => {
    if (seen.has(c.client_id)) ctx.addIssue({ code: 'custom', path: ['clients', i, 'client_id'], message: `duplicate client_id ${c.client_id}` });
    seen.add(c.client_id);
  });
});

export type ClientDeclaration = z.output<typeof ClientDeclarationSchema>;

export function loadClientDeclarations(path: string, env: Env): ClientDeclaration[] {
  let raw: unknown;
  try {
    raw = substitute(parseYaml(readFileSync(path, 'utf8')), env, `${path}:`);
  } catch (cause) {
    if (cause instanceof ConfigError) throw cause;
    throw new ConfigError(`cannot read ${path}: ${(cause as Error).message}`, { cause });
  }
  const parsed = ClientsFileSchema.safeParse(raw);
  if (!parsed.success) {
    throw new ConfigError(`invalid ${path}: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  }
  return parsed.data.clients;
}

/** The Hydra client a declaration stands for (without a secret). */
export function desiredClient(declaration: ClientDeclaration): OAuth2Client {
  return {
    client_id: declaration.client_id,
    client_name: declaration.client_name,
    redirect_uris: declaration.redirect_uris,
    post_logout_redirect_uris: declaration.post_logout_redirect_uris,
    audience: declaration.audience,
    grant_types: CLIENT_GRANT_TYPES,
    response_types: CLIENT_RESPONSE_TYPES,
    scope: CLIENT_SCOPE,
    token_endpoint_auth_method: declaration.public ? 'none' : 'client_secret_basic',
    skip_consent: declaration.first_party,
    metadata: { managed_by: 'identity-clients-sync' },
  };
}

const COMPARED: ReadonlyArray<keyof OAuth2Client> = ['client_name', 'redirect_uris', 'post_logout_redirect_uris', 'audience', 'grant_types', 'response_types', 'scope', 'token_endpoint_auth_method', 'skip_consent'];

function normalise(value: unknown): string {
  return JSON.stringify(Array.isArray(value) ? [...(value as string[])].sort() : (value ?? null));
}

export function differingFields(existing: OAuth2Client, desired: OAuth2Client): string[] {
  return COMPARED.filter((field) => normalise(existing[field] ?? (Array.isArray(desired[field]) ? [] : field === 'skip_consent' ? false : undefined)) !== normalise(desired[field]));
}

export type SyncOutcome =
  | { clientId: string; action: 'created'; clientSecret?: string }
  | { clientId: string; action: 'updated'; fields: string[] }
  | { clientId: string; action: 'unchanged' };

/** Socket-level failures of a call that may succeed once Hydra is up (axios' codes for Node's errors). */
const TRANSIENT_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ENOTFOUND', 'ERR_NETWORK']);

/**
 * Whether a failed Hydra call is worth another attempt: no answer (refused, reset, timed out, a name
 * that does not resolve yet while Docker starts the container) or a 5xx. Never a 4xx, never a bug.
 */
export function hydraRetryable(error: unknown): boolean {
  if (!isAxiosError(error)) return false;
  const status = error.response?.status;
  return status === undefined ? TRANSIENT_CODES.has(error.code ?? '') : isTransientStatus(status);
}

/** A failed Hydra call in one line: method, path and status or socket error, never headers or credentials. */
export function describeHydraFailure(error: unknown): string {
  if (!isAxiosError(error)) return error instanceof Error ? error.message : String(error);
  const path = error.config?.url ? new URL(error.config.url, 'http://hydra').pathname : '?';
  const what = error.response ? `answered ${error.response.status}${hydraErrorText(error.response.data)}` : `no answer (${error.code ?? error.message})`;
  return `${error.config?.method?.toUpperCase() ?? 'call'} ${path} ${what}`;
}

function hydraErrorText(body: unknown): string {
  const text = (body as { error_description?: unknown; error?: unknown } | undefined)?.error_description ?? (body as { error?: unknown } | undefined)?.error;
  return typeof text === 'string' ? `: ${text.slice(0, 200)}` : '';
}

export interface SyncOptions {
  dryRun?: boolean;
  /** Retry each client's step while Hydra is starting; without it every call is made once. */
  retry?: Omit<RetryOptions, 'retryable'>;
}

export async function syncClients(oauth2: OAuth2Api, declarations: ClientDeclaration[], options: SyncOptions = {}): Promise<SyncOutcome[]> {
  const outcomes: SyncOutcome[] = [];
  const retryOptions = options.retry;
  // One deadline for the whole run, however many clients.
  const deadline = retryOptions ? Date.now() + retryOptions.deadlineMs : 0;
  for (const declaration of declarations) {
    const step = () => syncClient(oauth2, declaration, options.dryRun ?? false);
    outcomes.push(retryOptions ? await retry(step, { ...retryOptions, deadlineMs: Math.max(0, deadline - Date.now()), retryable: hydraRetryable }) : await step());
  }
  return outcomes;
}

async function syncClient(oauth2: OAuth2Api, declaration: ClientDeclaration, dryRun: boolean): Promise<SyncOutcome> {
  const desired = desiredClient(declaration);
  let existing: OAuth2Client | undefined;
  try {
    existing = (await oauth2.getOAuth2Client({ id: declaration.client_id })).data;
  } catch (error) {
    if (oryStatus(error) !== 404) throw error;
  }
  if (!existing) {
    const clientSecret = declaration.public ? undefined : randomBytes(32).toString('base64url');
    if (!dryRun) await oauth2.createOAuth2Client({ oAuth2Client: { ...desired, ...(clientSecret ? { client_secret: clientSecret } : {}) } });
    return { clientId: declaration.client_id, action: 'created', ...(clientSecret && !dryRun ? { clientSecret } : {}) };
  }
  const fields = differingFields(existing, desired);
  if (fields.length === 0) return { clientId: declaration.client_id, action: 'unchanged' };
  // PUT without client_secret keeps the stored secret (Hydra's documented behaviour).
  if (!dryRun) await oauth2.setOAuth2Client({ id: declaration.client_id, oAuth2Client: desired });
  return { clientId: declaration.client_id, action: 'updated', fields };
}
