import { timingSafeEqual } from 'node:crypto';
import { lookup as dnsLookup } from 'node:dns/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { BlockList, connect, isIP, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';

/**
 * The egress proxy: the builds' only way out of the stack. It sits on every target's build network
 * (with that target's builder) and on `outbound`, alone, and answers HTTP CONNECT only:
 *
 * - to an `open` destination (host:port, the package registry) for anyone on a build network;
 * - to a `withCredential` destination (the targets' git hosts) only with the builders' proxy
 *   credential, which the deploy script's git fetch has and the build itself never gets;
 * - never to an address that is not public (loopback, private, link-local, the Docker networks, the
 *   host), whatever the name resolves to; never plain HTTP.
 * Everything else is 403, logged with the destination.
 */

export interface EgressOptions {
  /** host:port pairs anyone on a build network may reach (the package registry). */
  open: readonly string[];
  /** host:port pairs reachable only with the credential (the git hosts, for the builders' fetch). */
  withCredential: readonly string[];
  /** The credential (Proxy-Authorization: Basic git:<token>); unset, withCredential is unreachable. */
  token?: string;
  logger: Logger;
  /** Tests: resolve names (default DNS) and allow non-public addresses. */
  resolve?: (host: string) => Promise<string[]>;
  allowNonPublic?: boolean;
  /** A tunnel without traffic for this long is closed. */
  idleMs?: number;
}

const DESTINATION = /^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?:\d{1,5}$/i;

/** Addresses a build must never reach through the proxy. */
const NON_PUBLIC = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) NON_PUBLIC.addSubnet(net, bits, 'ipv4');
for (const [net, bits] of [['::', 127], ['fc00::', 7], ['fe80::', 10], ['ff00::', 8]] as const) NON_PUBLIC.addSubnet(net, bits, 'ipv6');

export function isPublicAddress(address: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  const ip = mapped ?? address;
  const family = isIP(ip);
  if (family === 0) return false;
  return !NON_PUBLIC.check(ip, family === 4 ? 'ipv4' : 'ipv6');
}

function credentialOk(req: IncomingMessage, token: string | undefined): boolean {
  if (!token) return false;
  const header = req.headers['proxy-authorization'];
  const match = typeof header === 'string' ? /^Basic ([A-Za-z0-9+/=]+)$/.exec(header) : null;
  if (!match?.[1]) return false;
  const given = Buffer.from(Buffer.from(match[1], 'base64').toString('utf8'));
  const expected = Buffer.from(`git:${token}`);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

const defaultResolve = async (host: string) => (await dnsLookup(host, { all: true })).map((a) => a.address);

export function createEgressProxy(options: EgressOptions): Server {
  const open = new Set(options.open.map((d) => d.toLowerCase()));
  const withCredential = new Set(options.withCredential.map((d) => d.toLowerCase()));
  const resolve = options.resolve ?? defaultResolve;
  const server = createServer((req, res) => {
    // Origin-form health check only; absolute-form (plain HTTP proxying) is refused.
    if (req.method === 'GET' && req.url === '/health') return void res.end('ok\n');
    res.writeHead(405, { 'content-type': 'text/plain' }).end('only CONNECT to allowed destinations\n');
  });
  server.on('connect', (req: IncomingMessage, client: Duplex, head: Buffer) => {
    const destination = (req.url ?? '').toLowerCase();
    const refuse = (status: 400 | 403 | 502, why: string) => {
      options.logger.warn({ destination, why }, 'egress refused');
      client.end(`HTTP/1.1 ${status} ${status === 403 ? 'Forbidden' : status === 400 ? 'Bad Request' : 'Bad Gateway'}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
    };
    client.on('error', () => client.destroy());
    if (!DESTINATION.test(destination)) return refuse(400, 'not host:port');
    if (!open.has(destination) && !(withCredential.has(destination) && credentialOk(req, options.token))) return refuse(403, 'destination not allowed');
    const [host, portText] = [destination.slice(0, destination.lastIndexOf(':')), destination.slice(destination.lastIndexOf(':') + 1)];
    resolve(host).then(
      (addresses) => {
        const address = addresses.find((a) => options.allowNonPublic || isPublicAddress(a));
        if (!address) return refuse(403, `${host} resolves to no public address (${addresses.join(', ')})`);
        const upstream: Socket = connect({ host: address, port: Number(portText) });
        const idle = options.idleMs ?? 300_000;
        upstream.setTimeout(idle, () => upstream.destroy());
        let established = false;
        upstream.once('connect', () => {
          established = true;
          client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
          if (head.length) upstream.write(head);
          upstream.pipe(client).pipe(upstream);
          options.logger.info({ destination, address }, 'egress tunnel');
        });
        upstream.on('error', (error) => (established ? client.destroy() : refuse(502, error.message)));
        client.on('close', () => upstream.destroy());
        upstream.on('close', () => client.destroy());
      },
      (error: Error) => refuse(502, `cannot resolve ${host}: ${error.message}`),
    );
  });
  return server;
}

/** host:port of a repository URL reachable through an HTTP CONNECT proxy, or undefined (ssh, file…). */
export function destinationOf(url: string): string | undefined {
  try {
    const parsed = new URL(url);
    if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') return undefined;
    return `${parsed.hostname.toLowerCase()}:${parsed.port || (parsed.protocol === 'https:' ? '443' : '80')}`;
  } catch {
    return undefined;
  }
}
