import { connect } from 'node:net';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { useTestApi } from '../../../test/helpers/api.js';
import { listen, closeGracefully } from '../../shared/http-server.js';
import { createApiServer, HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS } from '../src/http/server.js';

/**
 * Answers Node gives before Express sees a request (F3): they are problem+json too, and the timeouts
 * are the documented ones. Raw sockets, since fetch cannot send malformed HTTP.
 */
const { api } = useTestApi();

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
  elapsedMs: number;
}

/** Send bytes (all at once, or the parts with a pause) and read until the server closes. */
function raw(port: number, data: string, options: { keepOpenMs?: number } = {}): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const socket = connect(port, '127.0.0.1');
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (received += chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const [head = '', ...rest] = received.split('\r\n\r\n');
      const [statusLine = '', ...lines] = head.split('\r\n');
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body: rest.join('\r\n\r\n'), elapsedMs: performance.now() - started });
    });
    socket.write(data);
    if (options.keepOpenMs === undefined) return;
    // A stalled client: nothing more is sent; the server must end it.
    setTimeout(() => socket.destroy(), options.keepOpenMs).unref();
  });
}

const port = () => Number(new URL(api.url).port);

function expectProblem(answer: RawAnswer, status: number, code: string) {
  expect(answer.status).toBe(status);
  expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
  const body = JSON.parse(answer.body);
  expect(body).toMatchObject({ status, code, type: 'about:blank' });
  expect(typeof body.detail).toBe('string');
  expect(Number(answer.headers['content-length'])).toBe(Buffer.byteLength(answer.body));
}

describe('answers Node gives before routing', () => {
  it('answers headers over 16 KiB with 431 problem+json', async () => {
    const answer = await raw(port(), `GET /api/features HTTP/1.1\r\nHost: x\r\nX-Padding: ${'a'.repeat(20_000)}\r\n\r\n`);
    expectProblem(answer, 431, 'HEADERS_TOO_LARGE');
  });

  it('answers a URL over 16 KiB with 431 problem+json', async () => {
    const answer = await raw(port(), `GET /api/features?kategorie=${'b'.repeat(17_000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
    expectProblem(answer, 431, 'HEADERS_TOO_LARGE');
  });

  it('answers an unknown method and a malformed request line with 400 problem+json', async () => {
    expectProblem(await raw(port(), 'BREW /api/features HTTP/1.1\r\nHost: x\r\n\r\n'), 400, 'BAD_REQUEST');
    expectProblem(await raw(port(), 'this is not http\r\n\r\n'), 400, 'BAD_REQUEST');
    expectProblem(await raw(port(), 'GET /api/features HTTP/1.1\r\nHost x\r\n\r\n'), 400, 'BAD_REQUEST');
  });

  it('still answers a well-formed request on the same server', async () => {
    const answer = await raw(port(), 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(answer.status).toBe(200);
  });
});

describe('timeouts', () => {
  it('uses the documented limits: headers within 10 s, the whole request within 30 s', () => {
    const server = createApiServer(() => undefined);
    expect([server.headersTimeout, server.requestTimeout]).toEqual([HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS]);
    expect([HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS]).toEqual([10_000, 30_000]);
    const docs = readFileSync(new URL('../../../docs/api.md', import.meta.url), 'utf8');
    expect(docs).toMatch(/headers within 10 s/);
    expect(docs).toMatch(/whole request within 30 s/);
  });

  it('cuts stalled headers and a stalled body with 408 problem+json close to the limit, not up to 30 s later', async () => {
    // The handler answers once the body is complete, which a stalled client never lets happen.
    const server = createApiServer((req, res) => req.resume().on('end', () => res.end('complete')), { headersTimeoutMs: 1_000, requestTimeoutMs: 2_000 });
    const shortPort = await listen(server, 0, '127.0.0.1');
    try {
      const headers = await raw(shortPort, 'GET / HTTP/1.1\r\nHost: x\r\n', { keepOpenMs: 10_000 });
      expectProblem(headers, 408, 'REQUEST_TIMEOUT');
      expect(headers.elapsedMs).toBeGreaterThanOrEqual(900);
      expect(headers.elapsedMs).toBeLessThan(4_000);
      const body = await raw(shortPort, 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"a":', { keepOpenMs: 10_000 });
      expectProblem(body, 408, 'REQUEST_TIMEOUT');
      expect(body.elapsedMs).toBeGreaterThanOrEqual(1_900);
      expect(body.elapsedMs).toBeLessThan(5_000);
    } finally {
      await closeGracefully(server, 100);
    }
  });
});
