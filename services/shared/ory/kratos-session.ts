import type { FrontendApi, Session } from '@ory/kratos-client';
import { oryStatus } from './clients.js';

/**
 * Kratos whoami, classified. `GET /sessions/whoami` with the browser's Cookie header answers
 * 200 with the session (logged in), 401 (no valid session) or 403 (logged in, but a second factor is
 * required first, `session_aal2_required`). Anything else is an outage and is thrown.
 */
export type WhoamiResult =
  | { state: 'authenticated'; session: Session & { identity: NonNullable<Session['identity']> } }
  | { state: 'anonymous' }
  | { state: 'second-factor-required' };

export async function whoami(frontend: FrontendApi, credentials: { cookie?: string; sessionToken?: string }): Promise<WhoamiResult> {
  if (!credentials.cookie && !credentials.sessionToken) return { state: 'anonymous' };
  try {
    const { data } = await frontend.toSession({
      ...(credentials.cookie ? { cookie: credentials.cookie } : {}),
      ...(credentials.sessionToken ? { xSessionToken: credentials.sessionToken } : {}),
    });
    if (!data.identity || data.active === false) return { state: 'anonymous' };
    return { state: 'authenticated', session: data as Session & { identity: NonNullable<Session['identity']> } };
  } catch (error) {
    const status = oryStatus(error);
    if (status === 401) return { state: 'anonymous' };
    if (status === 403) return { state: 'second-factor-required' };
    throw error;
  }
}

/** Only the Kratos cookies of a Cookie header: the rest of the browser's cookies are none of Kratos' business. */
export function kratosCookies(cookieHeader: string | undefined): string | undefined {
  if (!cookieHeader) return undefined;
  const kept = cookieHeader
    .split(';')
    .map((part) => part.trim())
    .filter((part) => /^(ory_kratos_session|ory_session_[^=]*|csrf_token[^=]*)=/.test(part));
  return kept.length > 0 ? kept.join('; ') : undefined;
}

/**
 * Whether the identity's e-mail trait is a verified address (Kratos lists each address of the schema's
 * `verification.via: email` in `verifiable_addresses` with `verified`). No such address is unverified.
 */
export function emailVerified(email: unknown, addresses: ReadonlyArray<{ value: string; verified: boolean }> | undefined): boolean {
  if (typeof email !== 'string') return false;
  const wanted = email.toLowerCase();
  return (addresses ?? []).some((a) => a.verified === true && a.value.toLowerCase() === wanted);
}
