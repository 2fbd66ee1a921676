// A webhook receiver on 127.0.0.1 for rea's own runs (the demo's partner, the chaos run's
// endpoint): it checks every delivery's Standard Webhooks signature with the endpoint's secret,
// set once the endpoint exists, and answers 204, or 401 to one that does not verify (so rea tries
// it again).
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { verifyPayload } from '../channels/webhook/signature.js';

export interface LocalReceiver {
  /** Where it listens: the endpoint's URL. */
  readonly url: string;
  /** The endpoint's signing secret; until it is set every delivery is refused. */
  secret: string;
  /** Deliveries refused: no secret yet, or a signature that did not verify. */
  rejected: number;
  close(): Promise<void>;
}

/** Listens on a free port of 127.0.0.1; `verified` is called with each delivery that verified. */
export async function startLocalReceiver(path: string, verified: (body: string, headers: IncomingHttpHeaders) => void): Promise<LocalReceiver> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      if (!receiver.secret || !verifyPayload({ headers: req.headers, body, secrets: [receiver.secret] })) {
        receiver.rejected++;
        return void res.writeHead(401).end();
      }
      verified(body, req.headers);
      res.writeHead(204).end();
    });
  });
  // Keep-alive sockets of senders that went away (a killed worker) must not hold close() up.
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const receiver: LocalReceiver = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`,
    secret: '',
    rejected: 0,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  return receiver;
}
