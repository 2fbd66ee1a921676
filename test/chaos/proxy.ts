// The workers of a chaos run reach PostgreSQL through this TCP proxy, so that the run can stage a
// failover as clients live it: the old server is gone (its sessions end, rolling back what they
// had open), but nothing tells the clients so. Their connections stay open and silent, neither
// answering nor closing, until the client gives up on them; new connections reach the server.
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

export interface FailoverProxy {
  /** `upstream`, through the proxy. */
  url: string;
  /** Stage the failover; returns how many client connections it left silent. */
  failover(): number;
  close(): Promise<void>;
}

export async function failoverProxy(upstream: string): Promise<FailoverProxy> {
  const target = new URL(upstream);
  /** Open connections: the client's socket and the server's. */
  const pairs = new Set<{ client: Socket; server: Socket; silent: boolean }>();
  const proxy = createServer((client) => {
    const server = connect(Number(target.port || 5432), target.hostname);
    const pair = { client, server, silent: false };
    pairs.add(pair);
    client.on('error', () => {});
    server.on('error', () => {});
    client.on('data', (data: Buffer) => {
      if (!pair.silent) server.write(data);
    });
    server.on('data', (data: Buffer) => {
      if (!pair.silent) client.write(data);
    });
    client.on('close', () => {
      server.destroy();
      pairs.delete(pair);
    });
    // The server's close reaches the client (a restart, pg_terminate_backend), unless the
    // failover has silenced the pair: then the client hears nothing.
    server.on('close', () => {
      if (!pair.silent) client.destroy();
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const url = new URL(upstream);
  url.hostname = '127.0.0.1';
  url.port = String((proxy.address() as AddressInfo).port);
  return {
    url: url.toString(),
    failover() {
      let silenced = 0;
      for (const pair of pairs) {
        if (pair.silent) continue;
        pair.silent = true;
        pair.server.destroy();
        silenced++;
      }
      return silenced;
    },
    async close() {
      for (const { client, server } of pairs) {
        client.destroy();
        server.destroy();
      }
      await new Promise((resolve) => proxy.close(resolve));
    },
  };
}

/**
 * The proxy in a process of its own (`node --import tsx test/chaos/proxy.ts <upstream>`): in the
 * runner's, it shared one event loop with the producers, and the workers, slowed down by it, fell
 * out of inline delivery. It sends its URL, and the count of each failover it is told to stage, over IPC.
 */
if (process.send && process.argv[1]?.endsWith('proxy.ts')) {
  const proxy = await failoverProxy(process.argv[2]!);
  process.on('message', (msg) => {
    if (msg === 'failover') process.send!({ silenced: proxy.failover() });
  });
  process.on('disconnect', () => void proxy.close().then(() => process.exit(0)));
  process.send({ url: proxy.url });
}
