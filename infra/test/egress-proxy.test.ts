import { request, type Server } from 'node:http';
import { createServer as createTcpServer, type AddressInfo, type Server as TcpServer } from 'node:net';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEgressProxy, destinationOf, isPublicAddress } from '../egress/proxy.js';

/**
 * The builds' egress proxy on loopback: CONNECT tunnels to an echo server standing in for the package
 * registry and the git host (names resolved by the test), and what it refuses.
 */

let echo: TcpServer;
let echoPort: number;
let proxy: Server;
let proxyPort: number;
const TOKEN = 'a-builder-credential-0123456789';

/** Names as the test's DNS answers them: every allowed name is the local echo server, one name is private. */
const NAMES: Record<string, string[]> = { 'registry.test': ['127.0.0.1'], 'git.test': ['127.0.0.1'], 'inside.test': ['10.20.30.40'] };

function connectVia(destination: string, headers: Record<string, string> = {}): Promise<{ status: number; echoed?: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: proxyPort, method: 'CONNECT', path: destination, headers });
    req.on('connect', (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        return resolve({ status: res.statusCode ?? 0 });
      }
      socket.write('ping\n');
      socket.once('data', (chunk: Buffer) => {
        socket.destroy();
        resolve({ status: 200, echoed: chunk.toString() });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

const basic = (user: string, password: string) => ({ 'proxy-authorization': `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}` });

beforeAll(async () => {
  echo = createTcpServer((socket) => socket.pipe(socket));
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', () => r()));
  echoPort = (echo.address() as AddressInfo).port;
  proxy = createEgressProxy({
    open: [`registry.test:${echoPort}`],
    withCredential: [`git.test:${echoPort}`],
    token: TOKEN,
    logger: pino({ level: 'silent' }),
    resolve: async (host) => {
      const found = NAMES[host];
      if (!found) throw new Error('ENOTFOUND');
      return found;
    },
    // Loopback stands in for the internet here; the private name below is still refused (next describe).
    allowNonPublic: true,
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()));
  proxyPort = (proxy.address() as AddressInfo).port;
});

afterAll(() => {
  proxy.closeAllConnections();
  proxy.close();
  echo.close();
});

describe('the egress proxy', () => {
  it('tunnels to the package registry for anyone on a build network', async () => {
    expect(await connectVia(`registry.test:${echoPort}`)).toEqual({ status: 200, echoed: 'ping\n' });
  });

  it('tunnels to the git host only with the builders\' credential, which the build never gets', async () => {
    expect(await connectVia(`git.test:${echoPort}`)).toEqual({ status: 403 });
    expect(await connectVia(`git.test:${echoPort}`, basic('git', 'wrong-credential-000000000000'))).toEqual({ status: 403 });
    expect(await connectVia(`git.test:${echoPort}`, basic('git', TOKEN))).toEqual({ status: 200, echoed: 'ping\n' });
  });

  it('refuses every other destination, another port of an allowed host included', async () => {
    expect(await connectVia(`example.test:${echoPort}`)).toEqual({ status: 403 });
    expect(await connectVia(`registry.test:${echoPort + 1}`)).toEqual({ status: 403 });
    expect(await connectVia('127.0.0.1:5432', basic('git', TOKEN))).toEqual({ status: 403 });
    expect(await connectVia('user@registry.test')).toEqual({ status: 400 });
  });

  it('does no plain HTTP proxying', async () => {
    const status = await new Promise<number>((resolve) => {
      request({ host: '127.0.0.1', port: proxyPort, path: `http://registry.test:${echoPort}/`, method: 'GET' }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      }).end();
    });
    expect(status).toBe(405);
  });
});

describe('an allowed name that resolves inside', () => {
  let strict: Server;
  let strictPort: number;
  beforeAll(async () => {
    strict = createEgressProxy({ open: ['inside.test:443', `registry.test:${echoPort}`], withCredential: [], logger: pino({ level: 'silent' }), resolve: async (host) => NAMES[host] ?? [] });
    await new Promise<void>((r) => strict.listen(0, '127.0.0.1', () => r()));
    strictPort = (strict.address() as AddressInfo).port;
  });
  afterAll(() => strict.close());

  it('is refused: no tunnel to a private, loopback or link-local address, whatever DNS says', async () => {
    for (const destination of ['inside.test:443', `registry.test:${echoPort}`]) {
      const status = await new Promise<number>((resolve) => {
        const req = request({ host: '127.0.0.1', port: strictPort, method: 'CONNECT', path: destination });
        req.on('connect', (res, socket) => {
          socket.destroy();
          resolve(res.statusCode ?? 0);
        });
        req.end();
      });
      expect(status, destination).toBe(403);
    }
  });

  it('knows public from non-public addresses', () => {
    for (const address of ['127.0.0.1', '10.1.2.3', '172.30.1.5', '192.168.0.1', '169.254.169.254', '100.64.0.1', '::1', 'fd00::1', 'fe80::1', '::ffff:10.0.0.1', '0.0.0.0']) {
      expect(isPublicAddress(address), address).toBe(false);
    }
    for (const address of ['104.16.0.1', '140.82.121.4', '2606:4700::1']) expect(isPublicAddress(address), address).toBe(true);
  });
});

describe('the destinations of repository URLs', () => {
  it('are host:port for https and http, none for ssh or file', () => {
    expect(destinationOf('https://git.example.org/city/site.git')).toBe('git.example.org:443');
    expect(destinationOf('http://git.example.org:8080/site.git')).toBe('git.example.org:8080');
    expect(destinationOf('git@git.example.org:city/site.git')).toBeUndefined();
    expect(destinationOf('file:///srv/repo')).toBeUndefined();
  });
});
