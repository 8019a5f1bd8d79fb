// A container's port, handed to the proxy over a Unix socket: started inside the container's network
// namespace (nsenter), it listens on <socket> (the file system is shared, the network is not) and
// forwards each connection to 127.0.0.1:<port> in that namespace. This is how the rehearsal's proxy
// reaches a site that has a network namespace of its own, on its port and on nothing else.
//
//   node relay.mjs <socket> <port>
//
// Plain Node, no loader: it starts in a few tens of milliseconds and holds nothing but two sockets.
import { rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';

const [socketPath, portText] = process.argv.slice(2);
const port = Number(portText);
if (!socketPath || !Number.isInteger(port) || port < 1 || port > 65535) {
  console.error('usage: relay.mjs <socket> <port>');
  process.exit(2);
}
rmSync(socketPath, { force: true });
const server = createServer((client) => {
  const upstream = createConnection({ host: '127.0.0.1', port });
  client.pipe(upstream).pipe(client);
  // Nothing listening on the port (a site restarting): the proxy's connection is closed, as Docker
  // would refuse it; it is never handed to anything else.
  upstream.on('error', () => client.destroy());
  client.on('error', () => upstream.destroy());
});
server.listen(socketPath);
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
