// createAdminHandler: the admin HTTP API and web panel as one Node `(req, res)` listener, usable
// with node:http, Express, Fastify or Hono under any base path. It authenticates, checks that
// state-changing requests come from this origin with a CSRF token, validates input, and maps
// errors to JSON.
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { DatabaseError, OptionsError, ReaError } from '../core/errors.js';
import { MAX_TIMER_MS } from '../core/options.js';
import { Authenticator, isLoopbackAddress, isLoopbackHost, parseCookies, requestOrigin, resolveAuth, SESSION_COOKIE, type AdminAuth, type Principal } from './auth.js';
import { errorResponse, forbidden, HttpError, localPath, readBody, redirect, securityHeaders, sendJson, sendText, unauthorized, type Body } from './http.js';
import { layout, html, type PageContext } from './html.js';
import { AdminMetrics } from './metrics.js';
import type { AdminBus, Route, RouteContext, RouteResult } from './route.js';

export interface AdminHandlerOptions {
  /** Credentials: `{ token }` (bearer, or basic with the token as password), `{ username, password }`
   *  (basic), or 'none' (loopback clients only). Default: `{ token: REA_ADMIN_TOKEN }`; without it, an error. */
  auth?: AdminAuth;
  /** The path the handler is mounted under when the framework does not strip it (node:http, Fastify, Hono). */
  basePath?: string;
  /** Extra origins allowed to POST (behind a proxy that rewrites Host), e.g. 'https://ops.example.com'. */
  allowedOrigins?: string[];
  /** /healthz answers without credentials (default true), for load balancers and orchestrators. */
  publicHealth?: boolean;
  /** A leader lease expired longer ago than this fails /healthz (default 30 s). */
  leaderGraceMs?: number;
  /** Overview page reload interval in seconds (default 5; at least 1; 0 turns it off). */
  refreshSeconds?: number;
  /**
   * /metrics includes this process's handler durations and webhook delivery counts (default true).
   * false where this process runs no handlers and no deliveries (a web server that only records):
   * there they would be zeros.
   */
  processMetrics?: boolean;
}

export type AdminHandler = ((req: IncomingMessage, res: ServerResponse, next?: (err?: unknown) => void) => void) & {
  /** Detach from the bus's lifecycle signals (metrics); the bus itself is the caller's. */
  close(): void;
};

interface Compiled {
  route: Route;
  segments: string[];
}

/**
 * The route table, imported on the first request rather than with rea: its ~30 modules (each
 * route's schemas are built as it loads) are of no use to a process that serves no panel.
 */
let routeTable: Promise<Compiled[]> | undefined;
function loadRoutes(): Promise<Compiled[]> {
  return (routeTable ??= import('./routes/index.js').then(({ routes }) =>
    routes.map((route) => ({ route, segments: route.path.split('/').filter(Boolean) }))));
}

