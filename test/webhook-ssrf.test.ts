import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { assertUrlAllowed, classifyAddress, parseIpv4Loose, type AddressKind } from '../src/channels/webhook/address.js';
import { deliver, type Resolver } from '../src/channels/webhook/http.js';
import { WebhookUrlRefusedError } from '../src/channels/webhook/errors.js';
import { OptionsError, ReaError } from '../src/core/errors.js';

function refusal(url: string, policy = {}): WebhookUrlRefusedError {
  try {
    assertUrlAllowed(url, policy);
  } catch (err) {
    if (err instanceof WebhookUrlRefusedError) return err;
    throw err;
  }
  throw new Error(`expected ${url} to be refused`);
}

// [url, kind, the address the message must name]
const REFUSED: [string, AddressKind, string][] = [
  ['http://127.0.0.1/', 'loopback', '127.0.0.1'],
  ['http://127.255.255.254:8080/x', 'loopback', '127.255.255.254'],
  ['http://[::1]/', 'loopback', '::1'],
  ['http://10.0.0.1/', 'private', '10.0.0.1'],
  ['http://172.16.0.1/', 'private', '172.16.0.1'],
  ['http://172.31.255.255/', 'private', '172.31.255.255'],
  ['http://192.168.1.1/', 'private', '192.168.1.1'],
  ['http://169.254.1.1/', 'link-local', '169.254.1.1'],
  ['http://[fe80::1]/', 'link-local', 'fe80::1'],
  ['http://[febf:ffff::1]/', 'link-local', 'febf:ffff::1'],
  ['http://100.64.0.1/', 'cgnat', '100.64.0.1'],
  ['http://100.127.255.255/', 'cgnat', '100.127.255.255'],
  ['http://224.0.0.1/', 'multicast', '224.0.0.1'],
  ['http://239.255.255.250/', 'multicast', '239.255.255.250'],
  ['http://[ff02::1]/', 'multicast', 'ff02::1'],
  ['http://0.0.0.0/', 'unspecified', '0.0.0.0'],
  ['http://0/', 'unspecified', '0.0.0.0'],
  ['http://[::]/', 'unspecified', '::'],
  ['http://255.255.255.255/', 'broadcast', '255.255.255.255'],
  ['http://169.254.169.254/latest/meta-data/', 'metadata', '169.254.169.254'],
  ['http://[fd00:ec2::254]/', 'metadata', 'fd00:ec2::254'],
  ['http://100.100.100.200/', 'metadata', '100.100.100.200'],
  ['http://[fc00::1]/', 'unique-local', 'fc00::1'],
  ['http://[fdff:1234::1]/', 'unique-local', 'fdff:1234::1'],
  // IPv4 inside IPv6: the wrapped address decides.
  ['http://[::ffff:127.0.0.1]/', 'loopback', '127.0.0.1'],
  ['http://[::ffff:7f00:1]/', 'loopback', '127.0.0.1'],
  ['http://[::ffff:a9fe:a9fe]/', 'metadata', '169.254.169.254'],
  ['http://[::ffff:0:10.0.0.1]/', 'private', '10.0.0.1'],
  ['http://[::127.0.0.1]/', 'loopback', '127.0.0.1'],
  ['http://[64:ff9b::10.0.0.1]/', 'private', '10.0.0.1'],
  ['http://[64:ff9b::7f00:1]/', 'loopback', '127.0.0.1'],
  ['http://[64:ff9b:1::1]/', 'private', '64:ff9b:1::1'],
  ['http://[2002:c0a8:101::1]/', 'private', '192.168.1.1'],
  ['http://[2002:7f00:1::]/', 'loopback', '127.0.0.1'],
  // Numeric host forms the URL parser rewrites to 127.0.0.1.
  ['http://2130706433/', 'loopback', '127.0.0.1'],
  ['http://0177.0.0.1/', 'loopback', '127.0.0.1'],
  ['http://0x7f.1/', 'loopback', '127.0.0.1'],
  ['http://0x7f000001/', 'loopback', '127.0.0.1'],
  ['http://017700000001/', 'loopback', '127.0.0.1'],
  ['http://127.1/', 'loopback', '127.0.0.1'],
  ['http://127.0.1/', 'loopback', '127.0.0.1'],
  ['http://127.0.0.1./', 'loopback', '127.0.0.1'],
  ['http://0xa9.0xfe.0xa9.0xfe/', 'metadata', '169.254.169.254'],
  ['http://3232235777/', 'private', '192.168.1.1'],
  // Documentation, benchmarking and reserved ranges.
  ['http://192.0.0.8/', 'reserved', '192.0.0.8'],
  ['http://192.0.2.10/', 'documentation', '192.0.2.10'],
  ['http://198.18.0.1/', 'reserved', '198.18.0.1'],
  ['http://198.19.255.1/', 'reserved', '198.19.255.1'],
  ['http://198.51.100.7/', 'documentation', '198.51.100.7'],
  ['http://203.0.113.9/', 'documentation', '203.0.113.9'],
  ['http://240.0.0.1/', 'reserved', '240.0.0.1'],
  ['http://0.1.2.3/', 'reserved', '0.1.2.3'],
  ['http://[2001:db8::1]/', 'documentation', '2001:db8::1'],
  ['http://[100::1]/', 'reserved', '100::1'],
  ['http://[2001::1]/', 'reserved', '2001::1'],
  ['http://[4000::1]/', 'reserved', '4000::1'],
];

