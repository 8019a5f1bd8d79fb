import { request } from 'node:http';

/** What a server answered, without the headers that differ between any two answers (Date, connection). */
export interface RawAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

export interface RawRequest {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Send without Content-Length, in pieces of 1 000 bytes (Transfer-Encoding: chunked). */
  chunked?: boolean;
}

/**
 * One request through node:http rather than fetch, so the path, headers and body go out exactly as
 * written (fetch would normalise the path and add headers): the hot-route tests compare the answers
 * with those the Express app gave to the same bytes (test/fixtures/express-answers).
 */
export function sendRaw(base: string, sent: RawRequest): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const headers = { ...sent.headers };
    if (!sent.chunked && sent.body !== undefined) headers['content-length'] ??= String(Buffer.byteLength(sent.body));
    const req = request(`${base}${sent.path}`, { method: sent.method ?? 'GET', headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => {
        // Left out: what differs per answer (the date, the request's own id) and per connection.
        const { date: _date, 'x-request-id': _requestId, connection: _connection, 'keep-alive': _keepAlive, ...rest } = res.headers;
        resolve({ status: res.statusCode ?? 0, headers: rest, body });
      });
    });
    req.on('error', reject);
    if (sent.chunked && sent.body !== undefined) {
      const bytes = Buffer.from(sent.body);
      for (let i = 0; i < bytes.length; i += 1000) req.write(bytes.subarray(i, i + 1000));
      req.end();
    } else req.end(sent.body);
  });
}