export function createAdminHandler(bus: AdminBus, options: AdminHandlerOptions = {}): AdminHandler {
  if (!bus || typeof bus.overview !== 'function') throw new OptionsError('bus', 'pass a bus created with createBus()');
  checkOptionKeys(options);
  const auth = new Authenticator(resolveAuth(options.auth));
  const basePath = normalizeBase(options.basePath);
  const allowedOrigins = checkOrigins(options.allowedOrigins);
  const publicHealth = checkBoolean('publicHealth', options.publicHealth, true);
  const leaderGraceMs = checkNumber('leaderGraceMs', options.leaderGraceMs, 30_000);
  const refreshS = checkRefresh(options.refreshSeconds);
  const metrics = new AdminMetrics(bus, checkBoolean('processMetrics', options.processMetrics, true));
  // Loading from now on, so that the first request seldom waits for it.
  void loadRoutes().catch(() => {});

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const nonce = randomBytes(16).toString('base64');
    const url = new URL(req.url ?? '/', 'http://admin.invalid');
    // Express strips its mount path into req.baseUrl; other servers pass the full path.
    let path = url.pathname;
    let base = (req as { baseUrl?: string }).baseUrl ?? '';
    if (basePath && (path === basePath || path.startsWith(basePath + '/'))) {
      path = path.slice(basePath.length) || '/';
      base += basePath;
    }
    const isApi = path.startsWith('/api/') || path === '/api' || path === '/metrics' || path === '/healthz';
    securityHeaders(res, isApi ? "default-src 'none'; frame-ancestors 'none'" : csp(nonce));
    // A page's notice is shown only with its signature (checked once the principal is known), and
    // it is no filter: taken out of the query the page reads and of the login redirect's `next`.
    const notice = { text: url.searchParams.get(NOTICE), signature: url.searchParams.get(NOTICE_SIG) };
    if (!isApi) {
      url.searchParams.delete(NOTICE);
      url.searchParams.delete(NOTICE_SIG);
    }

    const method = (req.method ?? 'GET').toUpperCase();
    const compiled = await loadRoutes();
    const match = findRoute(compiled, method === 'HEAD' ? 'GET' : method, path);
    if (!match) {
      const allowed = compiled.filter((c) => matchSegments(c.segments, path)).map((c) => c.route.method);
      if (allowed.length) {
        res.setHeader('Allow', allowed.join(', '));
        return sendJson(res, 405, { error: { code: 'ERR_METHOD_NOT_ALLOWED', message: `use ${allowed.join(' or ')}` } });
      }
      return sendJson(res, 404, { error: { code: 'ERR_NOT_FOUND', message: `no admin route ${path}` } });
    }
    const { route, params } = match;
    const wantsForm = method === 'POST' && String(req.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded');

    const isPublic = route.access === 'public' || (route.path === '/healthz' && publicHealth);
    let principal: Principal | null = null;
    let stateChangeChecked = false;
    try {
      // Under auth 'none' the only gate is the network: loopback peers, and a loopback Host so
      // a DNS-rebinding page cannot reach us through a name it controls.
      if (auth.mode === 'none') {
        if (!isLoopbackAddress(req.socket.remoteAddress) || !isLoopbackHost(req.headers.host)) {
          throw forbidden("auth 'none' serves loopback clients only");
        }
        // A reverse proxy on this machine is a loopback peer, and one that passes its upstream's
        // name as Host (nginx's default, proxy_pass http://localhost:8787) a loopback Host too: the
        // whole network behind it was served as a local operator. Proxies mark what they forward.
        const via = PROXY_HEADERS.find((h) => req.headers[h] !== undefined);
        if (via) throw forbidden(`auth 'none' serves loopback clients only, and this request came through a proxy (${via}): give the admin credentials to serve through one`);
        principal = { via: 'loopback' };
      } else {
        const fromHeader = auth.checkHeader(req);
        if (fromHeader === false) throw unauthorized('wrong credentials');
        principal = fromHeader ?? await liveSession(auth.checkSession(parseCookies(req.headers.cookie)[SESSION_COOKIE]), isPublic);
      }
      if (!principal && !isPublic) {
        if (route.kind === 'page') {
          const next = path + url.search;
          return redirect(res, `${base}/login${next === '/' ? '' : `?next=${encodeURIComponent(next)}`}`);
        }
        throw unauthorized('credentials required: Authorization: Bearer <token>, basic auth, or a session from the login form');
      }

      const body: Body = method === 'POST' ? await readBody(req) : { kind: 'none' };
      if (method === 'POST') checkStateChange(req, body, principal, auth, allowedOrigins);
      stateChangeChecked = true;

      const page: PageContext = {
        base, nonce, path, csrf: principal ? auth.csrfToken(principal) : null,
        notice: !isApi && principal && notice.text !== null && auth.checkNotice(principal, notice.text, notice.signature) ? notice.text : null,
        loggedIn: principal?.via === 'session',
        refreshS: path === '/' && refreshS > 0 ? refreshS : null,
      };
      const ctx: RouteContext = {
        req, res, bus, params, query: url.searchParams, body, base, path, principal, auth, page, metrics, leaderGraceMs,
      };
      const result = await route.handle(ctx);
      const who = principal;
      const signed = (back: string, text: string) => (who ? withNotice(back, text, (t) => auth.noticeSignature(who, t)) : back);
      return send(res, result, wantsForm ? returnPath(body, base) : null, signed);
    } catch (thrown) {
      const err = explainDatabaseError(bus, thrown);
      // Expected refusals (HttpError, rea's typed errors) are the client's business; anything
      // else is a bug or an outage (a DatabaseError too) the operator should see, while the
      // client gets no internals.
      if (err instanceof DatabaseError) console.error(`rea admin: request failed: ${err.message}`);
      else if (!(err instanceof HttpError) && !(err instanceof ReaError)) console.error('rea admin: request failed', err);
      const { status, body } = errorResponse(err);
      if (status === 401) res.setHeader('WWW-Authenticate', 'Bearer realm="rea admin"');
      if (route.kind === 'page' && !wantsForm) {
        const ctx: PageContext = { base, nonce, path, csrf: null };
        res.statusCode = status;
        res.setHeader('Content-Type', 'text/html; charset=utf-8');
        return void res.end(layout(ctx, 'Error', html`<h1>${status}</h1><p>${body.error.message}</p><p><a href="${base}/">Back to the overview</a></p>`));
      }
      if (wantsForm && principal && stateChangeChecked && status < 500 && status !== 401 && status !== 403) {
        // A form whose input was refused: back to the page, with the reason shown.
        const back = returnPathFromRequest(req, base);
        const who = principal;
        if (back) return redirect(res, withNotice(back, `Refused: ${body.error.message}`, (t) => auth.noticeSignature(who, t)));
      }
      return sendJson(res, status, body);
    }
  }

  /**
   * A signed, unexpired session, unless it was logged out, in this process or any other serving
   * the panel on this database (one primary-key lookup). Where no credentials are needed (login,
   * a public /healthz), a lookup that fails reads as no session; elsewhere it fails the request
   * (a 503 when the database is down), as the request's own queries would.
   */
  async function liveSession(session: Principal | null, isPublic: boolean): Promise<Principal | null> {
    const record = session && auth.sessionRecord(session);
    if (!record) return session;
    try {
      return (await bus.driver.admin.adminSessionEnded({ id: record.id })) ? null : session;
    } catch (err) {
      if (isPublic) return null;
      throw err;
    }
  }

  const handler = ((req: IncomingMessage, res: ServerResponse) => {
    serve(req, res).catch((err) => {
      console.error('rea admin: response failed', err);
      if (!res.headersSent) sendJson(res, 500, { error: { code: 'ERR_INTERNAL', message: 'internal error' } });
      else res.destroy();
    });
  }) as AdminHandler;
  handler.close = () => metrics.close();
  return handler;
}

