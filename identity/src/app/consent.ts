import type { Request, RequestHandler, Response } from 'express';
import type { OAuth2ConsentRequest } from '@ory/hydra-client';
import type { Identity } from '@ory/kratos-client';
import { roleFrom } from '../../../services/shared/roles.js';
import { answerChallenge, fetchChallenge } from './challenges.js';
import { errorPage, html, page } from './html.js';
import type { RouteContext } from './context.js';

/**
 * GET /consent?consent_challenge=… shows which scopes a client asks for; POST /consent grants or denies.
 * First-party clients (`skip_consent: true`, set by the client sync for `first_party: true`) and consents
 * Hydra remembers (`skip`) are granted without a screen. The granted session carries email, name and the
 * platform role into the ID token and into the access token (introspection `ext`).
 */

/** Scopes this platform grants; anything else a client asks for is left out. */
const GRANTABLE = ['openid', 'offline_access', 'offline', 'profile', 'email'] as const;

const SCOPE_TEXT: Record<string, string> = {
  openid: 'Confirm who you are',
  offline_access: 'Stay signed in (refresh tokens)',
  offline: 'Stay signed in (refresh tokens)',
  profile: 'Your name',
  email: 'Your e-mail address',
};

function traitsOf(identity: Identity): { email?: string; name?: string } {
  const traits = (identity.traits ?? {}) as Record<string, unknown>;
  return {
    ...(typeof traits.email === 'string' ? { email: traits.email } : {}),
    ...(typeof traits.name === 'string' ? { name: traits.name } : {}),
  };
}

/**
 * The claims for the tokens: the role always (the API needs it), email and name only when their scope
 * was granted. The access token also carries what the API decides on besides the role: whether the
 * e-mail address is verified (`email_verified`: an unverified account may only read) and how the
 * person signed in (`acr` aal1/aal2 and `amr`, from the login the consent belongs to: approvals,
 * deletions and user administration need aal2 for reviewers and admins).
 */
export function sessionClaims(identity: Identity, grantedScopes: string[], login: { acr?: string | undefined; amr?: string[] | undefined } = {}) {
  const { email, name } = traitsOf(identity);
  const role = roleFrom(identity.metadata_public);
  const wanted = email?.toLowerCase();
  const verified = (identity.verifiable_addresses ?? []).some((a) => a.value.toLowerCase() === wanted && a.verified);
  const idToken: Record<string, unknown> = { role };
  if (grantedScopes.includes('email') && email) Object.assign(idToken, { email, email_verified: verified });
  if (grantedScopes.includes('profile') && name) idToken.name = name;
  const accessToken: Record<string, unknown> = {
    role,
    ...(email ? { email } : {}),
    ...(name ? { name } : {}),
    email_verified: verified,
    acr: login.acr === 'aal2' ? 'aal2' : 'aal1',
    ...(login.amr && login.amr.length > 0 ? { amr: login.amr } : {}),
  };
  return { id_token: idToken, access_token: accessToken };
}

export function createConsentRoutes(ctx: RouteContext): { show: RequestHandler; submit: RequestHandler } {
  const { ory, config } = ctx;

  function fetchConsent(challenge: string, res: Response): Promise<OAuth2ConsentRequest | undefined> {
    return fetchChallenge(res, () => ory.oauth2.getOAuth2ConsentRequest({ consentChallenge: challenge }), {
      title: 'Consent expired',
      message: 'This request is unknown or has expired. Please start again from the application you came from.',
    });
  }

  async function grant(res: Response, consent: OAuth2ConsentRequest, remember: boolean): Promise<void> {
    const requested = consent.requested_scope ?? [];
    const grantScope = requested.filter((s) => (GRANTABLE as readonly string[]).includes(s));
    const identity = (await ory.identity.getIdentity({ id: consent.subject as string })).data;
    await answerChallenge(res, () =>
      ory.oauth2.acceptOAuth2ConsentRequest({
        consentChallenge: consent.challenge,
        acceptOAuth2ConsentRequest: {
          grant_scope: grantScope,
          grant_access_token_audience: consent.requested_access_token_audience ?? [],
          remember,
          remember_for: remember ? config.rememberSeconds : 0,
          session: sessionClaims(identity, grantScope, { acr: consent.acr, amr: consent.amr }),
        },
      }),
    );
  }

  const show: RequestHandler = async (req: Request, res: Response) => {
    const challenge = req.query.consent_challenge;
    if (typeof challenge !== 'string' || challenge === '') {
      res.status(400).type('html').send(errorPage('Consent link incomplete', 'This page needs a consent_challenge.'));
      return;
    }
    const consent = await fetchConsent(challenge, res);
    if (!consent) return;
    if (consent.skip || consent.client?.skip_consent) {
      await grant(res, consent, true);
      return;
    }
    const clientName = consent.client?.client_name || consent.client?.client_id || 'An application';
    const scopes = (consent.requested_scope ?? []).filter((s) => (GRANTABLE as readonly string[]).includes(s));
    res.type('html').send(
      page(
        'Allow access?',
        html`<p><strong>${clientName}</strong> would like to:</p>
<ul class="scopes">${scopes.map((s) => html`<li>${SCOPE_TEXT[s] ?? s}</li>`)}</ul>
<form method="post" action="/consent">
<input type="hidden" name="_csrf" value="${ctx.csrfToken(req, res)}">
<input type="hidden" name="consent_challenge" value="${challenge}">
<label><input type="checkbox" name="remember" value="1" checked> Remember this decision</label>
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button>
</form>`,
      ),
    );
  };

  const submit: RequestHandler = async (req: Request, res: Response) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const challenge = body.consent_challenge;
    if (typeof challenge !== 'string' || challenge === '' || (body.decision !== 'allow' && body.decision !== 'deny')) {
      res.status(400).type('html').send(errorPage('Incomplete form', 'The consent form was incomplete. Please start again.'));
      return;
    }
    if (body.decision === 'deny') {
      return answerChallenge(res, () =>
        ory.oauth2.rejectOAuth2ConsentRequest({
          consentChallenge: challenge,
          rejectOAuth2Request: { error: 'access_denied', error_description: 'The resource owner denied the request' },
        }),
      );
    }
    // Scopes come from Hydra again, never from the form: a tampered form cannot widen the grant.
    const consent = await fetchConsent(challenge, res);
    if (!consent) return;
    await grant(res, consent, body.remember === '1');
  };

  return { show, submit };
}
