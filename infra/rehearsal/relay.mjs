// A container's port, handed to the proxy over a Unix socket: started inside the container's network
// namespace (nsenter), it listens on <socket> (the file system is shared, the network is not) and
// forwards each connection to 127.0.0.1:<port> in that namespace. This is how the rehearsal's proxy
// reaches a site that has a network namespace of its own, on its port and on nothing else.
//
//   node relay.mjs <socket> <port>
//   node relay.mjs --listen <ip>:<port> <socket>   (the other way: a site's path to the proxy, --web-app)
//
// Plain Node, no loader: it starts in a few tens of milliseconds and holds nothing but two sockets.
import { rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';

const pipe = (client, upstream) => {
  client.pipe(upstream).pipe(client);
  // Nothing listening on the other end (a site restarting): the connection is closed, as Docker
  // would refuse it; it is never handed to anything else.
  upstream.on('error', () => client.destroy());
  client.on('error', () => upstream.destroy());
};
const stop = (server) => () => server.close(() => process.exit(0));

if (process.argv[2] === '--listen') {
  // The other way: node relay.mjs --listen <ip>:<port> <socket> listens on <ip>:<port> in the
  // namespace and forwards each connection to <socket> (whose other end dials the proxy).
  const [address, socketPath] = process.argv.slice(3);
  const match = /^(\d+\.\d+\.\d+\.\d+):(\d+)$/.exec(address ?? '');
  if (!match || !socketPath) {
    console.error('usage: relay.mjs --listen <ip>:<port> <socket>');
    process.exit(2);
  }
  const server = createServer((client) => pipe(client, createConnection(socketPath)));
  server.on('error', (error) => {
    console.error(error.message);
    process.exit(1);
  });
  server.listen(Number(match[2]), match[1], () => console.log('listening'));
  process.on('SIGTERM', stop(server));
  process.on('SIGINT', stop(server));
} else {
  const [socketPath, portText] = process.argv.slice(2);
  const port = Number(portText);
  if (!socketPath || !Number.isInteger(port) || port < 1 || port > 65535) {
    console.error('usage: relay.mjs <socket> <port>');
    process.exit(2);
  }
  rmSync(socketPath, { force: true });
  const server = createServer((client) => pipe(client, createConnection({ host: '127.0.0.1', port })));
  server.listen(socketPath);
  process.on('SIGTERM', stop(server));
  process.on('SIGINT', stop(server));
}
