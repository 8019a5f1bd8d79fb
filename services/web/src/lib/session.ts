import { Configuration, FrontendApi } from '@ory/kratos-client';
import { whoami, kratosCookies } from '../../../shared/ory/kratos-session.js';
import { roleFrom } from '../../../shared/roles.js';
import type { Role } from '../../../shared/principal.js';
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
}

export type Visitor = { state: 'signed-in'; user: SignedInUser } | { state: 'anonymous' } | { state: 'second-factor-required' };

/** The claims of a development token, or undefined when it is malformed or expired. */
export function devTokenClaims(token: string, now = Date.now()): { sub: string; role: Role } | undefined {
  const payload = token.split('.')[1];
  if (!payload) return undefined;
  try {
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { sub?: unknown; role?: unknown; exp?: unknown };
    if (typeof claims.sub !== 'string' || typeof claims.exp !== 'number' || claims.exp * 1000 <= now) return undefined;
    return { sub: claims.sub, role: roleFrom(claims.role) };
  } catch {
    return undefined;
  }
}

let frontend: FrontendApi | undefined;

export async function visitorOf(config: WebConfig, devToken: string | undefined, cookieHeader: string | null): Promise<Visitor> {
  if (config.devSignIn && devToken) {
    const claims = devTokenClaims(devToken);
    if (claims) return { state: 'signed-in', user: { id: claims.sub, role: claims.role, name: claims.sub, token: devToken } };
  }
  if (!config.kratosPublicUrl) return { state: 'anonymous' };
  frontend ??= new FrontendApi(new Configuration({ basePath: config.kratosPublicUrl, baseOptions: { timeout: 5_000, maxRedirects: 0 } }));
  const result = await whoami(frontend, { cookie: kratosCookies(cookieHeader ?? undefined) });
  if (result.state === 'anonymous') return { state: 'anonymous' };
  if (result.state === 'second-factor-required') return { state: 'second-factor-required' };
  const traits = (result.session.identity.traits ?? {}) as Record<string, unknown>;
  const name = typeof traits.name === 'string' ? traits.name : typeof traits.email === 'string' ? traits.email : result.session.identity.id;
  return { state: 'signed-in', user: { id: result.session.identity.id, role: roleFrom(result.session.identity.metadata_public), name, token: undefined } };
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
