import { createHmac } from 'node:crypto';
import type { RequestHandler } from 'express';
import type { OAuth2LoginRequest } from '@ory/hydra-client';
import { safeEqual } from '../../../services/shared/safe-compare.js';
import { whoami, kratosCookies } from '../../../services/shared/ory/kratos-session.js';
import { answerChallenge, fetchChallenge } from './challenges.js';
import { errorPage } from './html.js';
import { kratosLoginUrl } from './kratos-redirect.js';
import type { RouteContext } from './context.js';

/**
 * GET /login?login_challenge=… — Hydra sends the browser here to authenticate the user.
 *
 * - Hydra says `skip` (it remembers this browser's login): accept at once with the remembered subject.
 * - The browser has a Kratos session (whoami 200): accept with the identity id as subject, unless the
 *   client asked for a fresh login (`prompt=login`) or the login is older than `max_age`.
 * - whoami 403 (second factor pending): send the browser to the Kratos aal2 login, then back here.
 * - Otherwise send the browser through the Kratos login flow (with `refresh=true` for a re-login) and back.
 *
 * A fresh login is recognised without comparing clocks: before sending the user to re-authenticate we
 * record the session's current `authenticated_at` in the return URL (HMAC-signed against tampering);
 * when the user comes back, the session must have been authenticated after that moment.
 */

const FRESH_PARAM = 'fresh_after';

function sign(secret: string, challenge: string, after: string): string {
  return createHmac('sha256', secret).update(`${challenge}\n${after}`).digest('base64url');
}

function freshMarker(secret: string, challenge: string, authenticatedAt: string | undefined): string {
  const after = authenticatedAt ?? '0';
  return `${after}.${sign(secret, challenge, after)}`;
}

/** The instant a re-authentication must be after, if the marker is genuine. */
function readFreshMarker(secret: string, challenge: string, marker: unknown): number | undefined {
  if (typeof marker !== 'string') return undefined;
  const dot = marker.lastIndexOf('.');
  if (dot <= 0) return undefined;
  const after = marker.slice(0, dot);
  if (!safeEqual(marker.slice(dot + 1), sign(secret, challenge, after))) return undefined;
  return after === '0' ? 0 : Date.parse(after);
}

function authParams(loginRequest: OAuth2LoginRequest): { promptLogin: boolean; maxAgeSeconds?: number; wantsAal2: boolean } {
  let params: URLSearchParams;
  try {
    params = new URL(loginRequest.request_url).searchParams;
  } catch {
    return { promptLogin: false, wantsAal2: false };
  }
  const promptLogin = (params.get('prompt') ?? '').split(' ').includes('login');
  const maxAge = params.get('max_age');
  // The step-up of an OAuth2 client (RFC 9470): the API answered AAL2_REQUIRED, the client asks again with acr_values=aal2.
  const wantsAal2 = (params.get('acr_values') ?? '').split(' ').includes('aal2');
  return { promptLogin, wantsAal2, ...(maxAge !== null && /^\d+$/.test(maxAge) ? { maxAgeSeconds: Number(maxAge) } : {}) };
}

export function createLoginRoute(ctx: RouteContext): RequestHandler {
  const { ory, config } = ctx;
  return async (req, res) => {
    const challenge = req.query.login_challenge;
    if (typeof challenge !== 'string' || challenge === '') {
      res.status(400).type('html').send(errorPage('Sign-in link incomplete', 'This page needs a login_challenge. Please start again from the application you came from.'));
      return;
    }

    const loginRequest = await fetchChallenge(res, () => ory.oauth2.getOAuth2LoginRequest({ loginChallenge: challenge }), {
      title: 'Sign-in expired',
      message: 'This sign-in request is unknown or has expired. Please start again from the application you came from.',
    });
    if (!loginRequest) return;

    // A remembered login is accepted at once, unless the client asks for a second factor (acr_values=aal2).
    if (loginRequest.skip && !authParams(loginRequest).wantsAal2) {
      return answerChallenge(res, () => ory.oauth2.acceptOAuth2LoginRequest({ loginChallenge: challenge, acceptOAuth2LoginRequest: { subject: loginRequest.subject } }));
    }

    const here = new URL(`${config.authUrl}/login`);
    here.searchParams.set('login_challenge', challenge);
    const current = await whoami(ory.frontend, { cookie: kratosCookies(req.headers.cookie) });

    if (current.state === 'second-factor-required') {
      return res.redirect(303, kratosLoginUrl(config, here.toString(), { aal2: true }));
    }
    if (current.state === 'anonymous') {
      here.searchParams.set(FRESH_PARAM, freshMarker(config.cookieSecret, challenge, undefined));
      return res.redirect(303, kratosLoginUrl(config, here.toString()));
    }

    const session = current.session;
    const authenticatedAt = session.authenticated_at ? Date.parse(session.authenticated_at) : 0;
    const freshAfter = readFreshMarker(config.cookieSecret, challenge, req.query[FRESH_PARAM]);
    const reauthenticated = freshAfter !== undefined && authenticatedAt > freshAfter;
    const { promptLogin, maxAgeSeconds, wantsAal2 } = authParams(loginRequest);
    if (wantsAal2 && session.authenticator_assurance_level !== 'aal2' && session.authenticator_assurance_level !== 'aal3') {
      return res.redirect(303, kratosLoginUrl(config, here.toString(), { aal2: true }));
    }
    const tooOld = maxAgeSeconds !== undefined && ctx.now() - authenticatedAt > maxAgeSeconds * 1000;
    if ((promptLogin || tooOld) && !reauthenticated) {
      here.searchParams.set(FRESH_PARAM, freshMarker(config.cookieSecret, challenge, session.authenticated_at));
      return res.redirect(303, kratosLoginUrl(config, here.toString(), { refresh: true }));
    }

    return answerChallenge(res, () =>
      ory.oauth2.acceptOAuth2LoginRequest({
        loginChallenge: challenge,
        acceptOAuth2LoginRequest: {
          subject: session.identity.id,
          remember: true,
          remember_for: config.rememberSeconds,
          acr: session.authenticator_assurance_level === 'aal2' ? 'aal2' : 'aal1',
          amr: (session.authentication_methods ?? []).map((m) => m.method).filter((m): m is NonNullable<typeof m> => m !== undefined),
          // Lets Hydra end this Kratos session on OIDC logout (urls.identity_provider in hydra.yml).
          identity_provider_session_id: session.id,
        },
      }),
    );
  };
}