/** Headers a proxy adds to what it forwards (RFC 7239 Forwarded, the X-Forwarded family, X-Real-IP, Via). */
const PROXY_HEADERS = ['forwarded', 'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto', 'x-real-ip', 'via'] as const;

/**
 * Routes call the bus and its driver directly, and most of those calls pass on the driver's raw
 * error (pg's ECONNREFUSED, "relation does not exist"). Explaining it here, once for every route,
 * turns a database that is down, refusing or not migrated into the DatabaseError the API answers
 * with 503 ERR_DATABASE, and logs as one line instead of a stack per request.
 */
function explainDatabaseError(bus: AdminBus, err: unknown): unknown {
  if (err instanceof HttpError || err instanceof ReaError) return err;
  return bus.driver.explainError(err);
}

/**
 * Cross-site requests never change anything. Ambient credentials (a session cookie, the browser's
 * cached basic auth, or loopback under 'none') need a same-origin Origin/Referer; the cookie and
 * loopback cases also need the CSRF token. A bearer token cannot be ambient, but a request that
 * says it comes from another origin is refused all the same.
 */
function checkStateChange(req: IncomingMessage, body: Body, principal: Principal | null, auth: Authenticator, allowed: readonly string[]): void {
  const origin = requestOrigin(req, allowed);
  if (origin === 'cross') throw forbidden('cross-site request refused (Origin/Referer is not this admin)');
  if (!principal || principal.via === 'header' || principal.via === 'basic') return;
  if (origin !== 'same') throw forbidden('state-changing browser requests must carry an Origin or Referer of this admin');
  const header = req.headers['x-csrf-token'];
  const token = typeof header === 'string' ? header : body.kind === 'form' ? body.value.get('_csrf') ?? undefined
    : body.kind === 'json' && body.value && typeof body.value === 'object' ? (body.value as { _csrf?: string })._csrf : undefined;
  if (!auth.checkCsrf(principal, token)) throw forbidden('missing or wrong CSRF token (reload the page)');
}

function send(res: ServerResponse, result: RouteResult, formReturn: string | null, noticed: (path: string, notice: string) => string): void {
  if ('redirect' in result) {
    if (result.setCookie) res.setHeader('Set-Cookie', result.setCookie);
    return redirect(res, result.redirect);
  }
  if ('html' in result) return sendText(res, result.status ?? 200, 'text/html; charset=utf-8', result.html);
  if ('text' in result) return sendText(res, result.status ?? 200, result.contentType, result.text);
  if (formReturn !== null && 'json' in result && result.formPage) return sendText(res, 200, 'text/html; charset=utf-8', result.formPage(formReturn));
  if (formReturn !== null) return redirect(res, result.notice ? noticed(formReturn, result.notice) : formReturn);
  return sendJson(res, result.status ?? 200, result.json);
}

/** Where a panel form goes back to: its `_return` field, a path inside the admin only. */
function returnPath(body: Body, base: string): string {
  return base + (localPath(body.kind === 'form' ? body.value.get('_return') : null) ?? '/');
}

function returnPathFromRequest(req: IncomingMessage, base: string): string | null {
  const ref = req.headers.referer;
  if (!ref) return null;
  try {
    const u = new URL(ref);
    if (u.host !== req.headers.host || !u.pathname.startsWith(base)) return null;
    u.searchParams.delete(NOTICE);
    u.searchParams.delete(NOTICE_SIG);
    return localPath(u.pathname + u.search);
  } catch {
    return null;
  }
}

const NOTICE = 'notice';
const NOTICE_SIG = 'noticeSig';

