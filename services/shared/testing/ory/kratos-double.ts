import { createHash, randomBytes, randomUUID } from 'node:crypto';
import * as oidcClient from 'openid-client';
import { Secret, TOTP } from 'otpauth';
import { contractPath } from '../../contracts.js';
import type { DoubleRequest, DoubleResponse } from './contract-server.js';
import type { TestClock } from './clock.js';
import { OryDouble } from './ory-double.js';

/**
 * A double of Ory Kratos v26.2.0: the public port (whoami, browser login flows) and the admin port
 * (identities, sessions), each a real HTTP server checked against the vendored spec__api.json.
 *
 * Behaviour modelled on Kratos, kept small: identities with an e-mail/password credential and
 * optionally a second factor; `session.whoami.required_aal: highest_available` (an aal1 session of a
 * user with a second factor gets 403 session_aal2_required); browser login flows with a CSRF cookie,
 * `refresh`, `aal` and `return_to` checked against the allowed return URLs; browser registration
 * flows (password method, traits of identity/config/identity.schema.json) ending in the session hook.
 *
 * Social sign-in (selfservice.methods.oidc, `oidcProviders`): a login flow offers one button per
 * provider (UI nodes of group "oidc"); submitting one answers 422 browser_location_change_required
 * (303 for a plain form post) to the provider's authorization URL, found by discovery, with state,
 * nonce and PKCE; the provider sends the browser back to `/self-service/methods/oidc/callback/<id>`
 * (a route the OpenAPI document does not list), where the code is exchanged (openid-client), the claims
 * run through the provider's claims mapper, and then, as Kratos does: a known subject signs in; a new one
 * is registered with the mapped traits (after.oidc hook: session), its address verified only when the
 * mapper says so; a new subject whose e-mail belongs to an existing identity is never merged silently:
 * the login flow asks the person to sign in with that account first (message 1010016), and only then is
 * the provider linked to it.
 *
 * Second factor (TOTP): an identity with `totpSecret`; a login flow with `aal=aal2` for a signed-in
 * browser offers the code field (group "totp"); the right code (checked with otpauth, ±1 step) raises
 * the same session to aal2.
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
  /** The password credential; '' for none (an identity registered through a social provider). */
  password: string;
  /** A TOTP/WebAuthn credential is enrolled: whoami demands aal2 (with `whoamiRequiredAal: highest_available`). */
  secondFactor?: boolean;
  /** A TOTP credential (base32 secret): the aal2 login flow asks for its code. */
  totpSecret?: string;
  /** Whether the e-mail address is verified (verifiable_addresses); fixtures default to verified. */
  verified?: boolean;
  /** Social sign-in credentials: provider id and the provider's subject. */
  oidc?: Array<{ provider: string; subject: string }>;
  /** When the identity was created (ms); fixtures default to the epoch, registrations to the clock. */
  createdAt?: number;
}

/** What a claims mapper returns (Kratos' Jsonnet output under `identity`). */
export interface MappedIdentity {
  traits: { email?: string; name?: string; [trait: string]: unknown };
  verified_addresses?: Array<{ via: string; value: string }>;
  metadata_public?: unknown;
}

/** One of selfservice.methods.oidc.config.providers, the mapper as a function of the provider's claims. */
export interface KratosOidcProvider {
  id: string;
  label: string;
  issuerUrl: string;
  clientId: string;
  clientSecret: string;
  scope: string[];
  mapClaims: (claims: Record<string, unknown>) => Promise<MappedIdentity>;
}

interface AuthenticationMethod {
  method: 'password' | 'oidc' | 'totp' | 'passkey';
  aal: 'aal1' | 'aal2';
  completedAt: number;
  provider?: string;
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
  methods: AuthenticationMethod[];
}

/** What login and registration flows both keep: identity, CSRF token, lifetime, where they return to. */
interface BrowserFlow {
  id: string;
  csrf: string;
  issuedAt: number;
  expiresAt: number;
  requestUrl: string;
  returnTo?: string;
  messages: Array<{ id: number; text: string; type: 'error' | 'info'; context?: Record<string, unknown> }>;
  done: boolean;
}

interface StoredFlow extends BrowserFlow {
  refresh: boolean;
  aal: 'aal1' | 'aal2';
  /** The signed-in identity an aal2 flow asks the second factor of. */
  identityId?: string;
  /** A social sign-in waiting to be linked to the identity the person signs in as next (duplicate e-mail). */
  pendingLink?: { provider: string; subject: string; email: string };
}

