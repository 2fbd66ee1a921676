// The SSRF guard: decides whether a webhook may reach an IP address. Classification always
// runs on a normalized address (numeric host forms and IPv4 wrapped in IPv6 are unwrapped
// first), so "0x7f.1", "2130706433" and "::ffff:7f00:1" are all judged as 127.0.0.1.
import { OptionsError } from '../../core/errors.js';
import { WebhookUrlRefusedError } from './errors.js';

export type AddressKind =
  | 'public'
  | 'loopback'
  | 'private'
  | 'link-local'
  | 'cgnat'
  | 'multicast'
  | 'unspecified'
  | 'broadcast'
  | 'metadata'
  | 'unique-local'
  | 'documentation'
  | 'reserved';

/** How an IPv4 address was carried inside an IPv6 one. */
export type Ipv4Wrapper = 'ipv4-mapped' | 'ipv4-compatible' | 'ipv4-translated' | 'nat64' | '6to4';

export interface AddressClass {
  kind: AddressKind;
  family: 4 | 6;
  /** Canonical text: dotted quad, or RFC 5952 IPv6. */
  address: string;
  /** The block that matched, e.g. "10.0.0.0/8". */
  range: string;
  /** Set when an IPv6 address wraps an IPv4 one; `kind` is then the IPv4 address's kind. */
  embedded?: { via: Ipv4Wrapper; ipv4: string };
}

const KIND_LABEL: Record<AddressKind, string> = {
  public: 'public',
  loopback: 'loopback',
  private: 'private',
  'link-local': 'link-local',
  cgnat: 'carrier-grade NAT (shared)',
  multicast: 'multicast',
  unspecified: 'unspecified',
  broadcast: 'broadcast',
  metadata: 'cloud metadata',
  'unique-local': 'unique-local',
  documentation: 'documentation',
  reserved: 'reserved',
};

// Kinds that are never a unicast destination: no opt-out makes them a sensible webhook target.
const NEVER: ReadonlySet<AddressKind> = new Set(['unspecified', 'multicast', 'broadcast']);

// ---------------------------------------------------------------- parsing

/**
 * Parses an IPv4 host the way the WHATWG URL parser does: 1–4 parts, each decimal, octal
 * (leading 0) or hex (0x); the last part fills the remaining bytes ("127.1", "2130706433").
 * Returns the address as an unsigned 32-bit number, or null when the text is not such a host.
 */
export function parseIpv4Loose(host: string): number | null {
  let parts = host.split('.');
  if (parts.length > 1 && parts[parts.length - 1] === '') parts = parts.slice(0, -1);
  if (parts.length === 0 || parts.length > 4) return null;
  const nums: number[] = [];
  for (const p of parts) {
    let n: number;
    if (/^0[xX][0-9a-fA-F]*$/.test(p)) n = p.length === 2 ? 0 : parseInt(p.slice(2), 16);
    else if (/^0[0-7]+$/.test(p)) n = parseInt(p.slice(1), 8);
    else if (/^(0|[1-9][0-9]*)$/.test(p)) n = Number(p);
    else return null;
    if (!Number.isSafeInteger(n)) return null;
    nums.push(n);
  }
  const last = nums.pop()!;
  if (nums.some((n) => n > 255)) return null;
  if (last >= 256 ** (4 - nums.length)) return null;
  let value = 0;
  nums.forEach((n, i) => {
    value += n * 256 ** (3 - i);
  });
  return value + last;
}

function parseIpv4Strict(text: string): number | null {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  if (!m) return null;
  const bytes = m.slice(1).map(Number);
  if (bytes.some((b, i) => b > 255 || (m[i + 1]!.length > 1 && m[i + 1]!.startsWith('0')))) return null;
  return ((bytes[0]! << 24) >>> 0) + (bytes[1]! << 16) + (bytes[2]! << 8) + bytes[3]!;
}

