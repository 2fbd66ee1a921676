import { describe, it, expect, afterEach } from 'vitest';
import { createServer, type IncomingMessage, type ServerResponse, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { deliver, WEBHOOK_BODY_READ_MS, WEBHOOK_MAX_RESPONSE_BYTES, type Resolver } from '../src/channels/webhook/http.js';
import { generateSecret } from '../src/channels/webhook/secret.js';
import { signPayload } from '../src/channels/webhook/signature.js';
import { Webhook } from 'standardwebhooks';

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

interface TestServer {
  url: string;
  port: number;
  seen: Seen[];
  server: Server;
}

const servers: Server[] = [];

// A real HTTP server on loopback; `handle` runs after the request body has been read.
async function serve(handle: (req: IncomingMessage, res: ServerResponse) => void, host = '127.0.0.1'): Promise<TestServer> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      handle(req, res);
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, host, r));
  const port = (server.address() as AddressInfo).port;
  return { url: `http://${host.includes(':') ? `[${host}]` : host}:${port}/hook`, port, seen, server };
}

afterEach(async () => {
  await Promise.all(
    servers.splice(0).map(
      (s) =>
        new Promise<void>((r) => {
          s.closeAllConnections();
          s.close(() => r());
        }),
    ),
  );
});

const secret = generateSecret();
const body = JSON.stringify({ id: 'evt_1', type: 'order.created', subject: 'A-1', timestamp: '2025-01-01T00:00:00Z', data: { orderNo: 'A-1' } });
const signed = () => signPayload({ msgId: 'dlv_1', timestamp: Math.floor(Date.now() / 1000), body, secrets: [secret] });
const local = { allowPrivateNetworks: true };