const ALLOWED = ['http://93.184.216.34/', 'https://8.8.8.8/hook', 'http://[2606:4700::1111]/', 'https://[2a00:1450:4001::200e]:8443/x', 'http://[::ffff:93.184.216.34]/', 'http://[2002:5db8:d822::1]/', 'http://172.32.0.1/', 'http://100.128.0.1/', 'https://example.com/hooks?x=1'];

describe('SSRF guard: literal hosts', () => {
  it.each(REFUSED)('refuses %s as %s', (url, kind, address) => {
    const err = refusal(url);
    expect(err).toBeInstanceOf(ReaError);
    expect(err.code).toBe('ERR_WEBHOOK_URL_REFUSED');
    expect(err.refusal).toBe('address');
    expect(err.addressKind).toBe(kind);
    expect(err.message).toContain(`address ${address}`);
  });

  it('names the reason in words', () => {
    expect(refusal('http://2130706433/').message).toMatch(/resolves to loopback address 127\.0\.0\.1$/);
    expect(refusal('http://[::ffff:7f00:1]/').message).toMatch(/loopback address 127\.0\.0\.1 \(ipv4-mapped IPv6 ::ffff:7f00:1\)/);
    expect(refusal('http://169.254.169.254/').message).toMatch(/cloud metadata address 169\.254\.169\.254/);
  });

  it.each(ALLOWED)('allows the public address %s', (url) => {
    expect(() => assertUrlAllowed(url)).not.toThrow();
  });

  it('refuses other schemes, credentials, junk and localhost names', () => {
    expect(refusal('ftp://example.com/').refusal).toBe('scheme');
    expect(refusal('file:///etc/passwd').refusal).toBe('scheme');
    expect(refusal('gopher://example.com/').refusal).toBe('scheme');
    const cred = refusal('https://user:hunter2@example.com/');
    expect(cred.refusal).toBe('credentials');
    expect(cred.message).not.toContain('hunter2');
    expect(refusal('https://:tok@example.com/').refusal).toBe('credentials');
    expect(refusal('not a url').refusal).toBe('invalid');
    expect(refusal('http://localhost:3000/').addressKind).toBe('loopback');
    expect(refusal('http://api.localhost/').addressKind).toBe('loopback');
  });

  it('classifies on the normalized address whatever the input form', () => {
    for (const form of ['127.0.0.1', '2130706433', '0177.0.0.1', '0x7f.1', '127.1', '0x7f.0.0.1', '::ffff:127.0.0.1', '::ffff:7f00:1', '[::ffff:7f00:1]']) {
      const c = classifyAddress(form);
      expect(c.kind, form).toBe('loopback');
      expect(c.embedded?.ipv4 ?? c.address, form).toBe('127.0.0.1');
    }
    expect(parseIpv4Loose('1.65536')).toBe(2 ** 24 + 65536);
    expect(parseIpv4Loose('256.1')).toBeNull();
    expect(parseIpv4Loose('1.256.0.0')).toBeNull();
    expect(parseIpv4Loose('08.0.0.1')).toBeNull();
    expect(() => classifyAddress('example.com')).toThrow(OptionsError);
  });

  it('opts out with allowPrivateNetworks, but never for metadata, multicast, broadcast or unspecified', () => {
    const open = { allowPrivateNetworks: true };
    for (const url of ['http://127.0.0.1/', 'http://10.1.2.3/', 'http://[fd12::1]/', 'http://localhost/', 'http://100.64.1.1/']) {
      expect(() => assertUrlAllowed(url, open), url).not.toThrow();
    }
    for (const url of ['http://169.254.169.254/', 'http://[fd00:ec2::254]/', 'http://224.0.0.1/', 'http://255.255.255.255/', 'http://0.0.0.0/', 'http://[::]/']) {
      expect(() => assertUrlAllowed(url, open), url).toThrow(WebhookUrlRefusedError);
    }
  });

  it('opts out per target with an allowlist of names, addresses and CIDR blocks', () => {
    expect(() => assertUrlAllowed('http://10.1.2.3/', { allowlist: ['10.1.0.0/16'] })).not.toThrow();
    expect(() => assertUrlAllowed('http://10.2.0.1/', { allowlist: ['10.1.0.0/16'] })).toThrow(WebhookUrlRefusedError);
    expect(() => assertUrlAllowed('http://[::ffff:10.1.2.3]/', { allowlist: ['10.1.2.3'] })).not.toThrow();
    expect(() => assertUrlAllowed('http://[fd12::5]/', { allowlist: ['fd12::/16'] })).not.toThrow();
    expect(() => assertUrlAllowed('http://169.254.169.254/', { allowlist: ['169.254.169.254'] })).not.toThrow();
    expect(() => assertUrlAllowed('http://localhost/', { allowlist: ['localhost'] })).not.toThrow();
    expect(() => assertUrlAllowed('http://224.0.0.1/', { allowlist: ['224.0.0.0/4'] })).toThrow(WebhookUrlRefusedError);
    expect(() => assertUrlAllowed('http://x/', { allowlist: ['10.0.0.0/33'] })).toThrow(/allowlist\[0\]/);
    expect(() => assertUrlAllowed('http://x/', { allowlist: ['not a host!'] })).toThrow(OptionsError);
  });
});

