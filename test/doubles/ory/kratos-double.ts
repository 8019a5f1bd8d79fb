import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { contractPath } from '../../../services/shared/contracts.js';
import { ContractServer, type DoubleRequest, type DoubleResponse } from './contract-server.js';
import { OpenApiContract } from './openapi-contract.js';
import { TestClock } from './clock.js';

/**
 * A double of Ory Kratos v26.2.0: the public port (whoami, browser login flows) and the admin port
 * (identities, sessions), each a real HTTP server checked against the vendored spec__api.json.
 *
 * Behaviour modelled on Kratos, kept small: identities with an e-mail/password credential and
 * optionally a second factor; `session.whoami.required_aal: highest_available` (an aal1 session of a
 * user with a second factor gets 403 session_aal2_required); browser login flows with a CSRF cookie,
 * `refresh`, `aal` and `return_to` checked against the allowed return URLs; browser registration
 * flows (password method, traits of identity/config/identity.schema.json) ending in the session hook.
 */

/** Kratos' OpenAPI document, found through services/shared/contracts (throws naming the remedy when absent). */
export const kratosSpec = (): string => contractPath('ory/kratos-v26.2.0/spec__api.json');
export const SESSION_COOKIE = 'ory_kratos_session';
const CSRF_COOKIE = 'csrf_token_kratos';

export interface TestIdentity {
  id: string;
  email: string;
  name: string;
  role?: string;
  password: string;
  /** A TOTP/WebAuthn credential is enrolled: whoami demands aal2. */
  secondFactor?: boolean;
}

interface StoredSession {
  id: string;
  token: string;
  identityId: string;
  active: boolean;
  authenticatedAt: number;
  issuedAt: number;
  expiresAt: number;
  aal: 'aal1' | 'aal2';
}

interface StoredFlow {
  id: string;
  csrf: string;
  issuedAt: number;
  expiresAt: number;
  requestUrl: string;
  returnTo?: string;
  refresh: boolean;
  aal: 'aal1' | 'aal2';
  messages: Array<{ id: number; text: string; type: 'error' | 'info' }>;
  done: boolean;
}

export interface KratosDoubleOptions {
  clock?: TestClock;
  /** Kratos' selfservice.flows.login.ui_url. */
  loginUiUrl: string;
  /** selfservice.allowed_return_urls: exact origins+paths or `*.` wildcards like Kratos. */
  allowedReturnUrls: string[];
  cookieDomain?: string;
  /** Kratos' selfservice.flows.registration.ui_url (registration is disabled without it). */
  registrationUiUrl?: string;
  /** Where a browser goes after registration without return_to (selfservice.default_browser_return_url). */
  defaultBrowserReturnUrl?: string;
}

interface StoredRegistrationFlow {
  id: string;
  csrf: string;
  issuedAt: number;
  expiresAt: number;
  requestUrl: string;
  returnTo?: string;
  /** What the person typed, sent back in the nodes when the flow fails (Kratos keeps the values too). */
  values: { email?: string; name?: string };
  messages: Array<{ id: number; text: string; type: 'error' | 'info' }>;
  done: boolean;
}

/** Kratos' minimum password length (selfservice.methods.password.config.min_password_length default). */
const MIN_PASSWORD_LENGTH = 8;
const CSRF_VIOLATION = 'A request failed due to a missing or invalid csrf_token value.';

function kratosError(status: number, message: string, id?: string): { error: Record<string, unknown> } {
  const statusText: Record<number, string> = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 410: 'Gone' };
  return { error: { code: status, status: statusText[status] ?? 'Error', message, ...(id ? { id } : {}) } };
}

export class KratosDouble {
  readonly clock: TestClock;
  readonly identities = new Map<string, TestIdentity>();
  readonly sessions = new Map<string, StoredSession>();
  readonly flows = new Map<string, StoredFlow>();
  readonly registrationFlows = new Map<string, StoredRegistrationFlow>();
  /**
   * Passkeys by credential id → identity id. When any is registered, login flows offer the passkey
   * method with the nodes Kratos v26 sends (challenge, answer field, trigger button, webauthn.js).
   * The double does not verify the WebAuthn signature: an answer naming a registered credential id
   * and the flow's challenge signs that identity in (real Kratos checks the signature too).
   */
  readonly passkeys = new Map<string, string>();
  readonly public: ContractServer;
  readonly admin: ContractServer;
  ready = true;

