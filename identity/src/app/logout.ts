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
 * must not be able to sign someone out). Accepting ends the browser's Kratos session (admin API) and
 * then Hydra's, so the user is signed out of every subdomain.
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

  async function accept(req: Request, res: Response, challenge: string): Promise<void> {
    await endKratosSession(req);
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
