/**
 * The stack's reverse proxy configuration (Caddyfile), rendered from the same data the Pulumi program
 * uses for its containers, so a deploy target or a service cannot be declared without its route.
 *
 * - Every site is a bare host name, so Caddy obtains and renews its certificate automatically (ACME).
 * - Requests to /admin* (and any other guarded path of a site) from outside the internal ranges get
 *   403 before they reach an upstream. `remote_ip` is the TCP peer, which is the real client because
 *   Caddy is the edge (nothing in front of it may rewrite the source address).
 * - The Kratos (4434) and Hydra (4445) admin ports are never an upstream here.
 * - A route with `forwardAuth` (GeoServer) asks the API who the caller is before a write reaches the
 *   upstream (`forward_auth`): identity headers a client sent are removed first, on every request of
 *   the site, and only the API's answer sets them. The upstream can therefore trust them as long as
 *   nothing but the proxy reaches it (GeoServer is alone on its network with the proxy).
 * - A route with guarded paths of its own or with `forwardAuth` (GeoServer, a servlet container) gets
 *   400 for a path the proxy and the upstream could read differently, before anything else runs
 *   (UNNORMALISED_PATH). Caddy's `path` matcher compares the decoded, cleaned path, but the upstream
 *   receives the path as the client wrote it, and Tomcat drops `;` parameters from every segment:
 *   `/geoserver;jsessionid=1/rest/x` misses the matcher `/geoserver/rest*` and is /geoserver/rest/x to
 *   GeoServer. Refusing these shapes outright leaves one reading of every path that passes.
 */

/** Requests that must be authenticated by the API before the upstream sees them. */
export interface ForwardAuth {
  /** host:port of the API. */
  upstream: string;
  /** The API's check, e.g. /api/auth/forward. */
  uri: string;
  /**
   * Path patterns whose POSTs (and requests asking for request=Transaction) are writes; the route's
   * internal-only paths are left out (operators use them with GeoServer's own accounts).
   */
  writePaths: string[];
  /** Headers the API answers with and the upstream trusts; removed from what clients send. */
  identityHeaders: string[];
}

export interface ProxyRoute {
  /** Host name the site answers for. */
  domain: string;
  /** host:port of the upstream container on the application network. */
  upstream: string;
  /** Extra path patterns (besides /admin*) that only internal clients may reach. */
  internalOnlyPaths?: string[];
  /** Why this route exists, rendered as a comment for the operator reading the file. */
  description: string;
  forwardAuth?: ForwardAuth;
  /**
   * POSTs under `path` go to `upstream` instead, their path prefixed with `prefix` (Kratos'
   * self-service submissions through the login app's limiters, identity/src/app/kratos-gate.ts).
   */
  gate?: { path: string; upstream: string; prefix: string };
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
  /**
   * Behind a front that terminates TLS (the Kubernetes target's Ingress, docs/infra.md "Kubernetes"):
   * plain HTTP on `port`, no ACME, no admin endpoint, and the client address read from X-Forwarded-For,
   * believed only when the connection comes from `trustedProxies` (the ingress controller's pods; the
   * edge's NetworkPolicy admits nothing else). The internal-range check then tests that address
   * (`client_ip`, Caddy 2.7+) instead of the TCP peer, which is the ingress controller.
   */
  behindTlsFront?: { port: number; trustedProxies: string[] };
}

/**
 * A Caddy `expression` (CEL) true for a request path that is not in its one plain form: in the decoded
 * path a `;` (path parameters, also from %3b), a backslash (also %5c), a `%` (double encoding, %25), a
 * doubled slash or a `.`/`..` segment (also from %2e); in the raw path an encoded dot or slash (%2e,
 * %2f, either case), which the decoded path no longer shows as such. The query string is not looked
 * at: WMS and WFS parameters legitimately hold `;`, `//` and escapes.
 */
export const UNNORMALISED_PATH =
  '{http.request.uri.path}.matches(r"[;\\\\%]|//|/\\.\\.?(/|$)") || {http.request.uri}.matches(r"(?i)^[^?]*%(2e|2f)")';

