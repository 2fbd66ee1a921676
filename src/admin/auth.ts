// Who may use the admin handler: credentials (bearer token or basic auth), browser sessions
// derived from them, CSRF tokens, the same-origin check for state-changing requests, and the
// loopback-only rule of `auth: 'none'`. Every secret comparison is constant-time.
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { BlockList, isIP } from 'node:net';
import { OptionsError } from '../core/errors.js';

export type AdminAuth = 'none' | { token: string } | { username: string; password: string };

/** createAdminHandler was given no credentials and no explicit `auth: 'none'`. */
export class AdminCredentialsMissingError extends OptionsError {
  constructor() {
    super('auth', "the admin handler needs credentials: pass { auth: { token } } or { auth: { username, password } }, set REA_ADMIN_TOKEN, or pass auth: 'none' explicitly (then only loopback clients are served)");
    this.name = 'AdminCredentialsMissingError';
  }
}

export const SESSION_COOKIE = 'rea_admin_session';
const SESSION_TTL_MS = 12 * 60 * 60 * 1000;
const MIN_SECRET_LENGTH = 16;

/**
 * The credentials to serve with, checked. `tokenField` names where a token came from when it was
 * not `auth.token` in code (the environment variable `rea panel` read it from), so a refusal
 * names what the operator set.
 */
export function resolveAuth(auth: AdminAuth | undefined, env: NodeJS.ProcessEnv = process.env, tokenField = 'auth.token'): AdminAuth {
  if (auth === 'none') return 'none';
  if (auth === undefined) {
    const token = env.REA_ADMIN_TOKEN;
    if (!token) throw new AdminCredentialsMissingError();
    auth = { token };
    tokenField = 'REA_ADMIN_TOKEN';
  }
  if (typeof auth !== 'object' || auth === null) throw new OptionsError('auth', "pass { token }, { username, password } or 'none'");
  if ('token' in auth) {
    if (typeof auth.token !== 'string' || auth.token.length < MIN_SECRET_LENGTH) {
      throw new OptionsError(tokenField, `must be a string of at least ${MIN_SECRET_LENGTH} characters (e.g. openssl rand -hex 32)`);
    }
    // A token read from a secret file or a Kubernetes secret often ends in a newline. No client
    // can send whitespace in a Bearer token (HTTP trims the header, a password field drops the
    // newline), so every request and login was refused as 'wrong credentials', with no hint why.
    if (/\s/.test(auth.token)) {
      throw new OptionsError(tokenField, 'holds whitespace (a trailing newline from a secret file?), which no Bearer header or login form can send: remove it');
    }
    return { token: auth.token };
  }
  if ('username' in auth) {
    if (typeof auth.username !== 'string' || auth.username === '' || auth.username.includes(':')) {
      throw new OptionsError('auth.username', 'must be a non-empty string without ":"');
    }
    if (typeof auth.password !== 'string' || auth.password.length < MIN_SECRET_LENGTH) {
      throw new OptionsError('auth.password', `must be a string of at least ${MIN_SECRET_LENGTH} characters`);
    }
    return { username: auth.username, password: auth.password };
  }
  throw new OptionsError('auth', "pass { token }, { username, password } or 'none'");
}

/** Compare through HMACs of equal length, so neither content nor length leaks through timing. */
function safeEqual(a: string, b: string, key: Buffer): boolean {
  const ha = createHmac('sha256', key).update(a).digest();
  const hb = createHmac('sha256', key).update(b).digest();
  return timingSafeEqual(ha, hb);
}

export type Principal = { via: 'header' | 'basic' | 'session' | 'loopback'; session?: string };

export class Authenticator {
  readonly mode: 'none' | 'token' | 'basic';
  /** Signs sessions and CSRF tokens. Derived from the credentials (so changing them logs everyone
   *  out and sessions survive a restart); random per process under auth 'none'. */
  private readonly key: Buffer;
  private readonly compareKey = randomBytes(32);

  constructor(private readonly auth: AdminAuth, private readonly now: () => number = Date.now) {
    this.mode = auth === 'none' ? 'none' : 'token' in auth ? 'token' : 'basic';
    const secret = auth === 'none' ? randomBytes(32).toString('hex') : 'token' in auth ? auth.token : `${auth.username}:${auth.password}`;
    this.key = createHmac('sha256', secret).update('rea admin session key v1').digest();
  }

  /** Check the Authorization header: null when absent, false when present but wrong. */
  checkHeader(req: IncomingMessage): Principal | null | false {
    const header = req.headers.authorization;
    if (!header || this.auth === 'none') return null;
    const [scheme, value = ''] = header.split(/\s+/, 2) as [string, string?];
    if (/^bearer$/i.test(scheme)) {
      return 'token' in this.auth && safeEqual(value, this.auth.token, this.compareKey) ? { via: 'header' } : false;
    }
    if (/^basic$/i.test(scheme)) {
      const decoded = Buffer.from(value, 'base64').toString('utf8');
      const i = decoded.indexOf(':');
      if (i < 0) return false;
      const user = decoded.slice(0, i);
      const pass = decoded.slice(i + 1);
      // With a token configured, basic auth takes it as the password (curl -u admin:$TOKEN).
      const ok = 'token' in this.auth ? safeEqual(pass, this.auth.token, this.compareKey) : this.userAndPasswordMatch(user, pass);
      return ok ? { via: 'basic' } : false;
    }
    return false;
  }

