// Admin handler test helpers: serve a handler on 127.0.0.1, make raw HTTP calls (so Origin,
// Cookie and Host can be set freely), log in like a browser, and read a page's CSRF token.
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { onTestFinished } from 'vitest';

export const TOKEN = 'test-admin-token-0123456789abcdef';

export interface Served {
  url: string;
  host: string;
  server: Server;
}

export async function serve(listener: (req: IncomingMessage, res: ServerResponse) => void, host = '127.0.0.1'): Promise<Served> {
  const server = createServer(listener);
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const { port } = server.address() as AddressInfo;
  onTestFinished(() => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  return { url: `http://${host}:${port}`, host: `${host}:${port}`, server };
}

export interface Reply {
  status: number;
  headers: IncomingMessage['headers'];
  text: string;
  json: any;
}

export function call(base: string, method: string, path: string, opts: { headers?: Record<string, string>; body?: unknown; form?: Record<string, string | string[]> } = {}): Promise<Reply> {
  const url = new URL(path, base);
  let payload: string | undefined;
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.form) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(opts.form)) for (const x of Array.isArray(v) ? v : [v]) p.append(k, x);
    payload = p.toString();
    headers['content-type'] ??= 'application/x-www-form-urlencoded';
  } else if (opts.body !== undefined) {
    payload = JSON.stringify(opts.body);
    headers['content-type'] ??= 'application/json';
  }
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
      });
    });
    req.on('error', reject);
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

export const bearer = (token = TOKEN) => ({ authorization: `Bearer ${token}` });

/** Log in through the form; returns the Cookie header value of the session. */
export async function login(base: string, prefix = ''): Promise<string> {
  const origin = new URL(base).origin;
  const r = await call(base, 'POST', `${prefix}/login`, { form: { token: TOKEN, next: '/' }, headers: { origin } });
  if (r.status !== 303) throw new Error(`login failed: ${r.status} ${r.text}`);
  const cookie = String(r.headers['set-cookie']?.[0] ?? '');
  return cookie.split(';')[0]!;
}

export function csrfFrom(html: string): string {
  const m = /name="csrf-token" content="([^"]+)"/.exec(html);
  if (!m) throw new Error('no CSRF token on the page');
  return m[1]!;
}