describe('SSRF guard: resolved names, with nothing sent', () => {
  let server: Server;
  let port: number;
  let hits = 0;
  const body = '{"id":"evt"}';
  const headers = { 'webhook-id': 'dlv_1', 'webhook-timestamp': '1', 'webhook-signature': 'v1,c2VjcmV0LXNpZw==' };

  beforeAll(async () => {
    server = createServer((req, res) => {
      hits++;
      res.end('ok');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  const resolverOf = (answers: Record<string, string[]>): { resolve: Resolver; calls: string[] } => {
    const calls: string[] = [];
    return {
      calls,
      resolve: async (name) => {
        calls.push(name);
        return (answers[name] ?? []).map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
      },
    };
  };

  it('refuses literal loopback forms without connecting', async () => {
    for (const host of ['127.0.0.1', '2130706433', '0x7f.1', '127.1', '[::ffff:127.0.0.1]']) {
      const r = await deliver({ url: `http://${host}:${port}/hook`, headers, body });
      expect(r.outcome, host).toBe('refused');
      expect(r.error).toMatch(/loopback address 127\.0\.0\.1/);
    }
    expect(hits).toBe(0);
  });

  it('refuses localhost (real system resolver) pointing at a live server', async () => {
    const r = await deliver({ url: `http://localhost:${port}/hook`, headers, body });
    expect(r.outcome).toBe('refused');
    expect(r.error).toMatch(/loopback/);
    expect(hits).toBe(0);
  });

  it('refuses a name that resolves to a private address', async () => {
    const { resolve, calls } = resolverOf({ 'hooks.example.net': ['10.0.0.7'] });
    const r = await deliver({ url: 'https://hooks.example.net/in', headers, body, resolve });
    expect(calls).toEqual(['hooks.example.net']);
    expect(r).toMatchObject({ outcome: 'refused', responseBytes: 0 });
    expect(r.error).toBe('webhook URL refused (host hooks.example.net): resolves to private address 10.0.0.7');
  });

  it('vets every resolved address: one internal answer among public ones refuses the host', async () => {
    const { resolve } = resolverOf({ 'mixed.example.net': ['93.184.216.34', '2606:4700::1111', '::ffff:169.254.169.254'] });
    const r = await deliver({ url: 'https://mixed.example.net/in', headers, body, resolve });
    expect(r.outcome).toBe('refused');
    expect(r.error).toMatch(/cloud metadata address 169\.254\.169\.254/);
  });

  it('a name resolving to loopback is refused even though a server listens there', async () => {
    const { resolve } = resolverOf({ 'rebind.example.net': ['127.0.0.1'] });
    const r = await deliver({ url: `http://rebind.example.net:${port}/`, headers, body, resolve });
    expect(r.outcome).toBe('refused');
    expect(hits).toBe(0);
  });

  it('does not consult the resolver for a literal address, and never leaks headers into the error', async () => {
    const { resolve, calls } = resolverOf({});
    const r = await deliver({ url: 'http://[fd00:ec2::254]/latest', headers, body, resolve });
    expect(r.outcome).toBe('refused');
    expect(calls).toEqual([]);
    expect(JSON.stringify(r)).not.toContain('c2VjcmV0LXNpZw');
  });
});