  constructor(private readonly options: KratosDoubleOptions) {
    this.clock = options.clock ?? new TestClock();
    const contract = new OpenApiContract(kratosSpec(), 'kratos-api');
    this.public = new ContractServer('kratos public', contract, (t) => !t.startsWith('/admin/'), (s, m) => kratosError(s, m));
    this.admin = new ContractServer('kratos admin', contract, (t) => t.startsWith('/admin/') || t.startsWith('/health/'), (s, m) => kratosError(s, m));
    this.public
      .on('toSession', (r) => this.whoami(r))
      .on('createBrowserLoginFlow', (r) => this.createLoginFlow(r))
      .on('getLoginFlow', (r) => this.getLoginFlow(r))
      .on('updateLoginFlow', (r) => this.updateLoginFlow(r))
      .on('createBrowserRegistrationFlow', (r) => this.createRegistrationFlow(r))
      .on('getRegistrationFlow', (r) => this.getRegistrationFlow(r))
      .on('updateRegistrationFlow', (r) => this.updateRegistrationFlow(r))
      .on('isReady', () => this.readiness());
    this.admin
      .on('getIdentity', (r) => this.getIdentity(r))
      .on('disableSession', (r) => this.disableSession(r))
      .on('isReady', () => this.readiness());
  }

  async start(): Promise<this> {
    await Promise.all([this.public.start(), this.admin.start()]);
    return this;
  }

  async close(): Promise<void> {
    await Promise.all([this.public.close(), this.admin.close()]);
  }

  get violations(): string[] {
    return [...this.public.violations, ...this.admin.violations];
  }

  addPasskey(identityId: string, credentialId: string): void {
    this.passkeys.set(credentialId, identityId);
  }

  /** The challenge of a flow's passkey login (what webauthn.js hands to navigator.credentials.get). */
  passkeyChallenge(flowId: string): string {
    return createHash('sha256').update(`passkey:${flowId}`).digest('base64url');
  }

  addIdentity(identity: Omit<TestIdentity, 'id'> & { id?: string }): TestIdentity {
    const stored = { ...identity, id: identity.id ?? randomUUID() };
    this.identities.set(stored.id, stored);
    return stored;
  }

  /** A session as if the user had logged in earlier; returns the cookie value. */
  createSession(identityId: string, options: { aal?: 'aal1' | 'aal2'; authenticatedSecondsAgo?: number } = {}): StoredSession {
    const authenticatedAt = this.clock.now() - (options.authenticatedSecondsAgo ?? 0) * 1000;
    const session: StoredSession = {
      id: randomUUID(),
      token: randomBytes(24).toString('base64url'),
      identityId,
      active: true,
      authenticatedAt,
      issuedAt: authenticatedAt,
      expiresAt: authenticatedAt + 24 * 3600_000,
      aal: options.aal ?? 'aal1',
    };
    this.sessions.set(session.token, session);
    return session;
  }

  identityJson(identity: TestIdentity): Record<string, unknown> {
    return {
      id: identity.id,
      schema_id: 'person',
      schema_url: `${this.public.url}/schemas/cGVyc29u`,
      state: 'active',
      traits: { email: identity.email, name: identity.name },
      metadata_public: identity.role === undefined ? null : { role: identity.role },
      verifiable_addresses: [],
      recovery_addresses: [],
      created_at: new Date(0).toISOString(),
      updated_at: new Date(0).toISOString(),
    };
  }

  private sessionJson(session: StoredSession): Record<string, unknown> {
    const identity = this.identities.get(session.identityId) as TestIdentity;
    return {
      id: session.id,
      active: session.active,
      authenticated_at: new Date(session.authenticatedAt).toISOString(),
      issued_at: new Date(session.issuedAt).toISOString(),
      expires_at: new Date(session.expiresAt).toISOString(),
      authenticator_assurance_level: session.aal,
      authentication_methods: [{ method: 'password', aal: 'aal1', completed_at: new Date(session.authenticatedAt).toISOString() }],
      identity: this.identityJson(identity),
      devices: [],
    };
  }

  private readiness(): DoubleResponse {
    return this.ready ? { status: 200, body: { status: 'ok' } } : { status: 503, body: { errors: { database: 'not reachable' } } };
  }

  private activeSession(request: DoubleRequest): StoredSession | undefined {
    const token = (request.headers['x-session-token'] as string | undefined) ?? request.cookies[SESSION_COOKIE];
    const session = token === undefined ? undefined : this.sessions.get(token);
    if (!session || !session.active || session.expiresAt <= this.clock.now()) return undefined;
    return session;
  }

