import type { Request, RequestHandler, Response } from 'express';
import type { LoginFlow, UiNode, UiNodeInputAttributes, UiText } from '@ory/kratos-client';
import { isAxiosError } from 'axios';
import { kratosCookies } from '../../../services/shared/ory/kratos-session.js';
import { oryBody, oryStatus } from '../../../services/shared/ory/clients.js';
import { errorPage, html, page, type SafeHtml } from './html.js';
import { kratosLoginUrl } from './kratos-redirect.js';
import type { RouteContext } from './context.js';

/**
 * Our page for Kratos' browser login flow (selfservice.flows.login.ui_url = {auth_url}/self-service/login).
 *
 * The password form posts to this app, not to Kratos, so the login rate limits (per IP, per account) and
 * our CSRF check run first; the app then submits the flow to Kratos with the browser's Kratos cookies
 * and relays Kratos' Set-Cookie (the session cookie on the parent domain) back to the browser.
 */

function inputAttributes(node: UiNode): UiNodeInputAttributes | undefined {
  return node.attributes.node_type === 'input' ? (node.attributes as UiNodeInputAttributes) : undefined;
}

function kratosCsrfToken(flow: LoginFlow): string {
  const node = flow.ui.nodes.map(inputAttributes).find((a) => a?.name === 'csrf_token');
  return typeof node?.value === 'string' ? node.value : '';
}

function messages(flow: LoginFlow): UiText[] {
  return [...(flow.ui.messages ?? []), ...flow.ui.nodes.flatMap((n) => n.messages ?? [])];
}

function renderForm(flow: LoginFlow, csrf: string, identifier: string, kratosPublicUrl: string): string {
  const errors = messages(flow).filter((m) => m.type === 'error');
  const errorList: SafeHtml | undefined = errors.length > 0 ? html`<div class="error" role="alert" id="login-errors">${errors.map((m) => html`<p>${m.text}</p>`)}</div>` : undefined;
  const title = flow.refresh ? 'Confirm it is you' : 'Sign in';
  return page(
    title,
    html`${errorList}
<form method="post" action="/self-service/login" novalidate>
<input type="hidden" name="_csrf" value="${csrf}">
<input type="hidden" name="flow" value="${flow.id}">
<input type="hidden" name="csrf_token" value="${kratosCsrfToken(flow)}">
<label for="identifier">E-mail</label>
<input type="email" id="identifier" name="identifier" autocomplete="username" required value="${identifier}"${errorList ? html` aria-describedby="login-errors" aria-invalid="true"` : ''}>
<label for="password">Password</label>
<input type="password" id="password" name="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>
<p><a href="${kratosPublicUrl}/self-service/recovery/browser">Forgot your password?</a> · <a href="${kratosPublicUrl}/self-service/registration/browser">Create an account</a></p>`,
  );
}

export function createSelfServiceLoginRoutes(ctx: RouteContext): { show: RequestHandler; submit: RequestHandler } {
  const { ory, config } = ctx;

  const restart = (res: Response, returnTo?: string) => res.redirect(303, kratosLoginUrl(config, returnTo ?? config.appUrl));

  async function loadFlow(req: Request, res: Response, id: string): Promise<LoginFlow | undefined> {
    try {
      return (await ory.frontend.getLoginFlow({ id, cookie: kratosCookies(req.headers.cookie) })).data;
    } catch (error) {
      // Expired (410), unknown (404) or from another browser (403 CSRF): start a new flow.
      if ([403, 404, 410].includes(oryStatus(error) ?? 0)) {
        restart(res);
        return undefined;
      }
      throw error;
    }
  }

  const show: RequestHandler = async (req, res) => {
    const id = req.query.flow;
    if (typeof id !== 'string' || id === '') {
      const returnTo = typeof req.query.return_to === 'string' ? req.query.return_to : undefined;
      return restart(res, returnTo);
    }
    const flow = await loadFlow(req, res, id);
    if (!flow) return;
    if (flow.requested_aal === 'aal2') {
      // TOTP, WebAuthn and passkeys need the official UI (and its script); it renders this same flow.
      if (config.accountsUrl) return res.redirect(303, `${config.accountsUrl}/login?flow=${encodeURIComponent(flow.id)}`);
      res.status(501).type('html').send(errorPage('Second factor', 'The second-factor pages are not configured (IDENTITY_ACCOUNTS_URL). Please contact the administrators.'));
      return;
    }
    res.type('html').send(renderForm(flow, ctx.csrfToken(req, res), '', config.kratosPublicUrl));
  };

  const submit: RequestHandler = async (req, res) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const { flow: id, identifier, password, csrf_token: csrfToken } = body;
    if (typeof id !== 'string' || typeof identifier !== 'string' || typeof password !== 'string' || typeof csrfToken !== 'string' || id === '') {
      res.status(400).type('html').send(page('Sign in', html`<p class="error" role="alert">The form was incomplete. Please try again.</p>`));
      return;
    }
    const flow = await loadFlow(req, res, id);
    if (!flow) return;
    const cookie = kratosCookies(req.headers.cookie);
    try {
      const response = await ory.frontend.updateLoginFlow({
        flow: id,
        ...(cookie ? { cookie } : {}),
        updateLoginFlowBody: { method: 'password', identifier, password, csrf_token: csrfToken },
      });
      const setCookie = response.headers['set-cookie'];
      if (setCookie) res.append('Set-Cookie', setCookie);
      res.redirect(303, flow.return_to ?? config.appUrl);
    } catch (error) {
      const status = oryStatus(error);
      if (status === 400 && isAxiosError(error)) {
        // Wrong credentials: Kratos answers the flow with its messages. Counted by the per-account limiter.
        res.status(400).type('html').send(renderForm(oryBody(error) as LoginFlow, ctx.csrfToken(req, res), identifier, config.kratosPublicUrl));
        return;
      }
      if (status === 422) {
        const target = (oryBody(error) as { redirect_browser_to?: string } | undefined)?.redirect_browser_to;
        if (target) return res.redirect(303, target);
      }
      if (status === 403 || status === 410) return restart(res, flow.return_to);
      throw error;
    }
  };

  return { show, submit };
}