/** `path` with a notice for the page it leads to, and the signature without which no page shows it. */
function withNotice(path: string, notice: string, sign: (text: string) => string): string {
  const u = new URL(path, 'http://x');
  const text = notice.slice(0, 300);
  u.searchParams.set(NOTICE, text);
  u.searchParams.set(NOTICE_SIG, sign(text));
  return u.pathname + u.search;
}

function csp(nonce: string): string {
  return [
    "default-src 'none'", `script-src 'nonce-${nonce}'`, `style-src 'nonce-${nonce}'`, "img-src 'self' data:",
    "form-action 'self'", "frame-ancestors 'none'", "base-uri 'none'", "connect-src 'self'",
  ].join('; ');
}

/**
 * Each extra origin as the browser sends it (https://ops.example.com). 'ops.example.com' threw a
 * bare TypeError (Invalid URL), and 'ops.example.com:443' parsed as a scheme with the origin
 * 'null', which no request matches: every panel action was refused as cross-site.
 */
export function checkOrigins(origins: unknown): string[] {
  if (origins === undefined) return [];
  if (!Array.isArray(origins)) throw new OptionsError('allowedOrigins', "must be an array of origins such as 'https://ops.example.com'");
  return origins.map((o, i) => {
    let url: URL | null = null;
    try {
      url = typeof o === 'string' ? new URL(o) : null;
    } catch {
      url = null;
    }
    if (!url || (url.protocol !== 'https:' && url.protocol !== 'http:') || url.pathname !== '/' || url.search || url.hash || url.username || url.password) {
      throw new OptionsError(`allowedOrigins[${i}]`, `must be an origin such as 'https://ops.example.com' (scheme, host and port only), not ${JSON.stringify(o)}`);
    }
    return url.origin;
  });
}

/**
 * Strict as the bus's options are: a misspelt `basepath` answered every request 404 (the mount
 * path was never stripped), and a misspelt `publichealth: false` left /healthz public.
 */
const OPTION_KEYS: readonly string[] = ['auth', 'basePath', 'allowedOrigins', 'publicHealth', 'leaderGraceMs', 'refreshSeconds', 'processMetrics'];
function checkOptionKeys(options: unknown): void {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) throw new OptionsError('createAdminHandler(options)', `must be an object { ${OPTION_KEYS.join(', ')} }`);
  const unknown = Object.keys(options).filter((key) => !OPTION_KEYS.includes(key));
  if (unknown.length > 0) throw new OptionsError('createAdminHandler(options)', `unknown option(s) ${unknown.join(', ')}; known: ${OPTION_KEYS.join(', ')}`);
}

/** A string 'false' (from an environment variable) is truthy: /healthz stayed public. */
function checkBoolean(field: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new OptionsError(field, `must be true or false, not ${JSON.stringify(value)}`);
  return value;
}

function checkNumber(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) throw new OptionsError(field, `must be a number ≥ 0, not ${JSON.stringify(value)}`);
  return value;
}

/**
 * Every open overview page reloads each refreshSeconds, and each load runs the overview's queries.
 * 0.001 reloaded it as fast as the browser could; past the ~24.8 days a browser timer holds, the
 * delay overflows and it fires at once, the same loop.
 */
const MAX_REFRESH_S = Math.floor(MAX_TIMER_MS / 1000);
function checkRefresh(value: unknown): number {
  const s = checkNumber('refreshSeconds', value, 5);
  if (s !== 0 && (s < 1 || s > MAX_REFRESH_S)) {
    throw new OptionsError('refreshSeconds', `must be from 1 to ${MAX_REFRESH_S} seconds (each reload of an open overview runs its queries), or 0 for no auto-refresh, not ${s}`);
  }
  return s;
}

function normalizeBase(p: string | undefined): string {
  if (p === undefined || p === '' || p === '/') return '';
  if (typeof p !== 'string' || !/^\/[A-Za-z0-9._~\-/]*$/.test(p)) throw new OptionsError('basePath', "must be a path such as '/admin'");
  return p.replace(/\/+$/, '');
}

function matchSegments(segments: string[], path: string): Record<string, string> | null {
  const parts = path.split('/').filter(Boolean);
  if (parts.length !== segments.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < parts.length; i++) {
    const s = segments[i]!;
    let part: string;
    try {
      part = decodeURIComponent(parts[i]!);
    } catch {
      return null;
    }
    if (s.startsWith(':')) params[s.slice(1)] = part;
    else if (s !== part) return null;
  }
  return params;
}

function findRoute(compiled: Compiled[], method: string, path: string): { route: Route; params: Record<string, string> } | null {
  for (const c of compiled) {
    if (c.route.method !== method) continue;
    const params = matchSegments(c.segments, path);
    if (params) return { route: c.route, params };
  }
  return null;
}