  private whoami(request: DoubleRequest): DoubleResponse {
    const session = this.activeSession(request);
    if (!session) return { status: 401, body: kratosError(401, 'No valid session credentials found in the request.', 'session_inactive') };
    const identity = this.identities.get(session.identityId);
    if (identity?.secondFactor && session.aal !== 'aal2') {
      return { status: 403, body: kratosError(403, 'Session does not fulfill the required AAL', 'session_aal2_required') };
    }
    return { status: 200, body: this.sessionJson(session) };
  }

  private returnToAllowed(returnTo: string): boolean {
    let target: URL;
    try {
      target = new URL(returnTo);
    } catch {
      return false;
    }
    return this.options.allowedReturnUrls.some((allowed) => {
      const pattern = new URL(allowed.replace('*.', 'wildcard.'));
      const hostOk = allowed.includes('*.') ? target.hostname.endsWith(pattern.hostname.replace(/^wildcard/, '')) : target.host === pattern.host;
      return target.protocol === pattern.protocol && hostOk && target.pathname.startsWith(pattern.pathname);
    });
  }

  private flowJson(flow: StoredFlow): Record<string, unknown> {
    const node = (name: string, type: string, value: string | undefined, group: string, label?: string) => ({
      type: 'input',
      group,
      attributes: { name, type, node_type: 'input', disabled: false, required: type !== 'hidden' && type !== 'submit', ...(value === undefined ? {} : { value }) },
      messages: [],
      meta: label ? { label: { id: 1070004, text: label, type: 'info' } } : {},
    });
    return {
      id: flow.id,
      type: 'browser',
      issued_at: new Date(flow.issuedAt).toISOString(),
      expires_at: new Date(flow.expiresAt).toISOString(),
      request_url: flow.requestUrl,
      ...(flow.returnTo ? { return_to: flow.returnTo } : {}),
      refresh: flow.refresh,
      requested_aal: flow.aal,
      state: 'choose_method',
      ui: {
        action: `${this.public.url}/self-service/login?flow=${flow.id}`,
        method: 'POST',
        messages: flow.messages.map((m) => ({ id: m.id, text: m.text, type: m.type })),
        nodes: [
          node('csrf_token', 'hidden', flow.csrf, 'default'),
          node('identifier', 'text', undefined, 'default', 'E-Mail'),
          node('password', 'password', undefined, 'password', 'Password'),
          node('method', 'submit', 'password', 'password', 'Sign in'),
          ...(this.passkeys.size > 0 ? this.passkeyNodes(flow) : []),
        ],
      },
    };
  }

  private passkeyNodes(flow: StoredFlow): Record<string, unknown>[] {
    const challenge = JSON.stringify({ publicKey: { challenge: this.passkeyChallenge(flow.id), rpId: 'example.org', userVerification: 'preferred', timeout: 300000 } });
    const hidden = (name: string, value: string) => ({
      type: 'input',
      group: 'passkey',
      attributes: { name, type: 'hidden', value, node_type: 'input', disabled: false, required: false },
      messages: [],
      meta: {},
    });
    return [
      hidden('passkey_challenge', challenge),
      hidden('passkey_login', ''),
      {
        type: 'input',
        group: 'passkey',
        attributes: { name: 'passkey_login_trigger', type: 'button', value: '', node_type: 'input', disabled: false, onclick: 'window.oryPasskeyLogin?.()', onclickTrigger: 'oryPasskeyLogin' },
        messages: [],
        meta: { label: { id: 1010021, text: 'Sign in with passkey', type: 'info' } },
      },
      {
        type: 'script',
        group: 'webauthn',
        attributes: {
          src: `${this.public.url}/.well-known/ory/webauthn.js`,
          async: true,
          referrerpolicy: 'no-referrer',
          crossorigin: 'anonymous',
          integrity: 'sha512-double',
          type: 'text/javascript',
          id: 'webauthn_script',
          nonce: 'double-nonce',
          node_type: 'script',
        },
        messages: [],
        meta: {},
      },
    ];
  }