const SAFE_TOKEN = /^[A-Za-z0-9._:/*@+-]+$/;
const HEADER_NAME = /^[A-Za-z][A-Za-z0-9-]*$/;

function forwardAuthLines(auth: ForwardAuth, internalOnly: string[]): string[] {
  const headers = auth.identityHeaders.map((h) => {
    if (!HEADER_NAME.test(h)) throw new Error(`unsafe header name for the Caddyfile: ${JSON.stringify(h)}`);
    return h;
  });
  const paths = auth.writePaths.map((p) => assertSafeToken(p, 'path'));
  return [
    // One route block: its directives run in the written order (Caddy would otherwise order
    // forward_auth before request_header and strip the headers the API just set).
    '\troute {',
    ...headers.map((h) => `\t\trequest_header -${h}`),
    '\t\t@write {',
    `\t\t\tpath ${paths.join(' ')}`,
    ...(internalOnly.length ? [`\t\t\tnot path ${internalOnly.join(' ')}`] : []),
    // WFS-T is a POST; a KVP Transaction (GET ?request=Transaction) is a write too, in any letter case.
    '\t\t\texpression `{method} == "POST" || {query}.matches("(?i)(^|&)request=transaction(&|$)")`',
    '\t\t}',
    `\t\tforward_auth @write ${assertSafeToken(auth.upstream, 'upstream')} {`,
    `\t\t\turi ${assertSafeToken(auth.uri, 'path')}`,
    `\t\t\tcopy_headers ${headers.join(' ')}`,
    '\t\t}',
    '\t}',
  ];
}

/**
 * The refusal of UNNORMALISED_PATH, in a `route` block listed first: Caddy runs `route` blocks in the
 * order written and before every `respond`, so no forward_auth call and no upstream sees such a path.
 */
function unnormalisedPathLines(): string[] {
  return ['\t@unnormalised_path expression `' + UNNORMALISED_PATH + '`', '\troute @unnormalised_path {', '\t\trespond "Bad Request: the path must be in plain form" 400', '\t}'];
}

/** A `route` block (run in order, before the site's reverse_proxy) sending the gated POSTs through the gate. */
function gateLines(gate: NonNullable<ProxyRoute['gate']>): string[] {
  return [
    '\t@gated {',
    '\t\tmethod POST',
    `\t\tpath ${assertSafeToken(gate.path, 'path')}*`,
    '\t}',
    '\troute @gated {',
    `\t\trewrite * ${assertSafeToken(gate.prefix, 'path')}{uri}`,
    `\t\treverse_proxy ${assertSafeToken(gate.upstream, 'upstream')}`,
    '\t}',
  ];
}

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
  const front = input.behindTlsFront;
  if (front) {
    const proxies = front.trustedProxies.map((c) => assertSafeToken(c, 'CIDR')).join(' ');
    lines.push('\tauto_https off', '\tadmin off', '\tservers {', `\t\ttrusted_proxies static ${proxies}`, '\t\tclient_ip_headers X-Forwarded-For', '\t}');
  }
  lines.push('}');
  const clientMatcher = front ? 'client_ip' : 'remote_ip';
  const seen = new Set<string>();
  for (const route of input.routes) {
    const domain = assertSafeToken(route.domain.toLowerCase(), 'domain');
    if (seen.has(domain)) throw new Error(`duplicate proxy domain ${domain}`);
    seen.add(domain);
    const plainPort = front?.port ?? input.plainHttpPort;
    const address = plainPort === undefined ? domain : `http://${domain}:${plainPort}`;
    const guarded = ['/admin*', ...(route.internalOnlyPaths ?? [])].map((p) => assertSafeToken(p, 'path'));
    lines.push(
      '',
      `# ${route.description.replace(/[\r\n]+/g, ' ')}`,
      `${address} {`,
      ...(route.forwardAuth || route.gate || route.internalOnlyPaths?.length ? unnormalisedPathLines() : []),
      // Written out per site (not a snippet with {args[:]}, which Caddy < 2.7 does not expand).
      '\t@outside_internal_range {',
      `\t\tpath ${guarded.join(' ')}`,
      `\t\tnot ${clientMatcher} ${cidrs}`,
      '\t}',
      '\trespond @outside_internal_range "Forbidden" 403',
      ...(route.forwardAuth ? forwardAuthLines(route.forwardAuth, guarded.slice(1)) : []),
      ...(route.gate ? gateLines(route.gate) : []),
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
