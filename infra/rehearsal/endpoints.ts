/**
 * The rehearsal's one explicit map from Docker network names to loopback ports.
 *
 * In the stack, a container reaches another as `<alias>:<port>` on a network both have joined. Here
 * every container is a process on 127.0.0.1, so each (alias, port) pair that some container declares
 * gets a loopback port of its own, and every reference to it in another container's environment,
 * command or uploaded files is rewritten to `127.0.0.1:<loopback port>` — but only when the two share
 * a declared network. A reference across networks is rewritten to the discard port (connection
 * refused), so a container that could not reach another under Docker cannot reach it here either;
 * each such reference is recorded as a finding.
 */
import { freePort } from '../../services/shared/testing/ports.js';

export const UNREACHABLE = '127.0.0.1:9';

interface Endpoint {
  host: string;
  port: number;
  loopbackPort: number;
  /**
   * For a container with a network namespace of its own (netns.ts): the Unix socket its port is
   * relayed to. The proxy dials `unix/<socket>`; nothing else has a way in.
   */
  socket?: string;
  owner: string;
  networks: string[];
}

export interface Reference {
  from: string;
  to: string;
  reachable: boolean;
}

export class EndpointMap {
  private readonly endpoints = new Map<string, Endpoint>();
  /** Network names per container (a container sharing another's namespace has that one's networks). */
  private readonly networksOf = new Map<string, string[]>();
  readonly references: Reference[] = [];

  private key(host: string, port: number): string {
    return `${host.toLowerCase()}:${port}`;
  }

  joinNetworks(container: string, networks: string[]): void {
    this.networksOf.set(container, networks);
  }

  networks(container: string): string[] {
    return this.networksOf.get(container) ?? [];
  }

  /**
   * A container listens on `port` under aliases, each reachable on the networks given with it (an
   * alias is per network in Docker; the container name on every network the container joined).
   */
  async declare(owner: string, names: { alias: string; networks: string[] }[], port: number, loopbackPort?: number): Promise<number> {
    const chosen = loopbackPort ?? (await freePort());
    for (const { alias, networks } of names) {
      const existing = this.endpoints.get(this.key(alias, port));
      const merged = [...new Set([...(existing?.owner === owner ? existing.networks : []), ...networks])];
      this.endpoints.set(this.key(alias, port), { host: alias.toLowerCase(), port, loopbackPort: chosen, owner, networks: merged });
    }
    return chosen;
  }

  /** A port of a container in its own network namespace, reachable as the Unix socket its relay listens on. */
  declareSocket(owner: string, names: { alias: string; networks: string[] }[], port: number, socket: string): void {
    for (const { alias, networks } of names) {
      const existing = this.endpoints.get(this.key(alias, port));
      const merged = [...new Set([...(existing?.owner === owner ? existing.networks : []), ...networks])];
      this.endpoints.set(this.key(alias, port), { host: alias.toLowerCase(), port, loopbackPort: 0, socket, owner, networks: merged });
    }
  }

  lookup(host: string, port: number): Endpoint | undefined {
    return this.endpoints.get(this.key(host, port));
  }

  has(host: string): boolean {
    return [...this.endpoints.values()].some((e) => e.host === host.toLowerCase());
  }

  /** Where `from` reaches `host:port`: the loopback address, or the discard port when no network is shared. */
  resolve(from: string, host: string, port: number): string | undefined {
    const endpoint = this.lookup(host, port);
    if (!endpoint) return undefined;
    const mine = this.networks(from);
    const reachable = endpoint.owner === from || endpoint.networks.some((n) => mine.includes(n));
    this.references.push({ from, to: `${host}:${port}`, reachable });
    if (!reachable) return UNREACHABLE;
    return endpoint.socket ? `unix/${endpoint.socket}` : `127.0.0.1:${endpoint.loopbackPort}`;
  }

  /** Rewrites every `alias:port` of a declared endpoint inside a text (URLs, DSNs, host:port specs). */
  rewrite(from: string, text: string): string {
    return text.replace(/(?<![\w.-])([a-z][a-z0-9-]*):(\d{2,5})(?![\d])/gi, (whole, host: string, port: string) => this.resolve(from, host, Number(port)) ?? whole);
  }

  /** `PGHOST=features-db` + `PGPORT=5432` style pairs (host and port in two variables). */
  rewriteHostPortPairs(from: string, env: Record<string, string>): Record<string, string> {
    const out = { ...env };
    for (const [name, value] of Object.entries(env)) {
      const match = /^(.*)HOST$/.exec(name);
      if (!match) continue;
      const portName = `${match[1]}PORT`;
      const port = Number(env[portName]);
      if (!port || !this.lookup(value, port)) continue;
      const resolved = this.resolve(from, value, port)!;
      const [host, loopbackPort] = resolved.split(':');
      out[name] = host!;
      out[portName] = loopbackPort!;
    }
    return out;
  }

  table(): { host: string; port: number; loopback: number | string; owner: string; networks: string }[] {
    return [...this.endpoints.values()].map((e) => ({ host: e.host, port: e.port, loopback: e.socket ? `unix/${e.socket}` : e.loopbackPort, owner: e.owner, networks: e.networks.join(',') }));
  }
}
