import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { contractPath } from '../../contracts.js';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from 'jose';
import { safeEqual } from '../../safe-compare.js';
import type { DoubleRequest, DoubleResponse } from './contract-server.js';
import type { TestClock } from './clock.js';
import { OryDouble } from './ory-double.js';

/**
 * A double of Ory Hydra v26.2.0: just enough of the OAuth2/OIDC server for a real client library to
 * complete an authorization-code flow with PKCE through our login and consent app — discovery, JWKS,
 * /oauth2/auth with login and consent challenges and verifiers, /oauth2/token (code and refresh),
 * /userinfo, RP-initiated logout — plus the admin API for clients, the three challenge types and
 * introspection. Both ports are real HTTP servers checked against the vendored spec__api.json.
 *
 * Modelled rules: exact redirect_uri match; scopes must be allowed for the client; PKCE (S256) required
 * for public clients (`oauth2.pkce.enforced_for_public_clients`); challenges and verifiers are single
 * use, a handled challenge answers 410 with the original request URL; a remembered login gives
 * `skip: true` unless prompt=login or max_age is exceeded; a remembered consent skips for a subset of scopes.
 */

/** Hydra's OpenAPI document, found through services/shared/contracts (throws naming the remedy when absent). */
export const hydraSpec = (): string => contractPath('ory/hydra-v26.2.0/spec__api.json');
const AUTH_COOKIE = 'ory_hydra_session_dev';

type Json = Record<string, unknown>;

interface Client extends Json {
  client_id: string;
  client_secret?: string;
  redirect_uris: string[];
  grant_types: string[];
  response_types: string[];
  scope: string;
  token_endpoint_auth_method: string;
  /** Audiences the client may request (Hydra's audience whitelist). */
  audience?: string[];
}

interface AuthRequest {
  clientId: string;
  requestUrl: string;
  redirectUri: string;
  scopes: string[];
  /** `audience` of the authorization request (space-separated), each whitelisted on the client. */
  audiences: string[];
  state?: string;
  nonce?: string;
  codeChallenge?: string;
  prompt: string[];
  maxAge?: number;
}

interface LoginRequest {
  challenge: string;
  auth: AuthRequest;
  skip: boolean;
  subject: string;
  sessionId: string;
  handled?: { subject: string; remember: boolean; rememberFor: number; acr?: string; amr?: string[]; context?: unknown; idpSessionId?: string; authTime: number };
  rejected?: Json;
  verifier?: string;
  verifierUsed?: boolean;
}

interface ConsentRequest {
  challenge: string;
  login: LoginRequest;
  skip: boolean;
  handled?: { grantScope: string[]; grantAudience: string[]; remember: boolean; session: { id_token?: Json; access_token?: Json } };
  rejected?: Json;
  verifier?: string;
  verifierUsed?: boolean;
}

interface IssuedCode {
  consent: ConsentRequest;
  expiresAt: number;
  used: boolean;
}

interface Token {
  clientId: string;
  subject: string;
  scopes: string[];
  audience: string[];
  session: { id_token?: Json; access_token?: Json };
  issuedAt: number;
  expiresAt: number;
  active: boolean;
  kind: 'access_token' | 'refresh_token';
  consent: ConsentRequest;
}

interface LogoutRequest {
  challenge: string;
  subject: string;
  sid: string;
  rpInitiated: boolean;
  clientId?: string;
  requestUrl: string;
  postLogoutRedirect?: string;
  state?: string;
  handled?: boolean;
  verifier?: string;
}

export interface HydraDoubleOptions {
  clock?: TestClock;
  /** urls.login, urls.consent, urls.logout of hydra.yml. */
  loginUrl: string;
  consentUrl: string;
  logoutUrl: string;
  postLogoutRedirect: string;
  accessTokenLifespanSeconds?: number;
}

function oauthError(status: number, error: string, description: string): DoubleResponse {
  return { status, body: { error, error_description: description, status_code: status } };
}

function sha256Base64Url(text: string): string {
  return createHash('sha256').update(text).digest('base64url');
}

export class HydraDouble extends OryDouble {
  readonly clients = new Map<string, Client>();
  readonly logins = new Map<string, LoginRequest>();
  readonly consents = new Map<string, ConsentRequest>();
  readonly logouts = new Map<string, LogoutRequest>();
  readonly tokens = new Map<string, Token>();
  private readonly codes = new Map<string, IssuedCode>();
  /** Browser authentication sessions (the remember cookie): cookie value → subject and auth time. */
  private readonly authSessions = new Map<string, { subject: string; authTime: number; sessionId: string; rememberUntil: number }>();
  /** Remembered consents: subject + client → granted scopes and session claims. */
  private readonly rememberedConsents = new Map<string, { grantScope: string[]; session: { id_token?: Json; access_token?: Json } }>();
  private signingKey!: CryptoKey;
  private publicJwk!: JWK;