  private createLoginFlow(request: DoubleRequest): DoubleResponse {
    const returnTo = request.query.get('return_to') ?? undefined;
    if (returnTo !== undefined && !this.returnToAllowed(returnTo)) {
      return { status: 400, body: kratosError(400, 'Requested return_to URL is not allowed.', 'self_service_flow_return_to_forbidden') };
    }
    const refresh = request.query.get('refresh') === 'true';
    const aal = request.query.get('aal') === 'aal2' ? 'aal2' : 'aal1';
    const session = this.activeSession(request);
    // Like Kratos: an existing session that needs neither a refresh nor a higher AAL goes straight back.
    if (session && !refresh && aal === 'aal1') {
      return { status: 303, headers: { location: returnTo ?? this.options.loginUiUrl } };
    }
    const csrf = request.cookies[CSRF_COOKIE] ?? randomBytes(24).toString('base64url');
    const flow: StoredFlow = {
      id: randomUUID(),
      csrf,
      issuedAt: this.clock.now(),
      expiresAt: this.clock.now() + 10 * 60_000,
      requestUrl: `${this.public.url}${request.pathname}?${request.query.toString()}`,
      refresh,
      aal,
      messages: [],
      done: false,
      ...(returnTo ? { returnTo } : {}),
    };
    this.flows.set(flow.id, flow);
    return {
      status: 303,
      headers: {
        location: `${this.options.loginUiUrl}?flow=${flow.id}`,
        // Kratos writes every cookie, the CSRF one too, on cookies.domain when it is set.
        'set-cookie': `${CSRF_COOKIE}=${csrf}; Path=/; HttpOnly; SameSite=Lax${this.options.cookieDomain ? `; Domain=${this.options.cookieDomain}` : ''}`,
      },
    };
  }

  private flowFor(request: DoubleRequest, id: string | null): StoredFlow | DoubleResponse {
    const flow = id === null ? undefined : this.flows.get(id);
    if (!flow) return { status: 404, body: kratosError(404, 'The requested resource could not be found') };
    if (flow.expiresAt <= this.clock.now() || flow.done) return { status: 410, body: kratosError(410, 'The self-service flow expired', 'self_service_flow_expired') };
    if (request.cookies[CSRF_COOKIE] !== flow.csrf) return { status: 403, body: kratosError(403, 'A request failed due to a missing or invalid csrf_token value.', 'security_csrf_violation') };
    return flow;
  }

  private getLoginFlow(request: DoubleRequest): DoubleResponse {
    const flow = this.flowFor(request, request.query.get('id'));
    if ('status' in flow) return flow;
    return { status: 200, body: this.flowJson(flow) };
  }

  private updateLoginFlow(request: DoubleRequest): DoubleResponse {
    const flow = this.flowFor(request, request.query.get('flow'));
    if ('status' in flow) return flow;
    const body = request.body as { method: string; identifier: string; password: string; csrf_token?: string; passkey_login?: string };
    if (body.csrf_token !== flow.csrf) return { status: 403, body: kratosError(403, 'A request failed due to a missing or invalid csrf_token value.', 'security_csrf_violation') };
    if (body.method !== 'password' && !(body.method === 'passkey' && this.passkeys.size > 0)) return { status: 400, body: kratosError(400, `method ${body.method} is not enabled in this double`) };
    const identity = body.method === 'passkey' ? this.passkeyIdentity(flow, body.passkey_login) : [...this.identities.values()].find((i) => i.email === body.identifier && i.password === body.password);
    if (!identity) {
      flow.messages = [{ id: 4000006, text: 'The provided credentials are invalid, check for spelling mistakes in your password or username, email address, or phone number.', type: 'error' }];
      return { status: 400, body: this.flowJson(flow) };
    }
    flow.done = true;
    const existing = this.activeSession(request);
    let session: StoredSession;
    if (existing && existing.identityId === identity.id) {
      // A refresh re-authenticates the same session: authenticated_at moves, the id stays.
      existing.authenticatedAt = this.clock.now();
      session = existing;
    } else {
      session = this.createSession(identity.id);
    }
    const domain = this.options.cookieDomain ? `; Domain=${this.options.cookieDomain}` : '';
    return {
      status: 200,
      body: { session: this.sessionJson(session), continue_with: [] },
      headers: { 'set-cookie': `${SESSION_COOKIE}=${session.token}; Path=/${domain}; HttpOnly; SameSite=Lax` },
    };
  }

  /** The identity a passkey answer names, if it answers this flow's challenge with a registered credential. */
  private passkeyIdentity(flow: StoredFlow, answer: string | undefined): TestIdentity | undefined {
    try {
      const parsed = JSON.parse(answer ?? '') as { id?: string; response?: { clientDataJSON?: string } };
      const clientData = JSON.parse(Buffer.from(parsed.response?.clientDataJSON ?? '', 'base64url').toString('utf8')) as { challenge?: string; type?: string };
      if (clientData.type !== 'webauthn.get' || clientData.challenge !== this.passkeyChallenge(flow.id)) return undefined;
      const identityId = this.passkeys.get(parsed.id ?? '');
      return identityId ? this.identities.get(identityId) : undefined;
    } catch {
      return undefined;
    }
  }

