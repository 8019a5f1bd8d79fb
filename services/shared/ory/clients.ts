import { Configuration as KratosConfiguration, FrontendApi, IdentityApi, MetadataApi as KratosMetadataApi } from '@ory/kratos-client';
import { Configuration as HydraConfiguration, MetadataApi as HydraMetadataApi, OAuth2Api } from '@ory/hydra-client';
import { isAxiosError } from 'axios';

/**
 * The Ory API clients the identity code uses. Handlers receive them (never build them), so tests hand in
 * clients pointed at the contract-checked doubles.
 */
export interface OryClients {
  /** Kratos public API: whoami and self-service flows (server-to-server, the browser's cookie forwarded). */
  frontend: FrontendApi;
  /** Kratos admin API: identities and sessions. */
  identity: IdentityApi;
  kratosMetadata: KratosMetadataApi;
  /** Hydra admin API: login/consent/logout requests, clients, introspection. */
  oauth2: OAuth2Api;
  hydraMetadata: HydraMetadataApi;
}

export interface OryUrls {
  kratosPublicUrl: string;
  kratosAdminUrl: string;
  hydraAdminUrl: string;
  /** Per-call timeout: a stuck Ory service must not hang a browser or the API. */
  timeoutMs?: number;
}

export function createOryClients(urls: OryUrls): OryClients {
  const baseOptions = { timeout: urls.timeoutMs ?? 5000, maxRedirects: 0 };
  const kratosPublic = new KratosConfiguration({ basePath: urls.kratosPublicUrl, baseOptions });
  const kratosAdmin = new KratosConfiguration({ basePath: urls.kratosAdminUrl, baseOptions });
  const hydraAdmin = new HydraConfiguration({ basePath: urls.hydraAdminUrl, baseOptions });
  return {
    frontend: new FrontendApi(kratosPublic),
    identity: new IdentityApi(kratosAdmin),
    kratosMetadata: new KratosMetadataApi(kratosAdmin),
    oauth2: new OAuth2Api(hydraAdmin),
    hydraMetadata: new HydraMetadataApi(hydraAdmin),
  };
}

/** The HTTP status of a failed Ory call, or undefined for a network failure or timeout. */
export function oryStatus(error: unknown): number | undefined {
  return isAxiosError(error) ? error.response?.status : undefined;
}

/** The JSON body of a failed Ory call. */
export function oryBody(error: unknown): unknown {
  return isAxiosError(error) ? error.response?.data : undefined;
}

/**
 * Hydra answers 410 Gone with `redirect_to` for a login, consent or logout challenge that was already
 * handled (a reload, the back button, a second tab). The browser just has to go there.
 */
export function goneRedirect(error: unknown): string | undefined {
  if (oryStatus(error) !== 410) return undefined;
  const body = oryBody(error) as { redirect_to?: unknown } | undefined;
  return typeof body?.redirect_to === 'string' ? body.redirect_to : undefined;
}

/**
 * A failed Ory call reduced to what is safe to log. An AxiosError carries the request config, and with it
 * the forwarded Cookie header (a live Kratos session) — it must never reach a log line whole.
 */
export function describeError(error: unknown): Record<string, unknown> {
  if (isAxiosError(error)) {
    const url = error.config?.url ? new URL(error.config.url, error.config.baseURL ?? 'http://unknown').pathname : undefined;
    return { type: 'OryRequestFailed', message: error.message, code: error.code, status: error.response?.status, method: error.config?.method?.toUpperCase(), path: url };
  }
  if (error instanceof Error) return { type: error.name, message: error.message, stack: error.stack };
  return { type: typeof error, message: String(error) };
}
