import type { Request, RequestHandler, Response } from 'express';
import type { LoginFlow, UpdateLoginFlowBody, UiNode, UiNodeInputAttributes, UiNodeScriptAttributes, UiText } from '@ory/kratos-client';
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

/**
 * The passkey part of a login flow, when Kratos offers one (selfservice.methods.passkey): its hidden
 * inputs (the WebAuthn challenge, the field the browser's answer goes into), the trigger button, and
 * Kratos' webauthn.js, which defines the trigger (window.oryPasskeyLogin): it asks the browser for the
 * key, writes the answer into passkey_login and submits the form, which posts to this app like the
 * password form does (CSRF check, rate limit per IP, cookie relay).
 */
export interface PasskeyPart {
  hidden: { name: string; value: string }[];
  trigger: string;
  label: string;
  scripts: UiNodeScriptAttributes[];
}

export function passkeyPart(flow: LoginFlow): PasskeyPart | undefined {
  const nodes = flow.ui.nodes.filter((n) => n.group === 'passkey');
  const inputs = nodes.map(inputAttributes).filter((a): a is UiNodeInputAttributes => a !== undefined);
  const trigger = inputs.find((a) => typeof a.onclickTrigger === 'string');
  if (!trigger?.onclickTrigger) return undefined;
  const triggerNode = nodes.find((n) => inputAttributes(n) === trigger);
  return {
    hidden: inputs.filter((a) => a.type === 'hidden').map((a) => ({ name: a.name, value: typeof a.value === 'string' ? a.value : a.value === undefined || a.value === null ? '' : JSON.stringify(a.value) })),
    trigger: trigger.onclickTrigger,
    label: triggerNode?.meta.label?.text ?? 'Sign in with a passkey',
    scripts: flow.ui.nodes.filter((n) => n.attributes.node_type === 'script').map((n) => n.attributes as UiNodeScriptAttributes),
  };
}

/** The script origins a page with this flow needs: Kratos' own (webauthn.js) besides this app. */
export function scriptOrigins(flow: LoginFlow): string[] {
  const part = passkeyPart(flow);
  if (!part) return [];
  return [...new Set(part.scripts.filter((s) => URL.canParse(s.src)).map((s) => new URL(s.src).origin))];
}

function renderPasskeyForm(flow: LoginFlow, csrf: string, part: PasskeyPart): SafeHtml {
  return html`<form method="post" action="/self-service/login" id="passkey-login">
<input type="hidden" name="_csrf" value="${csrf}">
<input type="hidden" name="flow" value="${flow.id}">
<input type="hidden" name="csrf_token" value="${kratosCsrfToken(flow)}">
<input type="hidden" name="method" value="passkey">
${part.hidden.filter((h) => !['csrf_token', 'method'].includes(h.name)).map((h) => html`<input type="hidden" name="${h.name}" value="${h.value}">
`)}<button type="button" class="secondary" data-ory-trigger="${part.trigger}">${part.label}</button>
</form>
${part.scripts.map((s) => html`<script src="${s.src}"${s.integrity ? html` integrity="${s.integrity}"` : ''} crossorigin="${s.crossorigin || 'anonymous'}" referrerpolicy="${s.referrerpolicy || 'no-referrer'}"${s.nonce ? html` nonce="${s.nonce}"` : ''}></script>
`)}<script src="/assets/ory-triggers.js"></script>`;
}

/**
 * The social sign-in providers a flow offers (Kratos' UI nodes of group "oidc": a submit button named
 * `provider` per configured provider, labelled "Sign in with …"). Nothing is hard-coded here: the
 * operator's providers appear as Kratos lists them.
 */
export function oidcProviders(flow: LoginFlow): { id: string; label: string }[] {
  return flow.ui.nodes
    .filter((n) => n.group === 'oidc')
    .map((n) => ({ node: n, attributes: inputAttributes(n) }))
    .filter(({ attributes }) => attributes?.name === 'provider' && typeof attributes.value === 'string')
    .map(({ node, attributes }) => ({ id: String(attributes!.value), label: node.meta.label?.text ?? `Sign in with ${String(attributes!.value)}` }));
}

function renderOidcForm(flow: LoginFlow, csrf: string, providers: { id: string; label: string }[]): SafeHtml {
  return html`<form method="post" action="/self-service/login" id="oidc-login" aria-label="Sign in with another account">
<input type="hidden" name="_csrf" value="${csrf}">
<input type="hidden" name="flow" value="${flow.id}">
<input type="hidden" name="csrf_token" value="${kratosCsrfToken(flow)}">
<input type="hidden" name="method" value="oidc">
${providers.map((p) => html`<button type="submit" class="secondary" name="provider" value="${p.id}">${p.label}</button>
`)}</form>`;
}

