import { Configuration, FrontendApi } from '@ory/kratos-client';
import { emailVerified, kratosCookies, whoami } from '../../../shared/ory/kratos-session.js';
import { roleFrom } from '../../../shared/roles.js';
import { aalOfClaims, type Aal, type Role } from '../../../shared/principal.js';
import type { WebConfig } from '../config.js';
import { editRefusal } from './permissions.js';

/**
 * Who is looking at a page, decided on the server:
 * - the development sign-in's cookie (a token the API signed with its development key), or
 * - the Kratos session cookie, checked with whoami — the project's guard logic (shared/ory).
 *
 * The site uses the answer only to choose what to render and where to redirect; every change is
 * authorised again by the API, so a forged development cookie gains nothing but a form the API refuses.
 */
export const DEV_TOKEN_COOKIE = 'fp_dev_token';

export interface SignedInUser {
  id: string;
  role: Role;
  name: string;
  /** Development sign-in: the bearer token the browser sends to the API. Kratos: none (the cookie travels). */
  token: string | undefined;
  /** false: the account's e-mail address is not verified yet, and the API lets it only read. */
  emailVerified?: boolean;
  /** The session's authenticator assurance level (aal2: a second factor was used). */
  aal?: Aal;
}

export type Visitor = { state: 'signed-in'; user: SignedInUser } | { state: 'anonymous' } | { state: 'second-factor-required' };

/** The claims of a development token, or undefined when it is malformed or expired. */
export function devTokenClaims(token: string, now = Date.now()): { sub: string; role: Role; aal?: Aal } | undefined {
  const payload = token.split('.')[1];
  if (!payload) return undefined;
  try {
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { sub?: unknown; role?: unknown; exp?: unknown; acr?: unknown; amr?: unknown };
    if (typeof claims.sub !== 'string' || typeof claims.exp !== 'number' || claims.exp * 1000 <= now) return undefined;
    const aal = aalOfClaims(claims);
    return { sub: claims.sub, role: roleFrom(claims.role), ...(aal ? { aal } : {}) };
  } catch {
    return undefined;
  }
}

let frontend: FrontendApi | undefined;

/** The site's one Kratos public API client (whoami, the logout flow), made on first use. */
export function kratosFrontend(kratosPublicUrl: string): FrontendApi {
  frontend ??= new FrontendApi(new Configuration({ basePath: kratosPublicUrl, baseOptions: { timeout: 5_000, maxRedirects: 0 } }));
  return frontend;
}

export async function visitorOf(config: WebConfig, devToken: string | undefined, cookieHeader: string | null): Promise<Visitor> {
  if (config.devSignIn && devToken) {
    const claims = devTokenClaims(devToken);
    if (claims) return { state: 'signed-in', user: { id: claims.sub, role: claims.role, name: claims.sub, token: devToken, ...(claims.aal ? { aal: claims.aal } : {}) } };
  }
  if (!config.kratosPublicUrl) return { state: 'anonymous' };
  const result = await whoami(kratosFrontend(config.kratosPublicUrl), { cookie: kratosCookies(cookieHeader ?? undefined) });
  if (result.state === 'anonymous') return { state: 'anonymous' };
  if (result.state === 'second-factor-required') return { state: 'second-factor-required' };
  const traits = (result.session.identity.traits ?? {}) as Record<string, unknown>;
  const name = typeof traits.name === 'string' ? traits.name : typeof traits.email === 'string' ? traits.email : result.session.identity.id;
  const identity = result.session.identity;
  const level = result.session.authenticator_assurance_level;
  return {
    state: 'signed-in',
    user: {
      id: identity.id,
      role: roleFrom(identity.metadata_public),
      name,
      token: undefined,
      emailVerified: emailVerified(traits.email, identity.verifiable_addresses),
      aal: level === 'aal2' || level === 'aal3' ? 'aal2' : 'aal1',
    },
  };
}

/**
 * Roles the review desk sends through the second-factor step-up before it shows approve and reject:
 * the API's default AUTH_AAL2_ROLES (services/api/src/auth/assurance.ts). The API decides again; with
 * another setting there, its 403 AAL2_REQUIRED tells the person to confirm with the second factor.
 */
export const STEP_UP_ROLES: readonly Role[] = ['reviewer', 'admin'];

export function needsStepUp(user: SignedInUser | undefined): boolean {
  return user !== undefined && user.token === undefined && STEP_UP_ROLES.includes(user.role) && user.emailVerified !== false && user.aal !== 'aal2';
}

/**
 * A Kratos self-service URL next to LOGIN_URL's browser login (`…/self-service/login/browser`): the
 * step-up login (`?aal=aal2`) or the verification flow, each returning to `returnTo` on this site.
 * Undefined when LOGIN_URL is not Kratos' browser login.
 */
export function kratosBrowserUrl(config: Pick<WebConfig, 'loginUrl'>, flow: 'login' | 'verification', returnTo: string, params: Record<string, string> = {}): string | undefined {
  if (!config.loginUrl || !config.loginUrl.includes('/self-service/login/browser')) return undefined;
  const url = new URL(config.loginUrl.replace('/self-service/login/browser', `/self-service/${flow}/browser`));
  for (const [name, value] of Object.entries(params)) url.searchParams.set(name, value);
  url.searchParams.set('return_to', returnTo);
  return url.toString();
}

/** A return URL is a path on this site only: anything else (//evil, https://…) becomes the map. */
export function safeReturnPath(value: string | null | undefined): string {
  if (!value || !value.startsWith('/') || value.startsWith('//') || value.includes('\\')) return '/';
  return value;
}

/** What the UI offers a role. The API decides again; this only hides controls a role lacks. */
export function mayCreate(role: Role): boolean {
  return role === 'contributor' || role === 'reviewer' || role === 'admin';
}
/** Whether the user may edit a feature now (its creator or an admin, and not while it is in review). */
export function mayEdit(user: SignedInUser | undefined, properties: { createdBy?: string | undefined; status?: string | undefined }): boolean {
  return editRefusal(user, properties) === undefined;
}
export function mayDelete(user: SignedInUser | undefined): boolean {
  return user?.role === 'admin';
}