describe('webhook delivery over real HTTP', () => {
  it('2xx is success; the request is a signed POST the receiver can verify', async () => {
    const s = await serve((_req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end('thanks'));
    const headers = signed();
    const r = await deliver({ url: s.url, headers, body, ...local });
    expect(r).toMatchObject({ outcome: 'success', status: 200, responseExcerpt: 'thanks', truncated: false, addresses: ['127.0.0.1'] });
    expect(r.error).toBeUndefined();
    expect(r.durationMs).toBeGreaterThanOrEqual(0);
    expect(s.seen).toHaveLength(1);
    const got = s.seen[0]!;
    expect(got.method).toBe('POST');
    expect(got.url).toBe('/hook');
    expect(got.body).toBe(body);
    expect(got.headers['content-type']).toBe('application/json');
    expect(got.headers['user-agent']).toBe('rea-webhooks');
    const asString = Object.fromEntries(Object.entries(got.headers).map(([k, v]) => [k, String(v)]));
    expect(new Webhook(secret).verify(got.body, asString)).toEqual(JSON.parse(body));
  });

  it('204 No Content is success too', async () => {
    const s = await serve((_req, res) => res.writeHead(204).end());
    expect(await deliver({ url: s.url, headers: signed(), body, ...local })).toMatchObject({ outcome: 'success', status: 204, responseExcerpt: '' });
  });

  it('410 is gone', async () => {
    const s = await serve((_req, res) => res.writeHead(410).end('unsubscribed'));
    expect(await deliver({ url: s.url, headers: signed(), body, ...local })).toMatchObject({ outcome: 'gone', status: 410, responseExcerpt: 'unsubscribed' });
  });

  it('429 with Retry-After in seconds is throttled', async () => {
    const s = await serve((_req, res) => res.writeHead(429, { 'retry-after': '120' }).end());
    expect(await deliver({ url: s.url, headers: signed(), body, ...local })).toMatchObject({ outcome: 'throttled', status: 429, retryAfterMs: 120_000 });
  });

  it('503 with Retry-After as an HTTP date is throttled, measured from the injected clock', async () => {
    const now = Date.UTC(2025, 0, 1, 12, 0, 0);
    const s = await serve((_req, res) => res.writeHead(503, { 'retry-after': new Date(now + 90_000).toUTCString() }).end());
    expect(await deliver({ url: s.url, headers: signed(), body, ...local, now: () => now })).toMatchObject({ outcome: 'throttled', status: 503, retryAfterMs: 90_000 });
  });

  it('Retry-After is clamped to [0, maxRetryAfterMs]', async () => {
    const now = Date.UTC(2025, 0, 1, 12, 0, 0);
    let value = '';
    const s = await serve((_req, res) => res.writeHead(429, { 'retry-after': value }).end());
    value = String(30 * 24 * 3600);
    expect((await deliver({ url: s.url, headers: signed(), body, ...local })).retryAfterMs).toBe(24 * 3600 * 1000);
    expect((await deliver({ url: s.url, headers: signed(), body, ...local, maxRetryAfterMs: 60_000 })).retryAfterMs).toBe(60_000);
    value = new Date(now - 3_600_000).toUTCString();
    expect((await deliver({ url: s.url, headers: signed(), body, ...local, now: () => now })).retryAfterMs).toBe(0);
  });

  it('429/503 without a readable Retry-After are plain failures (the backoff schedule applies)', async () => {
    const s503 = await serve((_req, res) => res.writeHead(503).end('busy'));
    expect(await deliver({ url: s503.url, headers: signed(), body, ...local })).toMatchObject({ outcome: 'failure', status: 503, error: 'HTTP 503' });
    const s429 = await serve((_req, res) => res.writeHead(429, { 'retry-after': 'soon' }).end());
    const r = await deliver({ url: s429.url, headers: signed(), body, ...local });
    expect(r).toMatchObject({ outcome: 'failure', status: 429 });
    expect(r.retryAfterMs).toBeUndefined();
  });

  it('500 is a failure with the response excerpt kept', async () => {
    const s = await serve((_req, res) => res.writeHead(500).end('{"error":"db down"}'));
    expect(await deliver({ url: s.url, headers: signed(), body, ...local })).toMatchObject({ outcome: 'failure', status: 500, error: 'HTTP 500', responseExcerpt: '{"error":"db down"}' });
  });

  it('a 302 is not followed: the redirect target gets no request', async () => {
    const target = await serve((_req, res) => res.end('should not be reached'));
    const s = await serve((_req, res) => res.writeHead(302, { location: target.url }).end());
    const r = await deliver({ url: s.url, headers: signed(), body, ...local });
    expect(r).toMatchObject({ outcome: 'failure', status: 302, error: 'redirect (HTTP 302) not followed' });
    expect(s.seen).toHaveLength(1);
    expect(target.seen).toHaveLength(0);
  });

  it('a server that never answers is cut at timeoutMs', async () => {
    const s = await serve(() => {
      /* hold the request open */
    });
    const r = await deliver({ url: s.url, headers: signed(), body, ...local, timeoutMs: 300 });
    expect(r).toMatchObject({ outcome: 'failure', error: 'timed out after 300 ms' });
    expect(r.status).toBeUndefined();
    expect(r.durationMs).toBeGreaterThanOrEqual(290);
    expect(r.durationMs).toBeLessThan(3000);
    expect(s.seen).toHaveLength(1);
  });

  it('a body that trickles after the status is read for WEBHOOK_BODY_READ_MS, not until timeoutMs: what arrived is the excerpt', async () => {
    // Before, a 200 followed by a byte every 100 ms held the attempt (and its slot) for the whole timeoutMs.
    const trickle = (status: number) => (_q: IncomingMessage, res: ServerResponse) => {
      res.writeHead(status, { 'content-type': 'text/plain' });
      const every = setInterval(() => res.write('x'), 100);
      res.on('close', () => clearInterval(every));
    };
    for (const [status, outcome] of [[200, 'success'], [500, 'failure']] as const) {
      const s = await serve(trickle(status));
      const r = await deliver({ url: s.url, headers: signed(), body, ...local, timeoutMs: 8_000 });
      expect(r).toMatchObject({ outcome, status, truncated: false });
      expect(r.error).toBe(status === 200 ? undefined : 'HTTP 500');
      expect(r.durationMs).toBeGreaterThanOrEqual(WEBHOOK_BODY_READ_MS - 50);
      expect(r.durationMs).toBeLessThan(WEBHOOK_BODY_READ_MS + 1_500);
      expect(r.responseExcerpt).toMatch(/^x{3,}$/);
    }
  });

  it("the caller's abort signal ends the attempt as a failure", async () => {
    const controller = new AbortController();
    const s = await serve(() => controller.abort());
    const r = await deliver({ url: s.url, headers: signed(), body, ...local, signal: controller.signal });
    expect(r).toMatchObject({ outcome: 'failure', error: 'aborted before the endpoint answered' });
  });

  it('connection refused is a failure, and neither the secret nor the headers appear in the result', async () => {
    const probe = await serve(() => {});
    const port = probe.port;
    await new Promise<void>((r) => probe.server.close(() => r()));
    const headers = signed();
    const r = await deliver({ url: `http://127.0.0.1:${port}/hook`, headers, body, ...local });
    expect(r).toMatchObject({ outcome: 'failure', error: 'connection refused (ECONNREFUSED)' });
    const text = JSON.stringify(r);
    expect(text).not.toContain(headers['webhook-signature'].slice(3));
    expect(text).not.toContain(secret.slice(6));
  });

  it('a 10 MB response is cut at 64 KiB: the connection is dropped and the excerpt stays short', async () => {
    const total = 10 * 1024 * 1024;
    let written = 0;
    let serverDone!: (finished: boolean) => void;
    const serverClosed = new Promise<boolean>((r) => (serverDone = r));
    const s = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': String(total) });
      const chunk = Buffer.alloc(16 * 1024, 'x');
      res.on('close', () => serverDone(res.writableFinished));
      const pump = () => {
        while (written < total && !res.destroyed) {
          written += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        if (written >= total) res.end();
      };
      pump();
    });
    const r = await deliver({ url: s.url, headers: signed(), body, ...local });
    expect(r).toMatchObject({ outcome: 'success', status: 200, truncated: true });
    expect(r.responseBytes).toBeGreaterThan(WEBHOOK_MAX_RESPONSE_BYTES);
    expect(r.responseBytes).toBeLessThanOrEqual(WEBHOOK_MAX_RESPONSE_BYTES + 64 * 1024);
    expect(r.responseExcerpt).toBe('x'.repeat(1024));
    // The server saw the connection go away before it could send everything.
    expect(await serverClosed).toBe(false);
    expect(written).toBeLessThan(total);
  });

  it('the excerpt does not end in half a UTF-8 character', async () => {
    const s = await serve((_req, res) => res.writeHead(500).end('é'.repeat(1000)));
    const r = await deliver({ url: s.url, headers: signed(), body, ...local });
    expect(r.responseExcerpt).toBe('é'.repeat(512));
  });

  it('connects to the vetted address while Host stays the URL host', async () => {
    const s = await serve((_req, res) => res.end('ok'));
    const calls: string[] = [];
    const resolve: Resolver = async (name) => {
      calls.push(name);
      return [{ address: '127.0.0.1', family: 4 }];
    };
    const url = `http://fakehost.test:${s.port}/in?x=1`;
    // Refused by default: the fake name resolves to loopback.
    const refused = await deliver({ url, headers: signed(), body, resolve });
    expect(refused.outcome).toBe('refused');
    expect(s.seen).toHaveLength(0);
    // Allowed by name: the request lands on 127.0.0.1 with the original Host header.
    const r = await deliver({ url, headers: { ...signed(), host: 'evil.example' }, body, resolve, allowlist: ['fakehost.test'] });
    expect(r).toMatchObject({ outcome: 'success', status: 200, addresses: ['127.0.0.1'] });
    expect(calls).toEqual(['fakehost.test', 'fakehost.test']);
    expect(s.seen).toHaveLength(1);
    expect(s.seen[0]!.headers.host).toBe(`fakehost.test:${s.port}`);
    expect(s.seen[0]!.url).toBe('/in?x=1');
    // Allowed by address block instead of by name.
    const byCidr = await deliver({ url, headers: signed(), body, resolve, allowlist: ['127.0.0.0/8'] });
    expect(byCidr.outcome).toBe('success');
  });

  it('pins IPv6 answers too: a name resolving to ::1 reaches the server listening there', async () => {
    const s = await serve((_req, res) => res.end('v6'), '::1');
    const resolve: Resolver = async () => [{ address: '::1', family: 6 }];
    const url = `http://six.test:${s.port}/`;
    expect((await deliver({ url, headers: signed(), body, resolve })).error).toMatch(/loopback address ::1/);
    const r = await deliver({ url, headers: signed(), body, resolve, allowlist: ['::1'] });
    expect(r).toMatchObject({ outcome: 'success', responseExcerpt: 'v6', addresses: ['::1'] });
    expect(s.seen[0]!.headers.host).toBe(`six.test:${s.port}`);
  });

  it('refuses nonsense options with errors that name the field', async () => {
    await expect(deliver({ url: 'http://93.184.216.34/', headers: {}, body, timeoutMs: 0 })).rejects.toThrow(/invalid option timeoutMs/);
    await expect(deliver({ url: 'http://93.184.216.34/', headers: {}, body, allowlist: ['10.0.0.0/99'] })).rejects.toThrow(/allowlist\[0\]/);
  });

  it('a resolver that does not answer in time counts against timeoutMs', async () => {
    const resolve: Resolver = () => new Promise(() => {});
    const r = await deliver({ url: 'http://slow-dns.test/', headers: signed(), body, resolve, timeoutMs: 100 });
    expect(r).toMatchObject({ outcome: 'failure', error: 'timed out after 100 ms' });
  });

  it('a name that does not resolve is a failure, not a refusal', async () => {
    const resolve: Resolver = async () => {
      throw Object.assign(new Error('getaddrinfo ENOTFOUND nowhere.test'), { code: 'ENOTFOUND' });
    };
    expect(await deliver({ url: 'http://nowhere.test/', headers: signed(), body, resolve })).toMatchObject({ outcome: 'failure', error: 'host name did not resolve (ENOTFOUND)' });
  });
});