  // ---------------------------------------------------------------- registration (browser flow)

  private csrfCookie(csrf: string): string {
    // Kratos writes every cookie, the CSRF one too, on cookies.domain when it is set.
    return `${CSRF_COOKIE}=${csrf}; Path=/; HttpOnly; SameSite=Lax${this.options.cookieDomain ? `; Domain=${this.options.cookieDomain}` : ''}`;
  }

  private createRegistrationFlow(request: DoubleRequest): DoubleResponse {
    const uiUrl = this.options.registrationUiUrl;
    if (!uiUrl) return { status: 400, body: kratosError(400, 'Registration is not allowed because it was disabled.', 'self_service_flow_disabled') };
    const returnTo = request.query.get('return_to') ?? undefined;
    if (returnTo !== undefined && !this.returnToAllowed(returnTo)) {
      return { status: 400, body: kratosError(400, 'Requested return_to URL is not allowed.', 'self_service_flow_return_to_forbidden') };
    }
    // Like Kratos: someone already signed in is sent on instead of registering a second account.
    if (this.activeSession(request)) return { status: 303, headers: { location: returnTo ?? this.options.defaultBrowserReturnUrl ?? uiUrl } };
    const csrf = request.cookies[CSRF_COOKIE] ?? randomBytes(24).toString('base64url');
    const flow: StoredRegistrationFlow = {
      id: randomUUID(),
      csrf,
      issuedAt: this.clock.now(),
      expiresAt: this.clock.now() + 10 * 60_000,
      requestUrl: `${this.public.url}${request.pathname}${request.query.size ? `?${request.query.toString()}` : ''}`,
      values: {},
      messages: [],
      done: false,
      ...(returnTo ? { returnTo } : {}),
    };
    this.registrationFlows.set(flow.id, flow);
    return { status: 303, headers: { location: `${uiUrl}?flow=${flow.id}`, 'set-cookie': this.csrfCookie(csrf) } };
  }

  private registrationFlowFor(request: DoubleRequest, id: string | null): StoredRegistrationFlow | DoubleResponse {
    const flow = id === null ? undefined : this.registrationFlows.get(id);
    if (!flow) return { status: 404, body: kratosError(404, 'The requested resource could not be found') };
    if (flow.expiresAt <= this.clock.now() || flow.done) return { status: 410, body: kratosError(410, 'The self-service flow expired', 'self_service_flow_expired') };
    if (request.cookies[CSRF_COOKIE] !== flow.csrf) return { status: 403, body: kratosError(403, CSRF_VIOLATION, 'security_csrf_violation') };
    return flow;
  }

  /** The flow as Kratos v26 renders it for the person schema: its traits in schema order, then the password method. */
  registrationFlowJson(flow: StoredRegistrationFlow): Record<string, unknown> {
    const node = (name: string, type: string, value: string | undefined, group: string, label?: { id: number; text: string }, extra: Record<string, unknown> = {}) => ({
      type: 'input',
      group,
      attributes: { name, type, node_type: 'input', disabled: false, ...(type === 'hidden' || type === 'submit' ? {} : { required: true }), ...(value === undefined ? {} : { value }), ...extra },
      messages: [],
      meta: label ? { label: { ...label, type: 'info' } } : {},
    });
    return {
      id: flow.id,
      type: 'browser',
      issued_at: new Date(flow.issuedAt).toISOString(),
      expires_at: new Date(flow.expiresAt).toISOString(),
      request_url: flow.requestUrl,
      ...(flow.returnTo ? { return_to: flow.returnTo } : {}),
      identity_schema: 'person',
      state: 'choose_method',
      active: 'password',
      ui: {
        action: `${this.public.url}/self-service/registration?flow=${flow.id}`,
        method: 'POST',
        messages: flow.messages.map((m) => ({ ...m })),
        nodes: [
          node('csrf_token', 'hidden', flow.csrf, 'default'),
          // Kratos labels a trait with its title in the identity schema (message 1070002).
          node('traits.email', 'email', flow.values.email, 'default', { id: 1070002, text: 'E-mail' }, { autocomplete: 'email' }),
          node('password', 'password', undefined, 'password', { id: 1070001, text: 'Password' }, { autocomplete: 'new-password' }),
          node('traits.name', 'text', flow.values.name, 'default', { id: 1070002, text: 'Name' }),
          node('method', 'submit', 'password', 'password', { id: 1040001, text: 'Sign up' }),
        ],
      },
    };
  }

