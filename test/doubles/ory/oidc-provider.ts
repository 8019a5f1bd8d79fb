import { createServer, type Server } from 'node:http';
import Provider, { type Configuration } from 'oidc-provider';
import { closeGracefully, listen } from '../../../services/shared/http-server.js';

/**
 * A real OpenID provider for the social sign-in side of the tests: `oidc-provider` (a certified OpenID
 * Connect implementation) on loopback, port 0, standing in for Microsoft Entra ID, Keycloak or any
 * issuer with discovery. Kratos (its double) is its one client, with the redirect URI an operator
 * registers at a real provider: `<kratos public>/self-service/methods/oidc/callback/<provider id>`.
 *
 * The person signs in on the provider's own development pages (oidc-provider's devInteractions: a
 * login form that takes an account name, then a consent screen). Accounts are what the test adds;
 * the claims they carry (e-mail, email_verified, name, and a `role` a provider might send) go into
 * the ID token, so the claims mapper decides what reaches Kratos.
 */

export interface ProviderAccount {
  /** The subject (`sub`), also what the person types into the provider's login form. */
  sub: string;
  email: string;
  email_verified: boolean;
  name: string;
  /** Claims a provider may send that must never become a platform role. */
  extra?: Record<string, unknown>;
}

export interface OidcStandInOptions {
  clientId: string;
  clientSecret: string;
  /** The redirect URIs registered for the client (Kratos' callback for this provider). */
  redirectUris: () => string[];
}

export class OidcStandIn {
  readonly accounts = new Map<string, ProviderAccount>();
  private server: Server | undefined;
  issuer = '';

  constructor(private readonly options: OidcStandInOptions) {}

  addAccount(account: ProviderAccount): ProviderAccount {
    this.accounts.set(account.sub, account);
    return account;
  }

  async start(): Promise<this> {
    // The issuer must be known before the provider is built; the port is taken first, then served.
    const server = createServer();
    const port = await listen(server, 0, '127.0.0.1');
    this.issuer = `http://127.0.0.1:${port}`;
    const accounts = this.accounts;
    const configuration: Configuration = {
      clients: [
        {
          client_id: this.options.clientId,
          client_secret: this.options.clientSecret,
          redirect_uris: this.options.redirectUris(),
          grant_types: ['authorization_code'],
          response_types: ['code'],
          token_endpoint_auth_method: 'client_secret_basic',
        },
      ],
      claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], role: ['role', 'groups'] },
      scopes: ['openid', 'email', 'profile', 'role'],
      // The claims go into the ID token (Kratos' default claims_source), not only to userinfo.
      conformIdTokenClaims: false,
      features: { devInteractions: { enabled: true } },
      pkce: { required: () => false },
      findAccount: (_ctx, sub) => {
        const account = accounts.get(sub);
        if (!account) return undefined;
        return {
          accountId: sub,
          claims: () => ({ sub, email: account.email, email_verified: account.email_verified, name: account.name, ...(account.extra ?? {}) }),
        };
      },
      cookies: { keys: ['oidc-stand-in-cookie-key-0123456789'] },
      ttl: { AccessToken: 600, AuthorizationCode: 60, IdToken: 600, Interaction: 600, Session: 600, Grant: 600 },
    };
    const provider = new Provider(this.issuer, configuration);
    // Loopback http: oidc-provider refuses insecure cookies on a "secure" request only; this is plain http.
    server.on('request', provider.callback());
    this.server = server;
    return this;
  }

  async close(): Promise<void> {
    if (this.server) await closeGracefully(this.server, 500);
  }
}
