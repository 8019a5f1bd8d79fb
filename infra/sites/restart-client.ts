import { createConnection } from 'node:net';
import { runAsCommand } from './entry-point.js';
import { DEFAULT_SOCKET, MAX_LINE_BYTES, type ControlRequest, type ControlResponse } from './protocol.js';

/**
 * `sites-restart <service>`: the deploy script's RESTART_COMMAND in a target's builder. Asks the
 * target's site container, over the control socket, to restart its site and waits for its answer (the
 * site accepts connections, or the reason it does not). `sites-restart --ping` is the site container's
 * health check.
 *
 * Environment: SITES_CONTROL_SOCKET (default /run/sites/control.sock), SITES_CONTROL_TIMEOUT_SECONDS (90).
 * Exit codes: 0 restarted (or pong), 1 refused or failed, 2 usage.
 */

export function sendControlRequest(socketPath: string, request: ControlRequest, timeoutMs: number): Promise<ControlResponse> {
  return new Promise((resolve) => {
    const socket = createConnection(socketPath);
    let answer = '';
    const done = (response: ControlResponse) => {
      socket.destroy();
      resolve(response);
    };
    socket.setEncoding('utf8');
    socket.setTimeout(timeoutMs, () => done({ ok: false, error: `no answer within ${timeoutMs} ms` }));
    socket.on('connect', () => socket.write(`${JSON.stringify(request)}\n`));
    socket.on('data', (chunk: string) => {
      answer += chunk;
      if (answer.length > MAX_LINE_BYTES * 4) done({ ok: false, error: 'answer too large' });
    });
    socket.on('end', () => {
      try {
        done(JSON.parse(answer) as ControlResponse);
      } catch {
        done({ ok: false, error: 'malformed answer' });
      }
    });
    socket.on('error', (error) => done({ ok: false, error: `cannot reach the site container: ${error.message}` }));
  });
}

async function main(argv: string[]): Promise<number> {
  const socketPath = process.env.SITES_CONTROL_SOCKET || DEFAULT_SOCKET;
  const timeoutMs = Number(process.env.SITES_CONTROL_TIMEOUT_SECONDS || 90) * 1000;
  if (argv.length !== 1 || !argv[0]) {
    console.error('usage: sites-restart <service> | sites-restart --ping');
    return 2;
  }
  const request: ControlRequest = argv[0] === '--ping' ? { action: 'ping' } : { action: 'restart', service: argv[0] };
  const response = await sendControlRequest(socketPath, request, timeoutMs);
  if (!response.ok) {
    console.error(`sites-restart: ${response.error}`);
    return 1;
  }
  if (request.action === 'restart') console.log(`sites-restart: ${request.service} running (pid ${response.pid ?? '?'})`);
  return 0;
}

runAsCommand(import.meta.url, main);