  private getRegistrationFlow(request: DoubleRequest): DoubleResponse {
    const flow = this.registrationFlowFor(request, request.query.get('id'));
    if ('status' in flow) return flow;
    return { status: 200, body: this.registrationFlowJson(flow) };
  }

  /** Why Kratos would refuse these traits and password, or undefined when it accepts them. */
  private registrationProblem(email: string, name: string, password: string): { id: number; text: string } | undefined {
    if (email === '') return { id: 4000002, text: 'Property email is missing.' };
    if (!/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email) || email.length > 320) return { id: 4000001, text: `"${email}" is not valid "email"` };
    if (name === '') return { id: 4000002, text: 'Property name is missing.' };
    if (name.length > 200) return { id: 4000001, text: 'length must be <= 200, but got ' + name.length };
    if (password.length < MIN_PASSWORD_LENGTH) {
      return { id: 4000032, text: `The password must be at least ${MIN_PASSWORD_LENGTH} characters long, but got ${password.length}.` };
    }
    if (password.toLowerCase().includes(email.toLowerCase()) || email.toLowerCase().includes(password.toLowerCase())) {
      return { id: 4000031, text: 'The password can not be used because it is too similar to the identifier.' };
    }
    const taken = [...this.identities.values()].some((i) => i.email.toLowerCase() === email.toLowerCase());
    if (taken) return { id: 4000007, text: 'An account with the same identifier (email, phone, username, ...) exists already.' };
    return undefined;
  }

  private updateRegistrationFlow(request: DoubleRequest): DoubleResponse {
    const flow = this.registrationFlowFor(request, request.query.get('flow'));
    if ('status' in flow) return flow;
    const body = request.body as { method: string; password?: string; csrf_token?: string; traits?: { email?: unknown; name?: unknown } };
    // A browser posting the HTML form gets redirects; a browser app sending JSON gets JSON (as Kratos decides).
    const fromForm = (request.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded') && !(request.headers.accept ?? '').includes('application/json');
    if (body.csrf_token !== flow.csrf) return { status: 403, body: kratosError(403, CSRF_VIOLATION, 'security_csrf_violation') };
    if (body.method !== 'password') return { status: 400, body: kratosError(400, `method ${body.method} is not enabled in this double`) };
    const email = typeof body.traits?.email === 'string' ? body.traits.email.trim() : '';
    const name = typeof body.traits?.name === 'string' ? body.traits.name.trim() : '';
    const password = body.password ?? '';
    flow.values = { email, name };
    const problem = this.registrationProblem(email, name, password);
    if (problem) {
      flow.messages = [{ ...problem, type: 'error' }];
      if (fromForm) return { status: 303, headers: { location: `${this.options.registrationUiUrl}?flow=${flow.id}` } };
      return { status: 400, body: this.registrationFlowJson(flow) };
    }
    flow.done = true;
    const identity = this.addIdentity({ email, name, password });
    // The session hook of selfservice.flows.registration.after.password: signed in at once.
    const session = this.createSession(identity.id);
    const domain = this.options.cookieDomain ? `; Domain=${this.options.cookieDomain}` : '';
    const cookie = `${SESSION_COOKIE}=${session.token}; Path=/${domain}; HttpOnly; SameSite=Lax`;
    if (fromForm) {
      return { status: 303, headers: { location: flow.returnTo ?? this.options.defaultBrowserReturnUrl ?? this.public.url, 'set-cookie': cookie } };
    }
    return { status: 200, body: { identity: this.identityJson(identity), session: this.sessionJson(session), continue_with: [] }, headers: { 'set-cookie': cookie } };
  }

  private getIdentity(request: DoubleRequest): DoubleResponse {
    const identity = this.identities.get(request.pathParams.id as string);
    if (!identity) return { status: 404, body: kratosError(404, 'Unable to locate the resource') };
    return { status: 200, body: this.identityJson(identity) };
  }

  private disableSession(request: DoubleRequest): DoubleResponse {
    const session = [...this.sessions.values()].find((s) => s.id === request.pathParams.id);
    if (!session) return { status: 400, body: kratosError(400, 'session not found') };
    session.active = false;
    return { status: 204 };
  }
}