  constructor(private readonly options: HydraDoubleOptions) {
    super('hydra', hydraSpec(), 'hydra-api', (status, message) => oauthError(status, status === 404 ? 'not_found' : 'invalid_request', message).body, options.clock);
    this.public
      .on('discoverOidcConfiguration', () => ({ status: 200, body: this.discovery() }))
      .on('discoverJsonWebKeys', () => ({ status: 200, body: { keys: [this.publicJwk] } }))
      .on('oAuth2Authorize', (r) => this.authorize(r))
      .on('oauth2TokenExchange', (r) => this.token(r))
      .on('getOidcUserInfo', (r) => this.userinfo(r))
      .on('revokeOidcSession', (r) => this.logoutEndpoint(r));
    this.admin
      .on('listOAuth2Clients', () => ({ status: 200, body: [...this.clients.values()].map((c) => this.clientJson(c, false)) }))
      .on('getOAuth2Client', (r) => this.getClient(r))
      .on('createOAuth2Client', (r) => this.createClient(r))
      .on('setOAuth2Client', (r) => this.setClient(r))
      .on('getOAuth2LoginRequest', (r) => this.getLogin(r))
      .on('acceptOAuth2LoginRequest', (r) => this.acceptLogin(r))
      .on('rejectOAuth2LoginRequest', (r) => this.rejectLogin(r))
      .on('getOAuth2ConsentRequest', (r) => this.getConsent(r))
      .on('acceptOAuth2ConsentRequest', (r) => this.acceptConsent(r))
      .on('rejectOAuth2ConsentRequest', (r) => this.rejectConsent(r))
      .on('revokeOAuth2ConsentSessions', (r) => this.revokeConsentSessions(r))
      .on('getOAuth2LogoutRequest', (r) => this.getLogout(r))
      .on('acceptOAuth2LogoutRequest', (r) => this.acceptLogout(r))
      .on('rejectOAuth2LogoutRequest', (r) => this.rejectLogout(r))
      .on('introspectOAuth2Token', (r) => this.introspect(r));
  }

  /** The signing key first: a token can be asked for as soon as the ports answer. */
  override async start(): Promise<this> {
    const { privateKey, publicKey } = await generateKeyPair('RS256');
    this.signingKey = privateKey;
    this.publicJwk = { ...(await exportJWK(publicKey)), kid: 'double-key-1', alg: 'RS256', use: 'sig' };
    return super.start();
  }

  get issuer(): string {
    return `${this.public.url}/`;
  }

  /** Register a client directly (as if synced earlier); returns it with its secret. */
  addClient(client: Partial<Client> & { client_id: string; redirect_uris: string[] }): Client {
    const stored: Client = {
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      scope: 'openid offline_access profile email',
      token_endpoint_auth_method: 'client_secret_basic',
      ...client,
    };
    if (stored.token_endpoint_auth_method !== 'none' && !stored.client_secret) stored.client_secret = randomBytes(24).toString('base64url');
    this.clients.set(stored.client_id, stored);
    return stored;
  }

