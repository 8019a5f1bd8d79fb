/**
 * A stand-in for the `oryd/kratos-selfservice-ui-node` image (the accounts domain), which cannot run
 * here. It does for /registration what that image does, from the same environment variables:
 *
 * - without `?flow=` it sends the browser to Kratos' `/self-service/registration/browser` on
 *   KRATOS_BROWSER_URL (passing `return_to` on), which creates a flow and comes back with its id;
 * - with `?flow=` it fetches the flow from Kratos server-side on KRATOS_PUBLIC_URL, forwarding the
 *   browser's Cookie header (Kratos checks its CSRF cookie), and renders the flow's UI nodes as an
 *   HTML form posting to `flow.ui.action` — the browser then talks to Kratos directly;
 * - a flow Kratos no longer gives out (403/404/410) starts a new one, as the image does.
 *
 * It serves /health/alive for the declared health check. Nothing else of the image (login, settings,
 * recovery, its own CSRF cookie) is modelled: the login app serves the login pages in this stack.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { closeGracefully, listen } from '../../services/shared/http-server.js';

export interface AccountsUiEnv {
  /** Where this container reaches Kratos' public API (server-side calls). */
  KRATOS_PUBLIC_URL: string;
  /** Where browsers reach Kratos' public API (redirects). */
  KRATOS_BROWSER_URL: string;
}

interface UiNode {
  type: string;
  group: string;
  attributes: { name?: string; type?: string; value?: unknown; required?: boolean; disabled?: boolean; autocomplete?: string; node_type: string };
  messages?: UiText[];
  meta: { label?: UiText };
}

interface UiText {
  id: number;
  text: string;
  type: string;
}

interface RegistrationFlow {
  id: string;
  ui: { action: string; method: string; messages?: UiText[]; nodes: UiNode[] };
}

const escapeHtml = (value: string): string =>
  value.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

function messagesHtml(messages: UiText[] | undefined): string {
  return (messages ?? []).map((m) => `<p role="${m.type === 'error' ? 'alert' : 'status'}">${escapeHtml(m.text)}</p>`).join('\n');
}

/** One UI node as the image's form renders it: hidden inputs bare, submits as buttons, the rest labelled. */
function nodeHtml(node: UiNode): string {
  if (node.type !== 'input' || !node.attributes.name) return '';
  const { name, type = 'text', value, required, disabled, autocomplete } = node.attributes;
  const label = node.meta.label?.text ?? name;
  const valueAttr = value === undefined || value === null ? '' : ` value="${escapeHtml(String(value))}"`;
  const flags = `${required ? ' required' : ''}${disabled ? ' disabled' : ''}${autocomplete ? ` autocomplete="${escapeHtml(autocomplete)}"` : ''}`;
  if (type === 'hidden') return `<input type="hidden" name="${escapeHtml(name)}"${valueAttr}>`;
  if (type === 'submit' || type === 'button') return `<button type="${type}" name="${escapeHtml(name)}"${valueAttr}${flags}>${escapeHtml(label)}</button>`;
  return `<label>${escapeHtml(label)} <input type="${escapeHtml(type)}" name="${escapeHtml(name)}"${valueAttr}${flags}></label>${messagesHtml(node.messages)}`;
}

export function registrationPage(flow: RegistrationFlow): string {
  return `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Create account</title></head>
<body>
<main>
<h1>Create account</h1>
${messagesHtml(flow.ui.messages)}
<form action="${escapeHtml(flow.ui.action)}" method="${escapeHtml(flow.ui.method)}">
${flow.ui.nodes.map(nodeHtml).filter(Boolean).join('\n')}
</form>
</main>
</body>
</html>`;
}

export function createAccountsUi(env: AccountsUiEnv): Server {
  const kratosPublic = env.KRATOS_PUBLIC_URL.replace(/\/$/, '');
  const kratosBrowser = env.KRATOS_BROWSER_URL.replace(/\/$/, '');
  const redirect = (res: ServerResponse, location: string) => res.writeHead(303, { location }).end();

  const registration = async (req: IncomingMessage, res: ServerResponse, url: URL) => {
    const flowId = url.searchParams.get('flow');
    const returnTo = url.searchParams.get('return_to');
    const startFlow = `${kratosBrowser}/self-service/registration/browser${returnTo ? `?return_to=${encodeURIComponent(returnTo)}` : ''}`;
    if (!flowId) return redirect(res, startFlow);
    const response = await fetch(`${kratosPublic}/self-service/registration/flows?id=${encodeURIComponent(flowId)}`, {
      headers: { accept: 'application/json', ...(req.headers.cookie ? { cookie: req.headers.cookie } : {}) },
    });
    // An expired, foreign (CSRF) or unknown flow: start over, as the image does.
    if ([403, 404, 410].includes(response.status)) return redirect(res, startFlow);
    if (!response.ok) {
      res.writeHead(502, { 'content-type': 'text/plain; charset=utf-8' }).end(`Kratos answered ${response.status}`);
      return;
    }
    const flow = (await response.json()) as RegistrationFlow;
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'private, no-store' }).end(registrationPage(flow));
  };

  return createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://accounts-ui');
    if (req.method !== 'GET' && req.method !== 'HEAD') return void res.writeHead(405, { allow: 'GET, HEAD' }).end();
    if (url.pathname === '/health/alive' || url.pathname === '/health/ready') return void res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
    if (url.pathname === '/registration') {
      registration(req, res, url).catch((error: Error) => {
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain; charset=utf-8' }).end(`Kratos not reachable: ${error.message}`);
      });
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
  });
}

export async function startAccountsUi(env: AccountsUiEnv, port: number): Promise<{ url: string; close(): Promise<void> }> {
  const server = createAccountsUi(env);
  const bound = await listen(server, port, '127.0.0.1');
  return { url: `http://127.0.0.1:${bound}`, close: () => closeGracefully(server, 1000) };
}