/** Whether an aal2 flow asks for a TOTP code (Kratos' totp method nodes), which this app renders itself. */
function asksTotp(flow: LoginFlow): boolean {
  return flow.ui.nodes.some((n) => n.group === 'totp' && inputAttributes(n)?.name === 'totp_code');
}

function messageList(flow: LoginFlow): { errorList?: SafeHtml; infoList?: SafeHtml } {
  const all = messages(flow);
  const errors = all.filter((m) => m.type === 'error');
  const infos = all.filter((m) => m.type !== 'error');
  return {
    ...(errors.length > 0 ? { errorList: html`<div class="error" role="alert" id="login-errors">${errors.map((m) => html`<p>${m.text}</p>`)}</div>` } : {}),
    ...(infos.length > 0 ? { infoList: html`<div role="status" id="login-info">${infos.map((m) => html`<p>${m.text}</p>`)}</div>` } : {}),
  };
}

/** The second factor: the code of the person's authenticator app, posted here like the password. */
function renderTotpForm(flow: LoginFlow, csrf: string): string {
  const { errorList, infoList } = messageList(flow);
  return page(
    'Second factor',
    html`${errorList}${infoList}
<p>Enter the six-digit code your authenticator app shows for this account.</p>
<form method="post" action="/self-service/login" novalidate>
<input type="hidden" name="_csrf" value="${csrf}">
<input type="hidden" name="flow" value="${flow.id}">
<input type="hidden" name="csrf_token" value="${kratosCsrfToken(flow)}">
<input type="hidden" name="method" value="totp">
<label for="totp_code">Authentication code</label>
<input type="text" id="totp_code" name="totp_code" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9]{6}" maxlength="6" required${errorList ? html` aria-describedby="login-errors" aria-invalid="true"` : ''}>
<button type="submit">Confirm</button>
</form>`,
  );
}

