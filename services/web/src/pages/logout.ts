import type { APIRoute } from 'astro';
import { kratosCookies } from '../../../shared/ory/kratos-session.js';
import { oryStatus } from '../../../shared/ory/clients.js';
import { webConfig } from '../config.js';
import { DEV_TOKEN_COOKIE, kratosFrontend } from '../lib/session.js';

/**
 * "Abmelden": ends the development sign-in, and a Kratos session:
 * - with LOGOUT_URL (the platform's sites: Hydra's end-session endpoint), the browser goes there; the
 *   logout app asks, then ends the Kratos session and Hydra's login, so no site or OAuth2 client keeps
 *   the person signed in (Kratos' logout alone would leave Hydra's remembered login, which signs the
 *   next OAuth2 client in without asking);
 * - otherwise the browser is sent to the logout URL Kratos hands out for its session cookie (a
 *   single-use token), and Kratos sends it back to the map.
 * Without a Kratos session (or without Kratos) it is the map at once. When Kratos cannot be asked,
 * 503: the person must not believe they signed out while their session lives on.
 */
export const GET: APIRoute = async ({ cookies, redirect, request }) => {
  cookies.delete(DEV_TOKEN_COOKIE, { path: '/' });
  const config = webConfig();
  const cookie = kratosCookies(request.headers.get('cookie') ?? undefined);
  if (!config.kratosPublicUrl || !cookie) return redirect('/', 303);
  if (config.logoutUrl) return redirect(config.logoutUrl, 303);
  try {
    const { data } = await kratosFrontend(config.kratosPublicUrl).createBrowserLogoutFlow({ cookie, returnTo: `${config.publicBaseUrl}/` });
    return redirect(data.logout_url, 303);
  } catch (error) {
    // 401: no session behind the cookie (expired, or ended elsewhere): nothing to end.
    if (oryStatus(error) === 401) return redirect('/', 303);
    return new Response('Abmelden ist gerade nicht möglich: das Konto-System antwortet nicht. Bitte später erneut versuchen.\n', {
      status: 503,
      headers: { 'content-type': 'text/plain; charset=utf-8', 'retry-after': '30', 'cache-control': 'no-store' },
    });
  }
};