  private discovery(): Json {
    const base = this.public.url;
    return {
      issuer: this.issuer,
      authorization_endpoint: `${base}/oauth2/auth`,
      token_endpoint: `${base}/oauth2/token`,
      device_authorization_endpoint: `${base}/oauth2/device/auth`,
      jwks_uri: `${base}/.well-known/jwks.json`,
      userinfo_endpoint: `${base}/userinfo`,
      end_session_endpoint: `${base}/oauth2/sessions/logout`,
      revocation_endpoint: `${base}/oauth2/revoke`,
      subject_types_supported: ['public'],
      response_types_supported: ['code'],
      grant_types_supported: ['authorization_code', 'refresh_token'],
      scopes_supported: ['openid', 'offline_access', 'profile', 'email'],
      token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'none'],
      code_challenge_methods_supported: ['S256'],
      id_token_signing_alg_values_supported: ['RS256'],
      id_token_signed_response_alg: ['RS256'],
      userinfo_signed_response_alg: ['none'],
      claims_supported: ['sub', 'email', 'name', 'role'],
      frontchannel_logout_supported: false,
      backchannel_logout_supported: false,
    };
  }

  // ---------------------------------------------------------------- clients (admin)

  private clientJson(client: Client, withSecret: boolean): Json {
    const { client_secret, ...rest } = client;
    return { ...rest, ...(withSecret && client_secret ? { client_secret } : {}), created_at: new Date(0).toISOString(), updated_at: new Date(0).toISOString() };
  }

  private getClient(request: DoubleRequest): DoubleResponse {
    const client = this.clients.get(request.pathParams.id as string);
    return client ? { status: 200, body: this.clientJson(client, false) } : oauthError(404, 'not_found', 'Unable to locate the resource');
  }

  private normalizeClient(body: Json, id: string, secret: string | undefined): Client {
    const method = (body.token_endpoint_auth_method as string | undefined) ?? 'client_secret_basic';
    return {
      ...body,
      client_id: id,
      redirect_uris: (body.redirect_uris as string[] | undefined) ?? [],
      grant_types: (body.grant_types as string[] | undefined) ?? ['authorization_code'],
      response_types: (body.response_types as string[] | undefined) ?? ['code'],
      scope: (body.scope as string | undefined) ?? 'offline_access offline openid',
      token_endpoint_auth_method: method,
      ...(method === 'none' ? {} : { client_secret: secret ?? randomBytes(26).toString('base64url') }),
    } as Client;
  }

  private createClient(request: DoubleRequest): DoubleResponse {
    const body = request.body as Json;
    const id = (body.client_id as string | undefined) ?? randomUUID();
    if (this.clients.has(id)) return oauthError(409, 'invalid_request', 'Unable to insert or update resource because a resource with that value exists already');
    const client = this.normalizeClient(body, id, body.client_secret as string | undefined);
    this.clients.set(id, client);
    // Like Hydra: the generated secret is in this one response and never again.
    return { status: 201, body: this.clientJson(client, true) };
  }

  private setClient(request: DoubleRequest): DoubleResponse {
    const id = request.pathParams.id as string;
    const existing = this.clients.get(id);
    if (!existing) return oauthError(404, 'not_found', 'Unable to locate the resource');
    const body = request.body as Json;
    const client = this.normalizeClient(body, id, (body.client_secret as string | undefined) ?? existing.client_secret);
    this.clients.set(id, client);
    return { status: 200, body: this.clientJson(client, body.client_secret !== undefined) };
  }

  // ---------------------------------------------------------------- authorization endpoint (public)

  private redirectWithError(auth: AuthRequest, error: Json): DoubleResponse {
    const target = new URL(auth.redirectUri);
    target.searchParams.set('error', String(error.error ?? 'request_denied'));
    if (error.error_description) target.searchParams.set('error_description', String(error.error_description));
    if (auth.state) target.searchParams.set('state', auth.state);
    return { status: 302, headers: { location: target.toString() } };
  }

  private authorize(request: DoubleRequest): DoubleResponse {
    const q = request.query;
    if (q.has('login_verifier')) return this.afterLogin(request, q.get('login_verifier') as string);
    if (q.has('consent_verifier')) return this.afterConsent(q.get('consent_verifier') as string);

    const client = this.clients.get(q.get('client_id') ?? '');
    if (!client) return oauthError(401, 'invalid_client', 'Client authentication failed (unknown client)');
    const redirectUri = q.get('redirect_uri') ?? client.redirect_uris[0] ?? '';
    if (!client.redirect_uris.includes(redirectUri)) return oauthError(400, 'invalid_request', 'The redirect_uri does not match any registered redirect URI');
    const auth: AuthRequest = {
      clientId: client.client_id,
      requestUrl: `${this.public.url}/oauth2/auth?${q.toString()}`,
      redirectUri,
      scopes: (q.get('scope') ?? '').split(' ').filter(Boolean),
      audiences: (q.get('audience') ?? '').split(' ').filter(Boolean),
      prompt: (q.get('prompt') ?? '').split(' ').filter(Boolean),
      ...(q.get('state') ? { state: q.get('state') as string } : {}),
      ...(q.get('nonce') ? { nonce: q.get('nonce') as string } : {}),
      ...(q.get('max_age') ? { maxAge: Number(q.get('max_age')) } : {}),
    };
    if (q.get('response_type') !== 'code' || !client.response_types.includes('code')) return this.redirectWithError(auth, { error: 'unsupported_response_type' });
    const allowed = client.scope.split(' ');
    const notAllowed = auth.scopes.filter((s) => !allowed.includes(s));
    if (notAllowed.length > 0) return this.redirectWithError(auth, { error: 'invalid_scope', error_description: `scope ${notAllowed.join(' ')} is not allowed for this client` });
    // Like Hydra: every requested audience must be whitelisted on the client.
    const foreignAudience = auth.audiences.filter((a) => !(client.audience ?? []).includes(a));
    if (foreignAudience.length > 0) return this.redirectWithError(auth, { error: 'invalid_request', error_description: `Requested audience '${foreignAudience.join(' ')}' has not been whitelisted by the OAuth 2.0 Client.` });
    const challenge = q.get('code_challenge');
    if (challenge) {
      if (q.get('code_challenge_method') !== 'S256') return this.redirectWithError(auth, { error: 'invalid_request', error_description: 'only S256 is allowed' });
      auth.codeChallenge = challenge;
    } else if (client.token_endpoint_auth_method === 'none') {
      return this.redirectWithError(auth, { error: 'invalid_request', error_description: 'PKCE is required for public clients' });
    }

    // A remembered authentication (the cookie) lets the login app skip, unless the client demands fresh login.
    const remembered = this.authSessions.get(request.cookies[AUTH_COOKIE] ?? '');
    const fresh = remembered && remembered.rememberUntil > this.clock.now();
    const tooOld = remembered && auth.maxAge !== undefined && (this.clock.now() - remembered.authTime) / 1000 > auth.maxAge;
    const skip = Boolean(fresh && !auth.prompt.includes('login') && !tooOld);
    const login: LoginRequest = {
      challenge: randomBytes(16).toString('hex'),
      auth,
      skip,
      subject: skip && remembered ? remembered.subject : '',
      sessionId: remembered?.sessionId ?? randomUUID(),
    };
    this.logins.set(login.challenge, login);
    return { status: 302, headers: { location: `${this.options.loginUrl}?login_challenge=${login.challenge}` } };
  }

  private afterLogin(request: DoubleRequest, verifier: string): DoubleResponse {
    const login = [...this.logins.values()].find((l) => l.verifier === verifier);
    if (!login || login.verifierUsed) return oauthError(403, 'invalid_request', 'The login verifier has already been used, has not been granted, or is invalid');
    login.verifierUsed = true;
    if (login.rejected) return this.redirectWithError(login.auth, login.rejected);
    const handled = login.handled as NonNullable<LoginRequest['handled']>;
    const headers: Record<string, string> = {};
    if (handled.remember) {
      const cookie = randomBytes(16).toString('hex');
      const rememberFor = handled.rememberFor === 0 ? 365 * 86400 : handled.rememberFor;
      this.authSessions.set(cookie, { subject: handled.subject, authTime: handled.authTime, sessionId: login.sessionId, rememberUntil: this.clock.now() + rememberFor * 1000 });
      headers['set-cookie'] = `${AUTH_COOKIE}=${cookie}; Path=/; HttpOnly; SameSite=Lax`;
    }
    void request;
    const rememberedConsent = this.rememberedConsents.get(`${handled.subject} ${login.auth.clientId}`);
    const skip = Boolean(rememberedConsent && login.auth.scopes.every((s) => rememberedConsent.grantScope.includes(s)));
    const consent: ConsentRequest = { challenge: randomBytes(16).toString('hex'), login, skip };
    this.consents.set(consent.challenge, consent);
    headers.location = `${this.options.consentUrl}?consent_challenge=${consent.challenge}`;
    return { status: 302, headers };
  }

  private afterConsent(verifier: string): DoubleResponse {
    const consent = [...this.consents.values()].find((c) => c.verifier === verifier);
    if (!consent || consent.verifierUsed) return oauthError(403, 'invalid_request', 'The consent verifier has already been used, has not been granted, or is invalid');
    consent.verifierUsed = true;
    const auth = consent.login.auth;
    if (consent.rejected) return this.redirectWithError(auth, consent.rejected);
    const code = randomBytes(24).toString('base64url');
    this.codes.set(code, { consent, expiresAt: this.clock.now() + 600_000, used: false });
    const target = new URL(auth.redirectUri);
    target.searchParams.set('code', code);
    target.searchParams.set('scope', (consent.handled as NonNullable<ConsentRequest['handled']>).grantScope.join(' '));
    if (auth.state) target.searchParams.set('state', auth.state);
    return { status: 302, headers: { location: target.toString() } };
  }

  // ---------------------------------------------------------------- login / consent / logout requests (admin)

  private loginJson(login: LoginRequest): Json {
    const client = this.clients.get(login.auth.clientId) as Client;
    return {
      challenge: login.challenge,
      client: this.clientJson(client, false),
      request_url: login.auth.requestUrl,
      requested_scope: login.auth.scopes,
      requested_access_token_audience: login.auth.audiences,
      session_id: login.sessionId,
      skip: login.skip,
      subject: login.subject,
      oidc_context: {},
    };
  }

  /** A handled challenge answers 410 with the original authorization URL, so the browser can start over. */
  private gone(requestUrl: string): DoubleResponse {
    return { status: 410, body: { redirect_to: requestUrl } };
  }

  private getLogin(request: DoubleRequest): DoubleResponse {
    const login = this.logins.get(request.query.get('login_challenge') as string);
    if (!login) return oauthError(404, 'not_found', 'Unable to locate the requested resource');
    if (login.handled || login.rejected) return this.gone(login.auth.requestUrl);
    return { status: 200, body: this.loginJson(login) };
  }

  private acceptLogin(request: DoubleRequest): DoubleResponse {
    const login = this.logins.get(request.query.get('login_challenge') as string);
    if (!login) return oauthError(404, 'not_found', 'Unable to locate the requested resource');
    if (login.handled || login.rejected) return this.gone(login.auth.requestUrl);
    const body = request.body as { subject: string; remember?: boolean; remember_for?: number; acr?: string; amr?: string[]; context?: unknown; identity_provider_session_id?: string };
    if (login.skip && body.subject !== login.subject) {
      return oauthError(400, 'invalid_request', `Field 'subject' does not match subject from previous authentication`);
    }
    const remembered = this.authSessions.get([...this.authSessions.entries()].find(([, s]) => s.sessionId === login.sessionId)?.[0] ?? '');
    login.handled = {
      subject: body.subject,
      remember: body.remember ?? false,
      rememberFor: body.remember_for ?? 0,
      authTime: login.skip && remembered ? remembered.authTime : this.clock.now(),
      ...(body.acr ? { acr: body.acr } : {}),
      ...(body.amr ? { amr: body.amr } : {}),
      ...(body.context === undefined ? {} : { context: body.context }),
      ...(body.identity_provider_session_id ? { idpSessionId: body.identity_provider_session_id } : {}),
    };
    login.verifier = randomBytes(16).toString('hex');
    return { status: 200, body: { redirect_to: `${login.auth.requestUrl}&login_verifier=${login.verifier}` } };
  }

  private rejectLogin(request: DoubleRequest): DoubleResponse {
    const login = this.logins.get(request.query.get('login_challenge') as string);
    if (!login) return oauthError(404, 'not_found', 'Unable to locate the requested resource');
    if (login.handled || login.rejected) return this.gone(login.auth.requestUrl);
    login.rejected = { error: 'access_denied', ...(request.body as Json) };
    login.verifier = randomBytes(16).toString('hex');
    return { status: 200, body: { redirect_to: `${login.auth.requestUrl}&login_verifier=${login.verifier}` } };
  }

  private getConsent(request: DoubleRequest): DoubleResponse {
    const consent = this.consents.get(request.query.get('consent_challenge') as string);
    if (!consent) return oauthError(404, 'not_found', 'Unable to locate the requested resource');
    if (consent.handled || consent.rejected) return this.gone(consent.login.auth.requestUrl);
    const handled = consent.login.handled as NonNullable<LoginRequest['handled']>;
    return {
      status: 200,
      body: {
        challenge: consent.challenge,
        client: this.clientJson(this.clients.get(consent.login.auth.clientId) as Client, false),
        request_url: consent.login.auth.requestUrl,
        requested_scope: consent.login.auth.scopes,
        requested_access_token_audience: consent.login.auth.audiences,
        skip: consent.skip,
        subject: handled.subject,
        login_challenge: consent.login.challenge,
        login_session_id: consent.login.sessionId,
        oidc_context: {},
        ...(handled.acr ? { acr: handled.acr } : {}),
        ...(handled.amr ? { amr: handled.amr } : {}),
        ...(handled.context === undefined ? {} : { context: handled.context }),
      },
    };
  }

  private acceptConsent(request: DoubleRequest): DoubleResponse {
    const consent = this.consents.get(request.query.get('consent_challenge') as string);
    if (!consent) return oauthError(404, 'not_found', 'Unable to locate the requested resource');
    if (consent.handled || consent.rejected) return this.gone(consent.login.auth.requestUrl);
    const body = request.body as { grant_scope?: string[]; grant_access_token_audience?: string[]; remember?: boolean; session?: { id_token?: Json; access_token?: Json } };
    const grantScope = body.grant_scope ?? [];
    const extra = grantScope.filter((s) => !consent.login.auth.scopes.includes(s));
    if (extra.length > 0) return oauthError(400, 'invalid_request', `scope ${extra.join(' ')} was not requested`);
    const grantAudience = body.grant_access_token_audience ?? [];
    const extraAudience = grantAudience.filter((a) => !consent.login.auth.audiences.includes(a));
    if (extraAudience.length > 0) return oauthError(400, 'invalid_request', `audience ${extraAudience.join(' ')} was not requested`);
    consent.handled = { grantScope, grantAudience, remember: body.remember ?? false, session: body.session ?? {} };
    if (consent.handled.remember) {
      const subject = (consent.login.handled as NonNullable<LoginRequest['handled']>).subject;
      this.rememberedConsents.set(`${subject} ${consent.login.auth.clientId}`, { grantScope, session: consent.handled.session });
    }
    consent.verifier = randomBytes(16).toString('hex');
    return { status: 200, body: { redirect_to: `${consent.login.auth.requestUrl}&consent_verifier=${consent.verifier}` } };
  }

  private rejectConsent(request: DoubleRequest): DoubleResponse {
    const consent = this.consents.get(request.query.get('consent_challenge') as string);
    if (!consent) return oauthError(404, 'not_found', 'Unable to locate the requested resource');
    if (consent.handled || consent.rejected) return this.gone(consent.login.auth.requestUrl);
    consent.rejected = { error: 'access_denied', ...(request.body as Json) };
    consent.verifier = randomBytes(16).toString('hex');
    return { status: 200, body: { redirect_to: `${consent.login.auth.requestUrl}&consent_verifier=${consent.verifier}` } };
  }

  private logoutEndpoint(request: DoubleRequest): DoubleResponse {
    const q = request.query;
    const verifier = q.get('logout_verifier');
    if (verifier) {
      const logout = [...this.logouts.values()].find((l) => l.verifier === verifier);
      if (!logout) return { status: 302, headers: { location: `${this.options.postLogoutRedirect}?error=invalid_request` } };
      logout.verifier = undefined;
      // As Hydra: a logout ends the login session; tokens stay valid until they expire or the subject's
      // consent sessions are revoked (revokeOAuth2ConsentSessions, which the login app calls).
      for (const [cookie, session] of this.authSessions) if (session.sessionId === logout.sid) this.authSessions.delete(cookie);
      const target = new URL(logout.postLogoutRedirect ?? this.options.postLogoutRedirect);
      if (logout.state) target.searchParams.set('state', logout.state);
      return { status: 302, headers: { location: target.toString(), 'set-cookie': `${AUTH_COOKIE}=; Path=/; Max-Age=0` } };
    }
    const remembered = this.authSessions.get(request.cookies[AUTH_COOKIE] ?? '');
    const hint = q.get('id_token_hint');
    let clientId: string | undefined;
    if (hint) {
      const payload = JSON.parse(Buffer.from(hint.split('.')[1] ?? '', 'base64url').toString('utf8')) as { aud?: string | string[] };
      clientId = Array.isArray(payload.aud) ? payload.aud[0] : payload.aud;
    }
    const postLogout = q.get('post_logout_redirect_uri') ?? undefined;
    const client = clientId ? this.clients.get(clientId) : undefined;
    if (postLogout && !((client?.post_logout_redirect_uris as string[] | undefined) ?? []).includes(postLogout)) {
      return { status: 302, headers: { location: `${this.options.postLogoutRedirect}?error=invalid_request` } };
    }
    const logout: LogoutRequest = {
      challenge: randomBytes(16).toString('hex'),
      subject: remembered?.subject ?? '',
      sid: remembered?.sessionId ?? '',
      rpInitiated: Boolean(hint),
      requestUrl: `${this.public.url}/oauth2/sessions/logout?${q.toString()}`,
      ...(clientId ? { clientId } : {}),
      ...(postLogout ? { postLogoutRedirect: postLogout } : {}),
      ...(q.get('state') ? { state: q.get('state') as string } : {}),
    };
    this.logouts.set(logout.challenge, logout);
    return { status: 302, headers: { location: `${this.options.logoutUrl}?logout_challenge=${logout.challenge}` } };
  }

  /**
   * DELETE /admin/oauth2/auth/sessions/consent?subject=…[&client=…|&all=true]: forgets the subject's
   * remembered consents and, as Hydra documents, invalidates every access and refresh token issued
   * for them.
   */
  private revokeConsentSessions(request: DoubleRequest): DoubleResponse {
    const subject = request.query.get('subject');
    const client = request.query.get('client');
    if (!subject) return oauthError(400, 'invalid_request', 'Query parameter subject is required');
    if (!client && request.query.get('all') !== 'true') return oauthError(400, 'invalid_request', 'Query parameter client or all=true is required');
    for (const key of [...this.rememberedConsents.keys()]) {
      if (key === `${subject} ${client}` || (!client && key.startsWith(`${subject} `))) this.rememberedConsents.delete(key);
    }
    for (const token of this.tokens.values()) if (token.subject === subject && (!client || token.clientId === client)) token.active = false;
    return { status: 204 };
  }

  private getLogout(request: DoubleRequest): DoubleResponse {
    const logout = this.logouts.get(request.query.get('logout_challenge') as string);
    if (!logout) return oauthError(404, 'not_found', 'Unable to locate the requested resource');
    if (logout.handled) return this.gone(logout.requestUrl);
    const client = logout.clientId ? this.clients.get(logout.clientId) : undefined;
    return {
      status: 200,
      body: {
        challenge: logout.challenge,
        subject: logout.subject,
        sid: logout.sid,
        rp_initiated: logout.rpInitiated,
        request_url: logout.requestUrl,
        ...(client ? { client: this.clientJson(client, false) } : {}),
      },
    };
  }

  private acceptLogout(request: DoubleRequest): DoubleResponse {
    const logout = this.logouts.get(request.query.get('logout_challenge') as string);
    if (!logout) return oauthError(404, 'not_found', 'Unable to locate the requested resource');
    if (logout.handled) return this.gone(logout.requestUrl);
    logout.handled = true;
    logout.verifier = randomBytes(16).toString('hex');
    return { status: 200, body: { redirect_to: `${this.public.url}/oauth2/sessions/logout?logout_verifier=${logout.verifier}` } };
  }

  private rejectLogout(request: DoubleRequest): DoubleResponse {
    const logout = this.logouts.get(request.query.get('logout_challenge') as string);
    if (!logout) return oauthError(404, 'not_found', 'Unable to locate the requested resource');
    logout.handled = true;
    return { status: 204 };
  }

  // ---------------------------------------------------------------- token endpoint, userinfo, introspection

  private authenticateClient(request: DoubleRequest): Client | undefined {
    const body = request.body as Record<string, string>;
    const header = request.headers.authorization;
    if (header?.startsWith('Basic ')) {
      const [id, secret] = Buffer.from(header.slice(6), 'base64').toString('utf8').split(':').map((part) => decodeURIComponent(part.replace(/\+/g, ' ')));
      const client = this.clients.get(id ?? '');
      if (client?.token_endpoint_auth_method !== 'client_secret_basic' || !client.client_secret || !safeEqual(client.client_secret, secret ?? '')) return undefined;
      return client;
    }
    const client = this.clients.get(body.client_id ?? '');
    if (!client) return undefined;
    if (client.token_endpoint_auth_method === 'none') return client;
    if (client.token_endpoint_auth_method === 'client_secret_post' && client.client_secret && safeEqual(client.client_secret, body.client_secret ?? '')) return client;
    return undefined;
  }

  private async issueTokens(client: Client, consent: ConsentRequest, scopes: string[]): Promise<Json> {
    const handledLogin = consent.login.handled as NonNullable<LoginRequest['handled']>;
    const session = (consent.handled as NonNullable<ConsentRequest['handled']>).session;
    const now = this.clock.now();
    const lifespan = this.options.accessTokenLifespanSeconds ?? 3600;
    const accessToken = `ory_at_${randomBytes(32).toString('base64url')}`;
    const audience = (consent.handled as NonNullable<ConsentRequest['handled']>).grantAudience ?? [];
    const base = { clientId: client.client_id, subject: handledLogin.subject, scopes, audience, session, issuedAt: now, active: true, consent };
    this.tokens.set(accessToken, { ...base, expiresAt: now + lifespan * 1000, kind: 'access_token' });
    const out: Json = { access_token: accessToken, token_type: 'bearer', expires_in: lifespan, scope: scopes.join(' ') };
    if ((scopes.includes('offline_access') || scopes.includes('offline')) && client.grant_types.includes('refresh_token')) {
      const refreshToken = `ory_rt_${randomBytes(32).toString('base64url')}`;
      this.tokens.set(refreshToken, { ...base, expiresAt: now + 720 * 3600_000, kind: 'refresh_token' });
      out.refresh_token = refreshToken;
    }
    if (scopes.includes('openid')) {
      out.id_token = await new SignJWT({
        ...(session.id_token ?? {}),
        ...(consent.login.auth.nonce ? { nonce: consent.login.auth.nonce } : {}),
        auth_time: Math.floor(handledLogin.authTime / 1000),
        sid: consent.login.sessionId,
        at_hash: createHash('sha256').update(accessToken).digest().subarray(0, 16).toString('base64url'),
        ...(handledLogin.acr ? { acr: handledLogin.acr } : {}),
        ...(handledLogin.amr ? { amr: handledLogin.amr } : {}),
      })
        .setProtectedHeader({ alg: 'RS256', kid: this.publicJwk.kid as string, typ: 'JWT' })
        .setIssuer(this.issuer)
        .setSubject(handledLogin.subject)
        .setAudience(client.client_id)
        .setIssuedAt(Math.floor(now / 1000))
        .setExpirationTime(Math.floor(now / 1000) + 3600)
        .setJti(randomUUID())
        .sign(this.signingKey);
    }
    return out;
  }

  private async token(request: DoubleRequest): Promise<DoubleResponse> {
    const body = request.body as Record<string, string>;
    const client = this.authenticateClient(request);
    if (!client) return oauthError(401, 'invalid_client', 'Client authentication failed');
    if (!client.grant_types.includes(body.grant_type ?? '')) return oauthError(400, 'unauthorized_client', `grant ${body.grant_type} is not allowed for this client`);
    if (body.grant_type === 'authorization_code') {
      const issued = this.codes.get(body.code ?? '');
      if (!issued || issued.used || issued.expiresAt < this.clock.now() || issued.consent.login.auth.clientId !== client.client_id) {
        return oauthError(400, 'invalid_grant', 'The authorization code is invalid, expired or was already used');
      }
      const auth = issued.consent.login.auth;
      if (body.redirect_uri !== auth.redirectUri) return oauthError(400, 'invalid_grant', 'redirect_uri does not match the authorization request');
      if (auth.codeChallenge && sha256Base64Url(body.code_verifier ?? '') !== auth.codeChallenge) return oauthError(400, 'invalid_grant', 'The PKCE code verifier does not match the challenge');
      issued.used = true;
      const scopes = (issued.consent.handled as NonNullable<ConsentRequest['handled']>).grantScope;
      return { status: 200, body: await this.issueTokens(client, issued.consent, scopes) };
    }
    if (body.grant_type === 'refresh_token') {
      const stored = this.tokens.get(body.refresh_token ?? '');
      if (!stored || stored.kind !== 'refresh_token' || !stored.active || stored.clientId !== client.client_id) return oauthError(400, 'invalid_grant', 'The refresh token is invalid');
      stored.active = false; // refresh tokens rotate
      return { status: 200, body: await this.issueTokens(client, stored.consent, stored.scopes) };
    }
    return oauthError(400, 'unsupported_grant_type', `grant_type ${body.grant_type} is not supported`);
  }

  private activeToken(raw: string | undefined): Token | undefined {
    const token = raw === undefined ? undefined : this.tokens.get(raw);
    return token && token.active && token.expiresAt > this.clock.now() ? token : undefined;
  }

  private userinfo(request: DoubleRequest): DoubleResponse {
    const header = request.headers.authorization ?? '';
    const token = this.activeToken(/^bearer /i.test(header) ? header.slice(7) : undefined);
    if (!token || token.kind !== 'access_token') return { ...oauthError(401, 'request_unauthorized', 'The access token is invalid'), headers: { 'www-authenticate': 'Bearer error="invalid_token"' } };
    return { status: 200, body: { ...(token.session.id_token ?? {}), sub: token.subject } };
  }

  private introspect(request: DoubleRequest): DoubleResponse {
    const body = request.body as { token: string; scope?: string };
    const token = this.activeToken(body.token);
    const required = (body.scope ?? '').split(' ').filter(Boolean);
    if (!token || !required.every((s) => token.scopes.includes(s))) return { status: 200, body: { active: false } };
    return {
      status: 200,
      body: {
        active: true,
        sub: token.subject,
        client_id: token.clientId,
        scope: token.scopes.join(' '),
        iat: Math.floor(token.issuedAt / 1000),
        exp: Math.floor(token.expiresAt / 1000),
        iss: this.issuer,
        aud: token.audience,
        token_type: 'Bearer',
        token_use: token.kind,
        ext: token.session.access_token ?? {},
      },
    };
  }

  /** Revoke a token the way an admin would (for "introspection sees revocation" tests). */
  revoke(token: string): void {
    const stored = this.tokens.get(token);
    if (stored) stored.active = false;
  }
}
