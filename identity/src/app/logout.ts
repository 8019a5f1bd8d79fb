import type { Request, RequestHandler, Response } from 'express';
import type { OAuth2LogoutRequest } from '@ory/hydra-client';
import { kratosCookies, whoami } from '../../../services/shared/ory/kratos-session.js';
import { oryStatus } from '../../../services/shared/ory/clients.js';
import { answerChallenge, fetchChallenge } from './challenges.js';
import { errorPage, html, page } from './html.js';
import type { RouteContext } from './context.js';

/**
 * GET /logout?logout_challenge=… — Hydra's logout request. A logout a client started with a valid
 * id_token_hint (`rp_initiated`) proceeds at once; otherwise the user confirms with a form (a link alone
 * must not be able to sign someone out). Accepting ends the browser's Kratos session (admin API),
 * revokes the subject's consent sessions (so every token Hydra issued for them stops working) and then
 * ends Hydra's login session, so the user is signed out of every subdomain and every client.
 */
export function createLogoutRoutes(ctx: RouteContext): { show: RequestHandler; submit: RequestHandler } {
  const { ory, config } = ctx;

  function fetchLogout(challenge: string, res: Response): Promise<OAuth2LogoutRequest | undefined> {
    return fetchChallenge(res, () => ory.oauth2.getOAuth2LogoutRequest({ logoutChallenge: challenge }), {
      title: 'Sign-out expired',
      message: 'This sign-out request is unknown or has expired.',
    });
  }

  async function endKratosSession(req: Request): Promise<void> {
    const current = await whoami(ory.frontend, { cookie: kratosCookies(req.headers.cookie) });
    if (current.state !== 'authenticated') return;
    try {
      await ory.identity.disableSession({ id: current.session.id });
    } catch (error) {
      // Already gone is fine: the goal is a session that no longer works.
      if (oryStatus(error) !== 404 && oryStatus(error) !== 400) throw error;
    }
  }

  /**
   * Hydra's logout ends its login session only; the access and refresh tokens its clients hold stay
   * valid until they expire. Signing out everywhere revokes the subject's consent sessions too, which
   * invalidates every token issued for them (the API then refuses them once its introspection cache,
   * INTROSPECTION_CACHE_SECONDS, has let go).
   */
  async function revokeTokens(challenge: string): Promise<void> {
    const { subject } = (await ory.oauth2.getOAuth2LogoutRequest({ logoutChallenge: challenge })).data;
    if (!subject) return;
    await ory.oauth2.revokeOAuth2ConsentSessions({ subject, all: true });
  }

  async function accept(req: Request, res: Response, challenge: string): Promise<void> {
    await endKratosSession(req);
    try {
      await revokeTokens(challenge);
    } catch (error) {
      // A challenge already answered (410) or unknown (404) is answered below as such.
      if (oryStatus(error) !== 404 && oryStatus(error) !== 410) throw error;
    }
    await answerChallenge(res, () => ory.oauth2.acceptOAuth2LogoutRequest({ logoutChallenge: challenge }));
  }

  const show: RequestHandler = async (req, res) => {
    const challenge = req.query.logout_challenge;
    if (typeof challenge !== 'string' || challenge === '') {
      res.status(400).type('html').send(errorPage('Sign-out link incomplete', 'This page needs a logout_challenge.'));
      return;
    }
    const logout = await fetchLogout(challenge, res);
    if (!logout) return;
    if (logout.rp_initiated) {
      await accept(req, res, challenge);
      return;
    }
    res.type('html').send(
      page(
        'Sign out?',
        html`<p>Do you want to sign out of every site of the platform?</p>
<form method="post" action="/logout">
<input type="hidden" name="_csrf" value="${ctx.csrfToken(req, res)}">
<input type="hidden" name="logout_challenge" value="${challenge}">
<button type="submit" name="decision" value="yes">Sign out</button>
<button type="submit" name="decision" value="no" class="secondary">Stay signed in</button>
</form>`,
      ),
    );
  };

  const submit: RequestHandler = async (req, res) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const challenge = body.logout_challenge;
    if (typeof challenge !== 'string' || challenge === '' || (body.decision !== 'yes' && body.decision !== 'no')) {
      res.status(400).type('html').send(errorPage('Incomplete form', 'The sign-out form was incomplete.'));
      return;
    }
    if (body.decision === 'yes') {
      await accept(req, res, challenge);
      return;
    }
    try {
      await ory.oauth2.rejectOAuth2LogoutRequest({ logoutChallenge: challenge });
    } catch (error) {
      if (oryStatus(error) !== 410 && oryStatus(error) !== 404) throw error;
    }
    res.redirect(303, config.appUrl);
  };

  return { show, submit };
}