/** A social sign-in on its way through the provider, by its `state`. */
interface OidcAttempt {
  flowId: string;
  provider: string;
  codeVerifier: string;
  nonce: string;
  /** The continuity cookie's value: the callback must come from the browser that started it. */
  continuity: string;
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
  /**
   * session.whoami.required_aal. Default `highest_available` (an aal1 session of an identity with a
   * second factor gets 403); identity/config/kratos.yml sets `aal1` (whoami answers, stating the AAL).
   */
  whoamiRequiredAal?: 'aal1' | 'highest_available';
  /** selfservice.methods.oidc.config.providers (social sign-in off when empty). */
  oidcProviders?: KratosOidcProvider[];
}

interface StoredRegistrationFlow extends BrowserFlow {
  /** What the person typed, sent back in the nodes when the flow fails (Kratos keeps the values too). */
  values: { email?: string; name?: string };
}

/** Kratos' minimum password length (selfservice.methods.password.config.min_password_length default). */
const MIN_PASSWORD_LENGTH = 8;
const CSRF_VIOLATION = 'A request failed due to a missing or invalid csrf_token value.';
const CONTINUITY_COOKIE = 'ory_kratos_continuity';

function kratosError(status: number, message: string, id?: string): { error: Record<string, unknown> } {
  const statusText: Record<number, string> = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 410: 'Gone' };
  return { error: { code: status, status: statusText[status] ?? 'Error', message, ...(id ? { id } : {}) } };
}

/** The fields a login and a registration flow share in Kratos' JSON, before their own. */
function browserFlowJson(flow: BrowserFlow): Record<string, unknown> {
  return {
    id: flow.id,
    type: 'browser',
    issued_at: new Date(flow.issuedAt).toISOString(),
    expires_at: new Date(flow.expiresAt).toISOString(),
    request_url: flow.requestUrl,
    ...(flow.returnTo ? { return_to: flow.returnTo } : {}),
  };
}

/** An input node of a flow's UI as Kratos v26 sends it; `label` is the message shown with it (type info). */
function inputNode(group: string, attributes: Record<string, unknown>, label?: { id: number; text: string; context?: Record<string, unknown> }): Record<string, unknown> {
  return {
    type: 'input',
    group,
    attributes: { ...attributes, node_type: 'input', disabled: false },
    messages: [],
    meta: label ? { label: { ...label, type: 'info' } } : {},
  };
}