function renderForm(flow: LoginFlow, csrf: string, identifier: string, kratosPublicUrl: string): string {
  const { errorList, infoList } = messageList(flow);
  const title = flow.refresh ? 'Confirm it is you' : 'Sign in';
  const passkey = passkeyPart(flow);
  const providers = oidcProviders(flow);
  // A sign-in to link a provider to an existing account comes with the account's e-mail (Kratos' node value).
  const prefilled = identifier || String(flow.ui.nodes.map(inputAttributes).find((a) => a?.name === 'identifier')?.value ?? '');
  return page(
    title,
    html`${errorList}${infoList}
<form method="post" action="/self-service/login" novalidate>
<input type="hidden" name="_csrf" value="${csrf}">
<input type="hidden" name="flow" value="${flow.id}">
<input type="hidden" name="csrf_token" value="${kratosCsrfToken(flow)}">
<label for="identifier">E-mail</label>
<input type="email" id="identifier" name="identifier" autocomplete="username" required value="${prefilled}"${errorList ? html` aria-describedby="login-errors" aria-invalid="true"` : ''}>
<label for="password">Password</label>
<input type="password" id="password" name="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>
${passkey ? renderPasskeyForm(flow, csrf, passkey) : undefined}
${providers.length > 0 ? renderOidcForm(flow, csrf, providers) : undefined}
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
      // A TOTP code is a form like the password, rendered here (rate limits and CSRF apply to it too).
      if (asksTotp(flow)) {
        res.type('html').send(renderTotpForm(flow, ctx.csrfToken(req, res)));
        return;
      }
      // WebAuthn keys need the official UI (and its script); it renders this same flow.
      if (config.accountsUrl) return res.redirect(303, `${config.accountsUrl}/login?flow=${encodeURIComponent(flow.id)}`);
      res.status(501).type('html').send(errorPage('Second factor', 'The second-factor pages are not configured (IDENTITY_ACCOUNTS_URL). Please contact the administrators.'));
      return;
    }
    allowScripts(res, flow);
    res.type('html').send(renderForm(flow, ctx.csrfToken(req, res), '', config.kratosPublicUrl));
  };

  /** Only a page with a passkey part loads scripts: this app's trigger binder and Kratos' webauthn.js. */
  function allowScripts(res: Response, flow: LoginFlow): void {
    const origins = scriptOrigins(flow);
    if (origins.length === 0) return;
    const current = String(res.getHeader('Content-Security-Policy') ?? '');
    res.setHeader('Content-Security-Policy', `${current}; script-src 'self' ${origins.join(' ')}; connect-src 'self'`);
  }

  const submit: RequestHandler = async (req, res) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const { flow: id, identifier, password, csrf_token: csrfToken } = body;
    if (body.method === 'passkey') return submitPasskey(req, res, body);
    if (body.method === 'oidc') return submitOidc(req, res, body);
    if (body.method === 'totp') return submitTotp(req, res, body);
    if (typeof id !== 'string' || typeof identifier !== 'string' || typeof password !== 'string' || typeof csrfToken !== 'string' || id === '') {
      res.status(400).type('html').send(page('Sign in', html`<p class="error" role="alert">The form was incomplete. Please try again.</p>`));
      return;
    }
    // Wrong credentials: Kratos answers the flow with its messages. Counted by the per-account limiter.
    await completeLogin(req, res, id, { method: 'password', identifier, password, csrf_token: csrfToken }, (again) => {
      res.status(400).type('html').send(renderForm(again, ctx.csrfToken(req, res), identifier, config.kratosPublicUrl));
    });
  };

  /**
   * Sends a login method's answer to Kratos: the session cookie and the flow's return_to on success; on
   * Kratos' 400 the flow again, with its messages, to `refused`; a browser redirect Kratos asks for (422);
   * a fresh flow when this one expired or was refused (403, 410).
   */
  async function completeLogin(req: Request, res: Response, id: string, body: UpdateLoginFlowBody, refused: (again: LoginFlow) => void): Promise<void> {
    const flow = await loadFlow(req, res, id);
    if (!flow) return;
    const cookie = kratosCookies(req.headers.cookie);
    try {
      const response = await ory.frontend.updateLoginFlow({ flow: id, ...(cookie ? { cookie } : {}), updateLoginFlowBody: body });
      const setCookie = response.headers['set-cookie'];
      if (setCookie) res.append('Set-Cookie', setCookie);
      res.redirect(303, flow.return_to ?? config.appUrl);
    } catch (error) {
      const status = oryStatus(error);
      if (status === 400 && isAxiosError(error)) return refused(oryBody(error) as LoginFlow);
      if (status === 422) {
        const target = (oryBody(error) as { redirect_browser_to?: string } | undefined)?.redirect_browser_to;
        // A social sign-in: Kratos' continuity cookie binds the provider's callback to this browser.
        const setCookie = isAxiosError(error) ? error.response?.headers['set-cookie'] : undefined;
        if (setCookie) res.append('Set-Cookie', setCookie);
        if (target) return res.redirect(303, target);
      }
      if (status === 403 || status === 410) return restart(res, flow.return_to);
      throw error;
    }
  }

  /** A provider button: Kratos answers with the provider's authorization URL (422), where the browser goes. */
  async function submitOidc(req: Request, res: Response, body: Record<string, unknown>): Promise<void> {
    const { flow: id, provider, csrf_token: csrfToken } = body;
    if (typeof id !== 'string' || id === '' || typeof provider !== 'string' || !/^[a-z0-9][a-z0-9_-]{0,62}$/.test(provider) || typeof csrfToken !== 'string') {
      res.status(400).type('html').send(page('Sign in', html`<p class="error" role="alert">The form was incomplete. Please try again.</p>`));
      return;
    }
    await completeLogin(req, res, id, { method: 'oidc', provider, csrf_token: csrfToken }, (again) => {
      res.status(400).type('html').send(renderForm(again, ctx.csrfToken(req, res), '', config.kratosPublicUrl));
    });
  }

  /** The second factor's code, forwarded to Kratos with the browser's session (which it raises to aal2). */
  async function submitTotp(req: Request, res: Response, body: Record<string, unknown>): Promise<void> {
    const { flow: id, totp_code: code, csrf_token: csrfToken } = body;
    if (typeof id !== 'string' || id === '' || typeof code !== 'string' || !/^\d{6,8}$/.test(code.trim()) || typeof csrfToken !== 'string') {
      res.status(400).type('html').send(page('Second factor', html`<p class="error" role="alert">Please enter the six-digit code of your authenticator app.</p>`));
      return;
    }
    await completeLogin(req, res, id, { method: 'totp', totp_code: code.trim(), csrf_token: csrfToken }, (again) => {
      res.status(400).type('html').send(renderTotpForm(again, ctx.csrfToken(req, res)));
    });
  }

  /** The browser's passkey answer (written by webauthn.js), forwarded to Kratos like a password. */
  async function submitPasskey(req: Request, res: Response, body: Record<string, unknown>): Promise<void> {
    const { flow: id, passkey_login: passkeyLogin, csrf_token: csrfToken } = body;
    if (typeof id !== 'string' || id === '' || typeof passkeyLogin !== 'string' || passkeyLogin === '' || typeof csrfToken !== 'string') {
      res.status(400).type('html').send(page('Sign in', html`<p class="error" role="alert">The passkey answer was missing. Please try again.</p>`));
      return;
    }
    await completeLogin(req, res, id, { method: 'passkey', passkey_login: passkeyLogin, csrf_token: csrfToken }, (again) => {
      allowScripts(res, again);
      res.status(400).type('html').send(renderForm(again, ctx.csrfToken(req, res), '', config.kratosPublicUrl));
    });
  }

  return { show, submit };
}
