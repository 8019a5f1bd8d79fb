/**
 * The stack's reverse proxy configuration (Caddyfile), rendered from the same data the Pulumi program
 * uses for its containers, so a deploy target or a service cannot be declared without its route.
 *
 * - Every site is a bare host name, so Caddy obtains and renews its certificate automatically (ACME).
 * - Requests to /admin* (and any other guarded path of a site) from outside the internal ranges get
 *   403 before they reach an upstream. `remote_ip` is the TCP peer, which is the real client because
 *   Caddy is the edge (nothing in front of it may rewrite the source address).
 * - The Kratos (4434) and Hydra (4445) admin ports are never an upstream here.
 */

export interface ProxyRoute {
  /** Host name the site answers for. */
  domain: string;
  /** host:port of the upstream container on the application network. */
  upstream: string;
  /** Extra path patterns (besides /admin*) that only internal clients may reach. */
  internalOnlyPaths?: string[];
  /** Why this route exists, rendered as a comment for the operator reading the file. */
  description: string;
}

export interface CaddyfileInput {
  acmeEmail: string;
  internalCidrs: string[];
  routes: ProxyRoute[];
  /**
   * Tests only: serve plain HTTP on this port with automatic HTTPS off, so a Caddy started on
   * loopback can be driven by Host header. Production leaves it unset.
   */
  plainHttpPort?: number;
}

const SAFE_TOKEN = /^[A-Za-z0-9._:/*@+-]+$/;

function assertSafeToken(value: string, what: string): string {
  // Caddyfile tokens are whitespace-separated; a stray brace or newline would change the structure.
  if (!SAFE_TOKEN.test(value)) throw new Error(`unsafe ${what} for the Caddyfile: ${JSON.stringify(value)}`);
  return value;
}

export function renderCaddyfile(input: CaddyfileInput): string {
  const cidrs = input.internalCidrs.map((c) => assertSafeToken(c, 'CIDR')).join(' ');
  const lines: string[] = [
    '# Rendered by infra/caddy.ts from the Pulumi stack configuration. Do not edit by hand.',
    '{',
    `\temail ${assertSafeToken(input.acmeEmail, 'ACME e-mail')}`,
  ];
  if (input.plainHttpPort !== undefined) lines.push('\tauto_https off', '\tadmin off');
  lines.push('}');
  const seen = new Set<string>();
  for (const route of input.routes) {
    const domain = assertSafeToken(route.domain.toLowerCase(), 'domain');
    if (seen.has(domain)) throw new Error(`duplicate proxy domain ${domain}`);
    seen.add(domain);
    const address = input.plainHttpPort === undefined ? domain : `http://${domain}:${input.plainHttpPort}`;
    const guarded = ['/admin*', ...(route.internalOnlyPaths ?? [])].map((p) => assertSafeToken(p, 'path'));
    lines.push(
      '',
      `# ${route.description.replace(/[\r\n]+/g, ' ')}`,
      `${address} {`,
      // Written out per site (not a snippet with {args[:]}, which Caddy < 2.7 does not expand).
      '\t@outside_internal_range {',
      `\t\tpath ${guarded.join(' ')}`,
      `\t\tnot remote_ip ${cidrs}`,
      '\t}',
      '\trespond @outside_internal_range "Forbidden" 403',
      '\tencode zstd gzip',
      '\theader {',
      '\t\tStrict-Transport-Security "max-age=31536000"',
      '\t\tX-Content-Type-Options nosniff',
      '\t\t-Server',
      '\t}',
      `\treverse_proxy ${assertSafeToken(route.upstream, 'upstream')}`,
      '}',
    );
  }
  return `${lines.join('\n')}\n`;
}