/** A browser posting Kratos' HTML form (it gets redirects), not a browser app sending JSON (it gets JSON). */
function fromHtmlForm(request: DoubleRequest): boolean {
  return (request.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded') && !(request.headers.accept ?? '').includes('application/json');
}

export class KratosDouble extends OryDouble {
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
  readonly oidcAttempts = new Map<string, OidcAttempt>();
  private readonly oidcConfigs = new Map<string, Promise<oidcClient.Configuration>>();

  constructor(private readonly options: KratosDoubleOptions) {
    super('kratos', kratosSpec(), 'kratos-api', (s, m) => kratosError(s, m), options.clock);
    this.public
      .on('toSession', (r) => this.whoami(r))
      .on('createBrowserLoginFlow', (r) => this.createLoginFlow(r))
      .on('getLoginFlow', (r) => this.getLoginFlow(r))
      .on('updateLoginFlow', (r) => this.updateLoginFlow(r))
      .on('createBrowserRegistrationFlow', (r) => this.createRegistrationFlow(r))
      .on('getRegistrationFlow', (r) => this.getRegistrationFlow(r))
      .on('updateRegistrationFlow', (r) => this.updateRegistrationFlow(r))
      .on('createBrowserLogoutFlow', (r) => this.createLogoutFlow(r))
      .on('updateLogoutFlow', (r) => this.updateLogoutFlow(r))
      .extra('GET', /^\/self-service\/methods\/oidc\/callback\/(?<provider>[^/]+)$/, 'oidcCallback', (r) => this.oidcCallback(r));
    this.admin
      .on('getIdentity', (r) => this.getIdentity(r))
      .on('listIdentities', (r) => this.listIdentities(r))
      .on('patchIdentity', (r) => this.patchIdentity(r))
      .on('disableSession', (r) => this.disableSession(r));
  }

  addPasskey(identityId: string, credentialId: string): void {
    this.passkeys.set(credentialId, identityId);
  }

  /** The challenge of a flow's passkey login (what webauthn.js hands to navigator.credentials.get). */
  passkeyChallenge(flowId: string): string {
    return createHash('sha256').update(`passkey:${flowId}`).digest('base64url');
  }

  addIdentity(identity: Omit<TestIdentity, 'id'> & { id?: string }): TestIdentity {
    const stored: TestIdentity = { ...identity, id: identity.id ?? randomUUID(), ...(identity.totpSecret ? { secondFactor: true } : {}) };
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
      methods: [
        { method: 'password', aal: 'aal1', completedAt: authenticatedAt },
        ...(options.aal === 'aal2' ? [{ method: 'totp' as const, aal: 'aal2' as const, completedAt: authenticatedAt }] : []),
      ],
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
      verifiable_addresses: [
        {
          id: createHash('sha256').update(`address:${identity.id}`).digest('hex').replace(/^(.{8})(.{4})(.{4})(.{4})(.{12}).*$/, '$1-$2-$3-$4-$5'),
          value: identity.email,
          verified: identity.verified !== false,
          via: 'email',
          status: identity.verified !== false ? 'completed' : 'sent',
          ...(identity.verified !== false ? { verified_at: new Date(0).toISOString() } : {}),
          created_at: new Date(0).toISOString(),
          updated_at: new Date(0).toISOString(),
        },
      ],
      recovery_addresses: [],
      created_at: new Date(identity.createdAt ?? 0).toISOString(),
      updated_at: new Date(identity.createdAt ?? 0).toISOString(),
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
      authentication_methods: session.methods.map((m) => ({ method: m.method, aal: m.aal, completed_at: new Date(m.completedAt).toISOString(), ...(m.provider ? { provider: m.provider } : {}) })),
      identity: this.identityJson(identity),
      devices: [],
    };
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
    if ((this.options.whoamiRequiredAal ?? 'highest_available') === 'highest_available' && identity?.secondFactor && session.aal !== 'aal2') {
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
    const node = (name: string, type: string, value: string | undefined, group: string, label?: string) =>
      inputNode(group, { name, type, required: type !== 'hidden' && type !== 'submit', ...(value === undefined ? {} : { value }) }, label ? { id: 1070004, text: label } : undefined);
    return {
      ...browserFlowJson(flow),
      refresh: flow.refresh,
      requested_aal: flow.aal,
      state: 'choose_method',
      ui: {
        action: `${this.public.url}/self-service/login?flow=${flow.id}`,
        method: 'POST',
        messages: flow.messages.map((m) => ({ id: m.id, text: m.text, type: m.type, ...(m.context ? { context: m.context } : {}) })),
        nodes: flow.aal === 'aal2' ? this.secondFactorNodes(flow) : [
          node('csrf_token', 'hidden', flow.csrf, 'default'),
          node('identifier', 'text', flow.pendingLink?.email, 'default', 'E-Mail'),
          node('password', 'password', undefined, 'password', 'Password'),
          node('method', 'submit', 'password', 'password', 'Sign in'),
          ...(this.passkeys.size > 0 ? this.passkeyNodes(flow) : []),
          // A flow waiting to link a provider offers the existing account's credentials only.
          ...(flow.pendingLink ? [] : this.oidcNodes()),
        ],
      },
    };
  }

  /** One button per social provider, as Kratos v26 renders them (message 1010002 "Sign in with …"). */
  private oidcNodes(): Record<string, unknown>[] {
    return (this.options.oidcProviders ?? []).map((provider) =>
      inputNode('oidc', { name: 'provider', type: 'submit', value: provider.id }, { id: 1010002, text: `Sign in with ${provider.label}`, context: { provider: provider.label, provider_id: provider.id } }),
    );
  }

  /** The aal2 flow of a signed-in browser: the code of its TOTP app (Kratos' totp method nodes). */
  private secondFactorNodes(flow: StoredFlow): Record<string, unknown>[] {
    const identity = flow.identityId ? this.identities.get(flow.identityId) : undefined;
    const csrf = inputNode('default', { name: 'csrf_token', type: 'hidden', value: flow.csrf, required: true });
    if (!identity?.totpSecret) return [csrf];
    return [
      csrf,
      inputNode('totp', { name: 'totp_code', type: 'text', required: true, autocomplete: 'one-time-code', maxlength: 6 }, { id: 1010006, text: 'Authentication code' }),
      inputNode('totp', { name: 'method', type: 'submit', value: 'totp' }, { id: 1010009, text: 'Use Authenticator' }),
    ];
  }

  private passkeyNodes(flow: StoredFlow): Record<string, unknown>[] {
    const challenge = JSON.stringify({ publicKey: { challenge: this.passkeyChallenge(flow.id), rpId: 'example.org', userVerification: 'preferred', timeout: 300000 } });
    const hidden = (name: string, value: string) => inputNode('passkey', { name, type: 'hidden', value, required: false });
    return [
      hidden('passkey_challenge', challenge),
      hidden('passkey_login', ''),
      inputNode('passkey', { name: 'passkey_login_trigger', type: 'button', value: '', onclick: 'window.oryPasskeyLogin?.()', onclickTrigger: 'oryPasskeyLogin' }, { id: 1010021, text: 'Sign in with passkey' }),
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
    const refused = this.refuseReturnTo(returnTo);
    if (refused) return refused;
    const refresh = request.query.get('refresh') === 'true';
    const aal = request.query.get('aal') === 'aal2' ? 'aal2' : 'aal1';
    const session = this.activeSession(request);
    // Like Kratos: an existing session that needs neither a refresh nor a higher AAL goes straight back.
    if (session && !refresh && (aal === 'aal1' || session.aal === 'aal2')) {
      return { status: 303, headers: { location: returnTo ?? this.options.loginUiUrl } };
    }
    const flow: StoredFlow = {
      ...this.newBrowserFlow(request, `${this.public.url}${request.pathname}?${request.query.toString()}`, returnTo),
      refresh,
      aal,
      ...(aal === 'aal2' && session ? { identityId: session.identityId } : {}),
    };
    this.flows.set(flow.id, flow);
    return { status: 303, headers: { location: `${this.options.loginUiUrl}?flow=${flow.id}`, 'set-cookie': this.csrfCookie(flow.csrf) } };
  }

  /** 400 as Kratos answers a return_to outside selfservice.allowed_return_urls; undefined when it is allowed or absent. */
  private refuseReturnTo(returnTo: string | undefined): DoubleResponse | undefined {
    if (returnTo === undefined || this.returnToAllowed(returnTo)) return undefined;
    return { status: 400, body: kratosError(400, 'Requested return_to URL is not allowed.', 'self_service_flow_return_to_forbidden') };
  }

  /** A new flow for this browser: its CSRF cookie's token when it has one (Kratos keeps one per browser), ten minutes to live. */
  private newBrowserFlow(request: DoubleRequest, requestUrl: string, returnTo: string | undefined): BrowserFlow {
    return {
      id: randomUUID(),
      csrf: request.cookies[CSRF_COOKIE] ?? randomBytes(24).toString('base64url'),
      issuedAt: this.clock.now(),
      expiresAt: this.clock.now() + 10 * 60_000,
      requestUrl,
      messages: [],
      done: false,
      ...(returnTo ? { returnTo } : {}),
    };
  }

  /** The flow `id` of `flows` if this browser may use it: 404 unknown, 410 expired or finished, 403 without its CSRF cookie. */
  private flowFor<F extends BrowserFlow>(flows: Map<string, F>, request: DoubleRequest, id: string | null): F | DoubleResponse {
    const flow = id === null ? undefined : flows.get(id);
    if (!flow) return { status: 404, body: kratosError(404, 'The requested resource could not be found') };
    if (flow.expiresAt <= this.clock.now() || flow.done) return { status: 410, body: kratosError(410, 'The self-service flow expired', 'self_service_flow_expired') };
    if (request.cookies[CSRF_COOKIE] !== flow.csrf) return { status: 403, body: kratosError(403, CSRF_VIOLATION, 'security_csrf_violation') };
    return flow;
  }

  private getLoginFlow(request: DoubleRequest): DoubleResponse {
    const flow = this.flowFor(this.flows, request, request.query.get('id'));
    if ('status' in flow) return flow;
    return { status: 200, body: this.flowJson(flow) };
  }

  private updateLoginFlow(request: DoubleRequest): DoubleResponse | Promise<DoubleResponse> {
    const flow = this.flowFor(this.flows, request, request.query.get('flow'));
    if ('status' in flow) return flow;
    const body = request.body as { method: string; identifier: string; password: string; csrf_token?: string; passkey_login?: string; provider?: string; totp_code?: string };
    if (body.csrf_token !== flow.csrf) return { status: 403, body: kratosError(403, CSRF_VIOLATION, 'security_csrf_violation') };
    if (body.method === 'oidc') return this.startOidc(request, flow, body.provider);
    if (body.method === 'totp') return this.secondFactor(request, flow, body.totp_code);
    if (body.method !== 'password' && !(body.method === 'passkey' && this.passkeys.size > 0)) return { status: 400, body: kratosError(400, `method ${body.method} is not enabled in this double`) };
    const identity = body.method === 'passkey' ? this.passkeyIdentity(flow, body.passkey_login) : [...this.identities.values()].find((i) => i.email === body.identifier && i.password !== '' && i.password === body.password);
    if (!identity) {
      flow.messages = [{ id: 4000006, text: 'The provided credentials are invalid, check for spelling mistakes in your password or username, email address, or phone number.', type: 'error' }];
      return { status: 400, body: this.flowJson(flow) };
    }
    flow.done = true;
    // Account linking: the person proved to own the existing account, now the provider is added to it.
    if (flow.pendingLink && identity.email.toLowerCase() === flow.pendingLink.email.toLowerCase()) {
      identity.oidc = [...(identity.oidc ?? []), { provider: flow.pendingLink.provider, subject: flow.pendingLink.subject }];
    }
    const existing = this.activeSession(request);
    let session: StoredSession;
    if (existing && existing.identityId === identity.id) {
      // A refresh re-authenticates the same session: authenticated_at moves, the id stays.
      existing.authenticatedAt = this.clock.now();
      session = existing;
    } else {
      session = this.createSession(identity.id);
      if (body.method === 'passkey') session.methods = [{ method: 'passkey', aal: 'aal1', completedAt: session.authenticatedAt }];
    }
    return { status: 200, body: { session: this.sessionJson(session), continue_with: [] }, headers: { 'set-cookie': this.sessionCookie(session) } };
  }

  // ---------------------------------------------------------------- social sign-in (oidc)

  /** Kratos writes every cookie, the CSRF and continuity ones too, on cookies.domain when it is set. */
  private domainAttribute(): string {
    return this.options.cookieDomain ? `; Domain=${this.options.cookieDomain}` : '';
  }

  private sessionCookie(session: StoredSession): string {
    return `${SESSION_COOKIE}=${session.token}; Path=/${this.domainAttribute()}; HttpOnly; SameSite=Lax`;
  }

  /** The provider's endpoints by discovery (as Kratos' generic provider does), once per provider. */
  private oidcConfig(provider: KratosOidcProvider): Promise<oidcClient.Configuration> {
    let config = this.oidcConfigs.get(provider.id);
    if (!config) {
      // Loopback http in tests only: a real provider is https (identity:check refuses http issuers).
      config = oidcClient.discovery(new URL(provider.issuerUrl), provider.clientId, provider.clientSecret, undefined, { execute: [oidcClient.allowInsecureRequests] });
      config.catch(() => this.oidcConfigs.delete(provider.id));
      this.oidcConfigs.set(provider.id, config);
    }
    return config;
  }

  /** The redirect URI Kratos registers at the provider (docs/identity.md names it for operators). */
  callbackUrl(providerId: string): string {
    return `${this.public.url}/self-service/methods/oidc/callback/${providerId}`;
  }

  /** method=oidc: off to the provider; a JSON request gets 422 with the URL, a form post a 303. */
  private async startOidc(request: DoubleRequest, flow: StoredFlow, providerId: string | undefined): Promise<DoubleResponse> {
    const provider = (this.options.oidcProviders ?? []).find((p) => p.id === providerId);
    if (!provider) {
      flow.messages = [{ id: 4000001, text: `Unable to find the provider "${providerId ?? ''}".`, type: 'error' }];
      return { status: 400, body: this.flowJson(flow) };
    }
    const config = await this.oidcConfig(provider);
    const state = randomBytes(24).toString('base64url');
    const attempt: OidcAttempt = { flowId: flow.id, provider: provider.id, codeVerifier: oidcClient.randomPKCECodeVerifier(), nonce: oidcClient.randomNonce(), continuity: randomBytes(24).toString('base64url') };
    this.oidcAttempts.set(state, attempt);
    const target = oidcClient.buildAuthorizationUrl(config, {
      redirect_uri: this.callbackUrl(provider.id),
      scope: provider.scope.join(' '),
      state,
      nonce: attempt.nonce,
      code_challenge: await oidcClient.calculatePKCECodeChallenge(attempt.codeVerifier),
      code_challenge_method: 'S256',
    }).toString();
    const cookie = `${CONTINUITY_COOKIE}=${attempt.continuity}; Path=/; HttpOnly; SameSite=Lax${this.domainAttribute()}`;
    if (fromHtmlForm(request)) return { status: 303, headers: { location: target, 'set-cookie': cookie } };
    const error = { id: 'browser_location_change_required', code: 422, status: 'Unprocessable Entity', reason: 'In order to complete this flow please redirect the browser to: ' + target, message: 'browser location change required' };
    return {
      status: 422,
      // Kratos answers the error's fields at `error`; the vendored document types `error` as errorGeneric
      // (itself `{ error }`): both are there, so clients reading either shape work and the answer is on contract.
      body: { error: { ...error, error }, redirect_browser_to: target },
      headers: { 'set-cookie': cookie },
    };
  }

  /** GET /self-service/methods/oidc/callback/{provider}: code → claims → mapper → sign in, register or ask to link. */
  private async oidcCallback(request: DoubleRequest): Promise<DoubleResponse> {
    const state = request.query.get('state') ?? '';
    const attempt = this.oidcAttempts.get(state);
    const flow = attempt ? this.flows.get(attempt.flowId) : undefined;
    const provider = (this.options.oidcProviders ?? []).find((p) => p.id === request.pathParams.provider);
    const errorPage = (message: string): DoubleResponse => ({ status: 303, headers: { location: `${this.options.loginUiUrl}?error=${encodeURIComponent(message)}` } });
    // The state is single-use and bound to the browser that started the sign-in (continuity cookie).
    if (!attempt || !flow || !provider || attempt.provider !== provider.id || request.cookies[CONTINUITY_COOKIE] !== attempt.continuity) return errorPage('the social sign-in could not be matched to a login flow');
    this.oidcAttempts.delete(state);
    if (flow.done || flow.expiresAt <= this.clock.now()) return errorPage('the login flow expired');
    const config = await this.oidcConfig(provider);
    const current = new URL(`${this.callbackUrl(provider.id)}?${request.query.toString()}`);
    const tokens = await oidcClient.authorizationCodeGrant(config, current, { pkceCodeVerifier: attempt.codeVerifier, expectedState: state, expectedNonce: attempt.nonce });
    const claims = tokens.claims() as Record<string, unknown> | undefined;
    if (!claims || typeof claims.sub !== 'string') return errorPage('the provider sent no subject');
    const mapped = await provider.mapClaims(claims);
    const subject = claims.sub;
    const known = [...this.identities.values()].find((i) => (i.oidc ?? []).some((c) => c.provider === provider.id && c.subject === subject));
    const returnTo = flow.returnTo ?? this.options.defaultBrowserReturnUrl ?? this.options.loginUiUrl;
    const signIn = (identity: TestIdentity): DoubleResponse => {
      flow.done = true;
      const session = this.createSession(identity.id);
      session.methods = [{ method: 'oidc', aal: 'aal1', completedAt: session.authenticatedAt, provider: provider.id }];
      return { status: 303, headers: { location: returnTo, 'set-cookie': this.sessionCookie(session) } };
    };
    if (known) return signIn(known);
    const email = typeof mapped.traits.email === 'string' ? mapped.traits.email : '';
    const name = typeof mapped.traits.name === 'string' ? mapped.traits.name : '';
    const owner = [...this.identities.values()].find((i) => i.email.toLowerCase() === email.toLowerCase());
    if (owner) {
      // Kratos' duplicate-credentials handling: sign in to the existing account first, then it is linked.
      flow.pendingLink = { provider: provider.id, subject, email: owner.email };
      flow.messages = [{ id: 1010016, type: 'info', text: `You tried to sign in with "${email}", but that email is already used by another account. Sign in to your account with one of the options below to add your account "${email}" at "${provider.label}" as another way to sign in.`, context: { duplicateIdentifier: email, provider: provider.label } }];
      return { status: 303, headers: { location: `${this.options.loginUiUrl}?flow=${flow.id}` } };
    }
    const problem = this.registrationProblem(email, name, 'a-password-the-check-needs-only-for-length');
    if (problem) return errorPage(problem.text);
    // Registration (after.oidc hooks: session); verified only where the mapper marked the address.
    const verified = (mapped.verified_addresses ?? []).some((a) => a.via === 'email' && a.value.toLowerCase() === email.toLowerCase());
    return signIn(this.addIdentity({ email, name, password: '', verified, oidc: [{ provider: provider.id, subject }], createdAt: this.clock.now() }));
  }

  /** method=totp in an aal2 flow: the right code raises the browser's session to aal2. */
  private secondFactor(request: DoubleRequest, flow: StoredFlow, code: string | undefined): DoubleResponse {
    const session = this.activeSession(request);
    const identity = session ? this.identities.get(session.identityId) : undefined;
    if (flow.aal !== 'aal2' || !session || !identity?.totpSecret || session.identityId !== flow.identityId) {
      return { status: 400, body: kratosError(400, 'method totp is not available in this flow') };
    }
    const totp = new TOTP({ secret: Secret.fromBase32(identity.totpSecret), digits: 6, period: 30 });
    if (typeof code !== 'string' || totp.validate({ token: code, timestamp: this.clock.now(), window: 1 }) === null) {
      flow.messages = [{ id: 4000008, text: 'The provided authentication code is invalid, please try again.', type: 'error' }];
      return { status: 400, body: this.flowJson(flow) };
    }
    flow.done = true;
    session.aal = 'aal2';
    session.authenticatedAt = this.clock.now();
    session.methods.push({ method: 'totp', aal: 'aal2', completedAt: this.clock.now() });
    return { status: 200, body: { session: this.sessionJson(session), continue_with: [] }, headers: { 'set-cookie': this.sessionCookie(session) } };
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
    return `${CSRF_COOKIE}=${csrf}; Path=/; HttpOnly; SameSite=Lax${this.domainAttribute()}`;
  }

  private createRegistrationFlow(request: DoubleRequest): DoubleResponse {
    const uiUrl = this.options.registrationUiUrl;
    if (!uiUrl) return { status: 400, body: kratosError(400, 'Registration is not allowed because it was disabled.', 'self_service_flow_disabled') };
    const returnTo = request.query.get('return_to') ?? undefined;
    const refused = this.refuseReturnTo(returnTo);
    if (refused) return refused;
    // Like Kratos: someone already signed in is sent on instead of registering a second account.
    if (this.activeSession(request)) return { status: 303, headers: { location: returnTo ?? this.options.defaultBrowserReturnUrl ?? uiUrl } };
    const requestUrl = `${this.public.url}${request.pathname}${request.query.size ? `?${request.query.toString()}` : ''}`;
    const flow: StoredRegistrationFlow = { ...this.newBrowserFlow(request, requestUrl, returnTo), values: {} };
    this.registrationFlows.set(flow.id, flow);
    return { status: 303, headers: { location: `${uiUrl}?flow=${flow.id}`, 'set-cookie': this.csrfCookie(flow.csrf) } };
  }

  /** The flow as Kratos v26 renders it for the person schema: its traits in schema order, then the password method. */
  registrationFlowJson(flow: StoredRegistrationFlow): Record<string, unknown> {
    const node = (name: string, type: string, value: string | undefined, group: string, label?: { id: number; text: string }, extra: Record<string, unknown> = {}) =>
      inputNode(group, { name, type, ...(type === 'hidden' || type === 'submit' ? {} : { required: true }), ...(value === undefined ? {} : { value }), ...extra }, label);
    return {
      ...browserFlowJson(flow),
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
    const flow = this.flowFor(this.registrationFlows, request, request.query.get('id'));
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
    const flow = this.flowFor(this.registrationFlows, request, request.query.get('flow'));
    if ('status' in flow) return flow;
    const body = request.body as { method: string; password?: string; csrf_token?: string; traits?: { email?: unknown; name?: unknown } };
    const fromForm = fromHtmlForm(request);
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
    // A new address starts unverified: Kratos mails a verification code (selfservice.flows.verification).
    const identity = this.addIdentity({ email, name, password, verified: false, createdAt: this.clock.now() });
    // The session hook of selfservice.flows.registration.after.password: signed in at once.
    const session = this.createSession(identity.id);
    const cookie = this.sessionCookie(session);
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

  /** GET /admin/identities, paged by page_token with a Link header as Kratos' keyset pagination. */
  private listIdentities(request: DoubleRequest): DoubleResponse {
    const size = Math.min(Number(request.query.get('page_size') ?? 250) || 250, 1000);
    const all = [...this.identities.values()].sort((a, b) => a.id.localeCompare(b.id));
    const after = request.query.get('page_token');
    const start = after ? all.findIndex((i) => i.id > after) : 0;
    const page = start < 0 ? [] : all.slice(start, start + size);
    const last = page[page.length - 1];
    const more = last !== undefined && all.indexOf(last) < all.length - 1;
    return {
      status: 200,
      body: page.map((i) => this.identityJson(i)),
      ...(more ? { headers: { link: `</admin/identities?page_size=${size}&page_token=${encodeURIComponent(last.id)}>; rel="next"` } } : {}),
    };
  }

  /** PATCH /admin/identities/{id}: the operations the operator's tools send (verifiable_addresses/<i>/verified|status). */
  private patchIdentity(request: DoubleRequest): DoubleResponse {
    const identity = this.identities.get(request.pathParams.id as string);
    if (!identity) return { status: 404, body: kratosError(404, 'Unable to locate the resource') };
    for (const op of request.body as Array<{ op: string; path: string; value?: unknown }>) {
      const match = /^\/verifiable_addresses\/0\/(verified|status)$/.exec(op.path);
      if (op.op !== 'replace' || !match) return { status: 400, body: kratosError(400, `the double does not model ${op.op} ${op.path}`) };
      if (match[1] === 'verified') identity.verified = op.value === true;
    }
    return { status: 200, body: this.identityJson(identity) };
  }

  /** Logout tokens → the session each ends (createBrowserLogoutFlow hands one out per call). */
  private readonly logoutTokens = new Map<string, { sessionToken: string; returnTo: string | undefined }>();

  /** As Kratos: the browser's session cookie → a logout URL with a single-use token; no session → 401. */
  private createLogoutFlow(request: DoubleRequest): DoubleResponse {
    const session = this.activeSession(request);
    if (!session) return { status: 401, body: kratosError(401, 'No valid session credentials found in the request.', 'session_inactive') };
    const returnTo = request.query.get('return_to') ?? undefined;
    const refused = this.refuseReturnTo(returnTo);
    if (refused) return refused;
    const token = randomBytes(24).toString('base64url');
    this.logoutTokens.set(token, { sessionToken: session.token, returnTo });
    const url = new URL(`${this.public.url}/self-service/logout`);
    url.searchParams.set('token', token);
    if (returnTo) url.searchParams.set('return_to', returnTo);
    return { status: 200, body: { logout_url: url.toString(), logout_token: token } };
  }

  /** The browser opens the logout URL: the session ends, its cookie is cleared, 303 to return_to or the default. */
  private updateLogoutFlow(request: DoubleRequest): DoubleResponse {
    const token = request.query.get('token') ?? '';
    const logout = this.logoutTokens.get(token);
    if (!logout) return { status: 400, body: kratosError(400, 'The provided logout token is invalid.', 'self_service_flow_logout_token_invalid') };
    this.logoutTokens.delete(token);
    const session = this.sessions.get(logout.sessionToken);
    if (session) session.active = false;
    return {
      status: 303,
      headers: {
        location: logout.returnTo ?? this.options.defaultBrowserReturnUrl ?? this.options.loginUiUrl,
        'set-cookie': `${SESSION_COOKIE}=; Path=/${this.domainAttribute()}; Max-Age=0; HttpOnly; SameSite=Lax`,
      },
    };
  }

  private disableSession(request: DoubleRequest): DoubleResponse {
    const session = [...this.sessions.values()].find((s) => s.id === request.pathParams.id);
    if (!session) return { status: 400, body: kratosError(400, 'session not found') };
    session.active = false;
    return { status: 204 };
  }
}
