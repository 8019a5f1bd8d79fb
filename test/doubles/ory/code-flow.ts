import { randomUUID } from 'node:crypto';
import { Configuration, OAuth2Api } from '@ory/hydra-client';
import type { HydraDouble } from '../../../services/shared/testing/ory/hydra-double.js';

/**
 * An opaque access token from the Hydra double through the authorization code flow: a fresh client,
 * the login and consent accepted through Hydra's admin API as the login/consent app does (with the
 * official client), the code redeemed at the token endpoint. `accessTokenSession` is what the consent
 * puts into the token's session (the role); `audience`, when given, is requested, allowed to the
 * client and granted.
 */
export async function issueOpaqueToken(hydra: HydraDouble, subject: string, accessTokenSession: Record<string, unknown>, audience?: string[]): Promise<string> {
  const oauth2 = new OAuth2Api(new Configuration({ basePath: hydra.admin.url }));
  const redirectUri = 'http://127.0.0.1:9/cb';
  const client = hydra.addClient({ client_id: `c-${randomUUID()}`, redirect_uris: [redirectUri], token_endpoint_auth_method: 'client_secret_post', ...(audience ? { audience } : {}) });
  const audienceParam = audience && audience.length > 0 ? `&audience=${encodeURIComponent(audience.join(' '))}` : '';
  const auth = await fetch(`${hydra.public.url}/oauth2/auth?client_id=${client.client_id}&response_type=code&scope=openid&state=abcdefgh&redirect_uri=${encodeURIComponent(redirectUri)}${audienceParam}`, { redirect: 'manual' });
  const loginChallenge = new URL(auth.headers.get('location') as string).searchParams.get('login_challenge') as string;
  const afterLogin = (await oauth2.acceptOAuth2LoginRequest({ loginChallenge, acceptOAuth2LoginRequest: { subject } })).data.redirect_to;
  const toConsent = await fetch(afterLogin, { redirect: 'manual' });
  const consentChallenge = new URL(toConsent.headers.get('location') as string).searchParams.get('consent_challenge') as string;
  const consent = { grant_scope: ['openid'], ...(audience ? { grant_access_token_audience: audience } : {}), session: { access_token: accessTokenSession } };
  const afterConsent = (await oauth2.acceptOAuth2ConsentRequest({ consentChallenge, acceptOAuth2ConsentRequest: consent })).data.redirect_to;
  const toCallback = await fetch(afterConsent, { redirect: 'manual' });
  const code = new URL(toCallback.headers.get('location') as string).searchParams.get('code') as string;
  const token = await fetch(`${hydra.public.url}/oauth2/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: redirectUri, client_id: client.client_id, client_secret: client.client_secret as string }),
  });
  return ((await token.json()) as { access_token: string }).access_token;
}
