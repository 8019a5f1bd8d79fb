// The build's one way out (scripts/host/lib/build-sandbox.sh, DEPLOY_BUILD_PROXY_SOCKET). Runs
// inside a build step's sandbox, whose network namespace holds nothing but its own loopback: it
// listens on 127.0.0.1:<port> there and joins every connection to the Unix socket the sandbox has
// at <socket>, the operator's HTTP(S) proxy to the package registry (the proxy decides where a
// connection may go, e.g. infra/egress: the registry only). Then it runs the build step, forwards
// SIGTERM/SIGINT/SIGHUP to it and exits with its status; the sandbox ends whatever is left.
//
//   node build-proxy-relay.mjs <port> <socket> -- <command> [<argument>...]
//
// Exit codes: the command's (128 + signal when a signal ended it), 2 usage, 127 the command could
// not be started, 1 the relay could not listen.
import { spawn } from 'node:child_process';
import { connect, createServer } from 'node:net';
import { constants } from 'node:os';

const [portText, socketPath, separator, command, ...args] = process.argv.slice(2);
const port = Number(portText);
if (!Number.isInteger(port) || port < 1 || port > 65535 || !socketPath || separator !== '--' || !command) {
  console.error('usage: build-proxy-relay.mjs <port> <socket> -- <command> [<argument>...]');
  process.exit(2);
}

const server = createServer((client) => {
  const upstream = connect(socketPath);
  const close = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('error', close).on('close', close);
  upstream.on('error', close).on('close', close);
  client.pipe(upstream).pipe(client);
});

server.once('error', (error) => {
  console.error(`build-proxy-relay: cannot listen on 127.0.0.1:${port}: ${error.message}`);
  process.exit(1);
});

server.listen(port, '127.0.0.1', () => {
  const child = spawn(command, args, { stdio: 'inherit' });
  child.once('error', (error) => {
    console.error(`build-proxy-relay: cannot run ${command}: ${error.message}`);
    process.exit(127);
  });
  child.once('exit', (code, signal) => process.exit(code ?? 128 + (constants.signals[signal] ?? 0)));
  for (const name of ['SIGTERM', 'SIGINT', 'SIGHUP']) process.on(name, () => child.kill(name));
});
