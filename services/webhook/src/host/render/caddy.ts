/**
 * Caddyfile for the host: one site block per target (its domain → 127.0.0.1:<port>) and,
 * optionally, the webhook server behind its own domain so Git hosts reach it over TLS.
 */
import type { Target } from '../../../../shared/targets.js';

export interface CaddyOptions {
  /** Domain for the webhook server (only POST /webhook is proxied). */
  webhookDomain?: string;
  webhookPort?: number;
  /** ACME account e-mail. */
  email?: string;
  /**
   * Plain HTTP on this port with automatic HTTPS off: for tests and for a TLS terminator in front.
   */
  plainHttpPort?: number;
  /** Upstream host for every site (loopback in production). */
  upstreamHost?: string;
}

export function renderCaddyfile(targets: readonly Target[], options: CaddyOptions = {}): string {
  const upstream = options.upstreamHost ?? '127.0.0.1';
  const address = (domain: string): string => (options.plainHttpPort ? `http://${domain}` : domain);
  const global: string[] = [];
  if (options.email) global.push(`\temail ${options.email}`);
  if (options.plainHttpPort) global.push('\tauto_https off', `\thttp_port ${options.plainHttpPort}`, '\tadmin off');
  const blocks = targets.map(
    (t) => `# ${t.key}\n${address(t.domain)} {\n\tencode zstd gzip\n\treverse_proxy ${upstream}:${t.port}\n}\n`,
  );
  if (options.webhookDomain) {
    blocks.push(
      [
        '# deployment webhooks: only POST /webhook is exposed, /deployments stays on loopback',
        `${address(options.webhookDomain)} {`,
        '\trequest_body {',
        '\t\tmax_size 26MiB', // above the server's own 25 MiB limit, so clients get its JSON 413
        '\t}',
        '\thandle /webhook {',
        `\t\treverse_proxy ${upstream}:${options.webhookPort ?? 9321}`,
        '\t}',
        '\thandle {',
        '\t\trespond 404',
        '\t}',
        '}',
        '',
      ].join('\n'),
    );
  }
  const header = '# Rendered by `npm run host -- caddy`: one domain per deploy target.\n';
  return header + (global.length ? `{\n${global.join('\n')}\n}\n\n` : '\n') + blocks.join('\n');
}
