// Real HTTP receivers on 127.0.0.1 for webhook tests: each records what it was sent and answers
// as the test says; all are closed when the test ends.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { onTestFinished } from 'vitest';

export interface Received {
  headers: Record<string, string>;
  body: string;
  at: number;
}

export interface Receiver {
  url: string;
  received: Received[];
  /** Resolves when the n-th request (1-based) has arrived. */
  nth(n: number): Promise<Received>;
}

export async function receiver(answer: (req: IncomingMessage, res: ServerResponse, n: number) => void = (_q, res) => res.end('ok')): Promise<Receiver> {
  const received: Received[] = [];
  const waiting = new Map<number, (r: Received) => void>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const r: Received = {
        headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)])),
        body: Buffer.concat(chunks).toString('utf8'),
        at: Date.now(),
      };
      received.push(r);
      waiting.get(received.length)?.(r);
      answer(req, res, received.length);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    received,
    nth: (n) => (received.length >= n ? Promise.resolve(received[n - 1]!) : new Promise((resolve) => waiting.set(n, resolve))),
  };
}