  /** Check a login form's fields; on success returns a new session cookie value. */
  login(fields: { token?: string; username?: string; password?: string }): string | null {
    if (this.auth === 'none') return null;
    const ok = 'token' in this.auth
      ? safeEqual(fields.token ?? '', this.auth.token, this.compareKey)
      : this.userAndPasswordMatch(fields.username ?? '', fields.password ?? '');
    if (!ok) return null;
    const expires = this.now() + SESSION_TTL_MS;
    const nonce = randomBytes(12).toString('base64url');
    return `${expires}.${nonce}.${this.sign(`session:${expires}.${nonce}`)}`;
  }

  /** A session cookie value, checked for signature and expiry. */
  checkSession(value: string | undefined): Principal | null {
    if (!value || this.auth === 'none') return null;
    const parts = value.split('.');
    if (parts.length !== 3) return null;
    const [expires, nonce, sig] = parts as [string, string, string];
    if (!safeEqual(sig, this.sign(`session:${expires}.${nonce}`), this.compareKey)) return null;
    if (!(Number(expires) > this.now())) return null;
    return { via: 'session', session: value };
  }

  /**
   * What a logout records of a session so every process refuses it afterwards: a hash of the
   * cookie (the cookie itself is a credential and is stored nowhere), and when it would expire
   * anyway. Null for a principal without a session.
   */
  sessionRecord(principal: Principal): { id: string; expiresAt: Date } | null {
    if (!principal.session) return null;
    const expires = Number(principal.session.split('.')[0]);
    return { id: createHash('sha256').update(principal.session).digest('base64url'), expiresAt: new Date(expires) };
  }

  /** The CSRF token for a session (per-session HMAC), or for the loopback-only mode. */
  csrfToken(principal: Principal): string {
    return this.sign(`csrf:${principal.session ?? principal.via}`);
  }

  checkCsrf(principal: Principal, token: string | undefined): boolean {
    return typeof token === 'string' && safeEqual(token, this.csrfToken(principal), this.compareKey);
  }

  /**
   * The signature of a notice (what a panel action did, carried by its redirect), for this
   * session: a link cannot make the panel show words of its author's choosing, and a notice
   * made for one session shows in no other.
   */
  noticeSignature(principal: Principal, text: string): string {
    return this.sign(`notice:${principal.session ?? principal.via}:${text}`);
  }

  checkNotice(principal: Principal, text: string, signature: string | null): boolean {
    return typeof signature === 'string' && safeEqual(signature, this.noticeSignature(principal, text), this.compareKey);
  }

  /** Both compared every time, so a right username with a wrong password takes as long as neither. */
  private userAndPasswordMatch(user: string, pass: string): boolean {
    if (this.auth === 'none' || !('username' in this.auth)) return false;
    const userOk = safeEqual(user, this.auth.username, this.compareKey);
    const passOk = safeEqual(pass, this.auth.password, this.compareKey);
    return userOk && passOk;
  }

  private sign(text: string): string {
    return createHmac('sha256', this.key).update(text).digest('base64url');
  }
}

/**
 * The request's cookies by name. The Cookie header carries every cookie of the host, other
 * applications' too; one that is not valid percent-encoding is skipped (ours never is), so it
 * cannot turn every admin request into an error.
 */
export function parseCookies(header: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (header ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i < 0) continue;
    const name = part.slice(0, i).trim();
    if (!name || name in out) continue;
    const value = decodeCookieValue(part.slice(i + 1).trim());
    if (value !== null) out[name] = value;
  }
  return out;
}

function decodeCookieValue(raw: string): string | null {
  try {
    return decodeURIComponent(raw);
  } catch {
    return null;
  }
}

export function sessionCookie(value: string, path: string, secure: boolean, maxAgeS = SESSION_TTL_MS / 1000): string {
  return `${SESSION_COOKIE}=${value}; Path=${path}; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${secure ? '; Secure' : ''}`;
}

// Checked on the parsed address, so every spelling matches: 0:0:0:0:0:0:0:1 and ::1, and an
// IPv4-mapped ::ffff:127.0.0.1 (a dual-stack socket's peer) like 127.0.0.1.
const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

export function isLoopbackAddress(address: string | undefined): boolean {
  const family = address ? isIP(address) : 0;
  return family !== 0 && LOOPBACK.check(address!, family === 4 ? 'ipv4' : 'ipv6');
}

/**
 * A Host header, or the address to bind, naming this machine: refuses DNS-rebinding names under
 * auth 'none'. A Host header brackets an IPv6 address ([::1]:8787); an address to bind (--host ::1)
 * does not, and its last group is no port: stripping ':1' left ':' and refused ::1.
 */
export function isLoopbackHost(host: string | undefined): boolean {
  if (!host) return false;
  const name = host.startsWith('[') ? host.slice(1, host.indexOf(']')) : isIP(host) === 6 ? host : host.replace(/:\d+$/, '');
  return name === 'localhost' || name.endsWith('.localhost') || isLoopbackAddress(name);
}

/**
 * A state-changing request must come from a page of this origin. Browsers send Origin on every
 * cross-origin POST (and on same-origin ones); Referer is the fallback. Returns 'same',
 * 'cross', or 'absent' (no header: a non-browser client).
 */
export function requestOrigin(req: IncomingMessage, allowedOrigins: readonly string[]): 'same' | 'cross' | 'absent' {
  const origin = req.headers.origin;
  const referer = req.headers.referer;
  const claimed = typeof origin === 'string' && origin !== 'null' ? origin : typeof referer === 'string' ? referer : origin === 'null' ? 'null' : undefined;
  if (claimed === undefined) return 'absent';
  let url: URL;
  try {
    url = new URL(claimed);
  } catch {
    return 'cross';
  }
  if (allowedOrigins.includes(url.origin)) return 'same';
  return url.host === req.headers.host ? 'same' : 'cross';
}