/** Parses IPv6 text (no brackets; a zone id is ignored) into a 128-bit number, or null. */
export function parseIpv6(text: string): bigint | null {
  const zone = text.indexOf('%');
  if (zone >= 0) text = text.slice(0, zone);
  if (!text.includes(':')) return null;
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const toGroups = (s: string): number[] | null => {
    if (s === '') return [];
    const out: number[] = [];
    const pieces = s.split(':');
    for (let i = 0; i < pieces.length; i++) {
      const p = pieces[i]!;
      if (i === pieces.length - 1 && p.includes('.')) {
        const v4 = parseIpv4Strict(p);
        if (v4 === null) return null;
        out.push(v4 >>> 16, v4 & 0xffff);
      } else if (/^[0-9a-fA-F]{1,4}$/.test(p)) {
        out.push(parseInt(p, 16));
      } else {
        return null;
      }
    }
    return out;
  };
  const head = toGroups(halves[0]!);
  const tail = halves.length === 2 ? toGroups(halves[1]!) : [];
  if (!head || !tail) return null;
  // A dotted tail is only allowed at the very end.
  if (halves.length === 2 && halves[0]!.includes('.')) return null;
  let groups: number[];
  if (halves.length === 2) {
    if (head.length + tail.length > 7) return null;
    groups = [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
  } else {
    if (head.length !== 8) return null;
    groups = head;
  }
  return groups.reduce((acc, g) => (acc << 16n) | BigInt(g), 0n);
}

export function formatIpv4(v: number): string {
  return [v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255].join('.');
}

/** RFC 5952 text: lower case, leading zeros dropped, the longest run (≥ 2) of zero groups as "::". */
export function formatIpv6(v: bigint): string {
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((v >> BigInt(i * 16)) & 0xffffn));
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

type Parsed = { family: 4; value: number } | { family: 6; value: bigint };

/**
 * Reads an IP address from a host string: dotted quads and every WHATWG numeric IPv4 form,
 * IPv6 with or without brackets. Returns null for a name that is not an IP literal.
 */
export function parseIp(host: string): Parsed | null {
  const h = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (h.includes(':')) {
    const v6 = parseIpv6(h);
    return v6 === null ? null : { family: 6, value: v6 };
  }
  const v4 = parseIpv4Loose(h);
  return v4 === null ? null : { family: 4, value: v4 };
}

// ---------------------------------------------------------------- classification

interface Block<T> {
  base: T;
  bits: number;
  kind: AddressKind;
  text: string;
}

function v4Block(cidr: string, kind: AddressKind): Block<number> {
  const [addr, bits] = cidr.split('/');
  return { base: parseIpv4Strict(addr!)!, bits: Number(bits), kind, text: cidr };
}

function v6Block(cidr: string, kind: AddressKind): Block<bigint> {
  const [addr, bits] = cidr.split('/');
  return { base: parseIpv6(addr!)!, bits: Number(bits), kind, text: cidr };
}

function inV4(v: number, b: { base: number; bits: number }): boolean {
  if (b.bits === 0) return true;
  const mask = (0xffffffff << (32 - b.bits)) >>> 0;
  return ((v & mask) >>> 0) === ((b.base & mask) >>> 0);
}

function inV6(v: bigint, b: { base: bigint; bits: number }): boolean {
  const shift = BigInt(128 - b.bits);
  return v >> shift === b.base >> shift;
}

// First match wins, so single addresses come before the blocks that contain them.
const V4_BLOCKS: Block<number>[] = [
  v4Block('0.0.0.0/32', 'unspecified'),
  v4Block('0.0.0.0/8', 'reserved'), // "this network"
  v4Block('10.0.0.0/8', 'private'),
  v4Block('100.100.100.200/32', 'metadata'), // Alibaba Cloud
  v4Block('100.64.0.0/10', 'cgnat'),
  v4Block('127.0.0.0/8', 'loopback'),
  v4Block('169.254.169.254/32', 'metadata'), // AWS, GCP, Azure, Oracle, DigitalOcean…
  v4Block('169.254.170.2/32', 'metadata'), // AWS ECS task credentials
  v4Block('169.254.0.0/16', 'link-local'),
  v4Block('168.63.129.16/32', 'metadata'), // Azure wire server
  v4Block('172.16.0.0/12', 'private'),
  v4Block('192.0.0.0/24', 'reserved'), // IETF protocol assignments
  v4Block('192.0.2.0/24', 'documentation'),
  v4Block('192.88.99.0/24', 'reserved'), // old 6to4 relay anycast
  v4Block('192.168.0.0/16', 'private'),
  v4Block('198.18.0.0/15', 'reserved'), // benchmarking
  v4Block('198.51.100.0/24', 'documentation'),
  v4Block('203.0.113.0/24', 'documentation'),
  v4Block('224.0.0.0/4', 'multicast'),
  v4Block('255.255.255.255/32', 'broadcast'),
  v4Block('240.0.0.0/4', 'reserved'),
];

const V6_BLOCKS: Block<bigint>[] = [
  v6Block('::/128', 'unspecified'),
  v6Block('::1/128', 'loopback'),
  v6Block('fd00:ec2::254/128', 'metadata'), // AWS IMDS over IPv6
  v6Block('64:ff9b:1::/48', 'private'), // local-use NAT64 (RFC 8215)
  v6Block('100::/64', 'reserved'), // discard-only
  v6Block('2001:db8::/32', 'documentation'),
  v6Block('3fff::/20', 'documentation'),
  v6Block('2001::/23', 'reserved'), // IETF protocol assignments: Teredo, benchmarking, ORCHID…
  v6Block('fc00::/7', 'unique-local'),
  v6Block('fec0::/10', 'private'), // deprecated site-local
  v6Block('fe80::/10', 'link-local'),
  v6Block('ff00::/8', 'multicast'),
];

const GLOBAL_UNICAST_V6 = v6Block('2000::/3', 'public');

// IPv6 forms that carry an IPv4 address; the IPv4 address decides.
const V6_WRAPPERS: { block: Block<bigint>; via: Ipv4Wrapper; extract: (v: bigint) => number }[] = [
  { block: v6Block('::ffff:0:0/96', 'reserved'), via: 'ipv4-mapped', extract: (v) => Number(v & 0xffffffffn) },
  { block: v6Block('::ffff:0:0:0/96', 'reserved'), via: 'ipv4-translated', extract: (v) => Number(v & 0xffffffffn) },
  { block: v6Block('64:ff9b::/96', 'reserved'), via: 'nat64', extract: (v) => Number(v & 0xffffffffn) },
  { block: v6Block('2002::/16', 'reserved'), via: '6to4', extract: (v) => Number((v >> 80n) & 0xffffffffn) },
  // Checked after :: and ::1 (see classifyParsed); the rest of ::/96 is the old IPv4-compatible form.
  { block: v6Block('::/96', 'reserved'), via: 'ipv4-compatible', extract: (v) => Number(v & 0xffffffffn) },
];

function classifyV4(v: number): { kind: AddressKind; range: string } {
  for (const b of V4_BLOCKS) if (inV4(v, b)) return { kind: b.kind, range: b.text };
  return { kind: 'public', range: '0.0.0.0/0' };
}

function classifyParsed(p: Parsed): AddressClass {
  if (p.family === 4) return { family: 4, address: formatIpv4(p.value), ...classifyV4(p.value) };
  const v = p.value;
  const address = formatIpv6(v);
  if (v > 1n) {
    for (const w of V6_WRAPPERS) {
      if (!inV6(v, w.block)) continue;
      const ipv4 = w.extract(v);
      return { family: 6, address, ...classifyV4(ipv4), embedded: { via: w.via, ipv4: formatIpv4(ipv4) } };
    }
  }
  for (const b of V6_BLOCKS) if (inV6(v, b)) return { family: 6, address, kind: b.kind, range: b.text };
  if (inV6(v, GLOBAL_UNICAST_V6)) return { family: 6, address, kind: 'public', range: GLOBAL_UNICAST_V6.text };
  return { family: 6, address, kind: 'reserved', range: 'outside 2000::/3' };
}

/** Classifies an IP address given in any form parseIp reads; throws OptionsError for a non-IP. */
export function classifyAddress(ip: string): AddressClass {
  const p = parseIp(ip);
  if (!p) throw new OptionsError('address', `not an IP address: ${JSON.stringify(ip)}`);
  return classifyParsed(p);
}

// ---------------------------------------------------------------- policy

export interface AddressPolicy {
  /** Allow loopback, private, link-local, CGNAT, unique-local and reserved targets. Default false. */
  allowPrivateNetworks?: boolean;
  /**
   * Targets allowed despite their address: host names ("hooks.internal", "*.internal" for
   * subdomains), IP addresses and CIDR blocks ("10.1.0.0/16", "fd12::/16"). Metadata
   * addresses are only ever allowed by an IP or CIDR entry; unspecified, multicast and
   * broadcast addresses never.
   */
  allowlist?: readonly string[];
}

export interface CompiledAllowlist {
  names: string[];
  suffixes: string[];
  v4: { base: number; bits: number }[];
  v6: { base: bigint; bits: number }[];
}

export function compileAllowlist(list: readonly string[] | undefined): CompiledAllowlist {
  const out: CompiledAllowlist = { names: [], suffixes: [], v4: [], v6: [] };
  for (const [i, raw] of (list ?? []).entries()) {
    const field = `allowlist[${i}]`;
    if (typeof raw !== 'string' || raw.trim() === '') throw new OptionsError(field, 'must be a non-empty string');
    const entry = raw.trim().toLowerCase();
    const slash = entry.indexOf('/');
    const ipText = slash >= 0 ? entry.slice(0, slash) : entry;
    const ip = ipText.includes(':') ? parseIpv6(ipText.replace(/^\[|\]$/g, '')) : parseIpv4Strict(ipText);
    if (ip !== null) {
      const max = typeof ip === 'bigint' ? 128 : 32;
      const bits = slash >= 0 ? Number(entry.slice(slash + 1)) : max;
      if (!Number.isInteger(bits) || bits < 0 || bits > max || (slash >= 0 && !/^\d+$/.test(entry.slice(slash + 1)))) {
        throw new OptionsError(field, `bad prefix length in ${JSON.stringify(raw)}`);
      }
      if (typeof ip === 'bigint') out.v6.push({ base: ip, bits });
      else out.v4.push({ base: ip, bits });
    } else if (slash >= 0) {
      throw new OptionsError(field, `not an IP address or CIDR block: ${JSON.stringify(raw)}`);
    } else if (entry.startsWith('*.') && entry.length > 2) {
      out.suffixes.push(entry.slice(1));
    } else if (/^[a-z0-9_.-]+$/.test(entry) && !entry.includes('*')) {
      out.names.push(entry.replace(/\.$/, ''));
    } else {
      throw new OptionsError(field, `not a host name, IP address or CIDR block: ${JSON.stringify(raw)}`);
    }
  }
  return out;
}

function hostAllowlisted(list: CompiledAllowlist, host: string): boolean {
  const h = host.toLowerCase().replace(/\.$/, '');
  return list.names.includes(h) || list.suffixes.some((s) => h.endsWith(s));
}

function addressAllowlisted(list: CompiledAllowlist, c: AddressClass): boolean {
  const p = parseIp(c.address)!;
  if (p.family === 6 && list.v6.some((b) => inV6(p.value, b))) return true;
  const v4 = p.family === 4 ? p.value : c.embedded ? parseIpv4Strict(c.embedded.ipv4) : null;
  return v4 !== null && list.v4.some((b) => inV4(v4, b));
}

export type AddressVerdict = { allowed: true; class: AddressClass } | { allowed: false; class: AddressClass; reason: string };

function describe(c: AddressClass): string {
  const label = KIND_LABEL[c.kind];
  if (c.embedded) return `${label} address ${c.embedded.ipv4} (${c.embedded.via} IPv6 ${c.address})`;
  return `${label} address ${c.address}`;
}

/**
 * Judges one resolved address of `host` under the policy. Kept separate from the URL check
 * so the HTTP client can run it on every address a name resolves to.
 */
export function checkAddress(address: string, policy: AddressPolicy & { host?: string }, compiled?: CompiledAllowlist): AddressVerdict {
  const c = classifyAddress(address);
  if (c.kind === 'public') return { allowed: true, class: c };
  const refuse = (): AddressVerdict => ({ allowed: false, class: c, reason: `resolves to ${describe(c)}` });
  if (NEVER.has(c.kind)) return refuse();
  const list = compiled ?? compileAllowlist(policy.allowlist);
  if (addressAllowlisted(list, c)) return { allowed: true, class: c };
  if (c.kind === 'metadata') return refuse();
  if (policy.allowPrivateNetworks) return { allowed: true, class: c };
  if (policy.host !== undefined && hostAllowlisted(list, policy.host)) return { allowed: true, class: c };
  return refuse();
}

export interface CheckedUrl {
  url: URL;
  /** The host name without IPv6 brackets, as used for DNS, SNI and the Host header. */
  hostname: string;
  /** Set when the host is an IP literal: its vetted canonical address. No lookup is needed. */
  literal?: AddressClass;
  /** @internal the parsed allowlist, reused for the resolved addresses. */
  allowlist: CompiledAllowlist;
}

// Names that resolve to this machine by definition (RFC 6761), refused before any lookup.
function isLocalhostName(host: string): boolean {
  const h = host.toLowerCase().replace(/\.$/, '');
  return h === 'localhost' || h.endsWith('.localhost');
}

/**
 * Checks what can be checked without DNS: http(s) only, no credentials, and an IP-literal
 * host (in any numeric form) must pass the address policy. Throws WebhookUrlRefusedError.
 */
export function assertUrlAllowed(input: string | URL, policy: AddressPolicy = {}): CheckedUrl {
  const allowlist = compileAllowlist(policy.allowlist);
  let url: URL;
  try {
    url = new URL(String(input));
  } catch {
    throw new WebhookUrlRefusedError('invalid', 'not a valid absolute URL');
  }
  const host = url.hostname;
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new WebhookUrlRefusedError('scheme', `scheme ${url.protocol.replace(/:$/, '')} is not allowed; use http or https`, host);
  }
  if (url.username !== '' || url.password !== '') {
    throw new WebhookUrlRefusedError('credentials', 'credentials in the URL are not allowed; use headers or the signature', host);
  }
  if (host === '') throw new WebhookUrlRefusedError('invalid', 'the URL has no host');
  const hostname = host.startsWith('[') ? host.slice(1, -1) : host;
  // new URL() already rewrote numeric IPv4 forms to a dotted quad; parseIp reads the rest.
  const parsed = parseIp(hostname);
  if (parsed) {
    const verdict = checkAddress(hostname, { ...policy, host: hostname }, allowlist);
    if (!verdict.allowed) throw new WebhookUrlRefusedError('address', verdict.reason, host, verdict.class.address, verdict.class.kind);
    return { url, hostname, literal: verdict.class, allowlist };
  }
  if (isLocalhostName(hostname) && !policy.allowPrivateNetworks && !hostAllowlisted(allowlist, hostname)) {
    throw new WebhookUrlRefusedError('address', `resolves to loopback address (${hostname} is always this machine)`, host, undefined, 'loopback');
  }
  return { url, hostname, allowlist };
}
