// One webhook HTTP attempt, turned into an outcome the worker can act on. The host is
// resolved once and every address vetted; the socket then connects only to those addresses
// (the connector's lookup is pinned), so a DNS answer that changes in between cannot steer it.
import { lookup as dnsLookup } from 'node:dns/promises';
import type { LookupFunction } from 'node:net';
import { createRequire } from 'node:module';
import type * as Undici from 'undici';
import { assertUrlAllowed, checkAddress, type AddressPolicy, type CheckedUrl } from './address.js';
import { OptionsError } from '../../core/errors.js';
import { storable } from '../../core/errors-format.js';
import { WebhookUrlRefusedError } from './errors.js';
import { parseRetryAfter, WEBHOOK_MAX_RETRY_AFTER_MS } from './retry.js';

// undici is loaded on the first delivery: it costs ~20 MB of memory that a process which never
// delivers a webhook (a recorder, a handler-only worker) should not pay.
let undici: typeof Undici | undefined;
const loadUndici = () => (undici ??= createRequire(import.meta.url)('undici') as typeof Undici);

export const WEBHOOK_CONNECT_TIMEOUT_MS = 5_000;
/** The whole attempt: DNS, connect, request, response headers and the body read. */
export const WEBHOOK_TIMEOUT_MS = 15_000;
/** Response bytes read at most; the rest is not read and the connection is dropped. */
export const WEBHOOK_MAX_RESPONSE_BYTES = 64 * 1024;
/**
 * How long the body is read once the status line is in: the status is the receiver's answer, and a
 * body that trickles (a 200, then a byte every 200 ms) held the delivery's slot until timeoutMs.
 * What arrived by then is kept for the excerpt; the connection is dropped.
 */
export const WEBHOOK_BODY_READ_MS = 1_000;
/** Response bytes kept as the attempt log's excerpt. */
export const WEBHOOK_EXCERPT_BYTES = 1024;
export const WEBHOOK_USER_AGENT = 'rea-webhooks';

export interface ResolvedAddress {
  address: string;
  family: number;
}

/** Resolves a host name to all its addresses; the default is the system resolver (dns.lookup). */
export type Resolver = (hostname: string) => Promise<readonly ResolvedAddress[]>;

export interface DeliverOptions extends AddressPolicy {
  url: string;
  /** Sent as given (signature headers, content type…), except hop-by-hop ones and Host. */
  headers: Readonly<Record<string, string>>;
  body: string | Uint8Array;
  /** Default WEBHOOK_CONNECT_TIMEOUT_MS. */
  connectTimeoutMs?: number;
  /** Default WEBHOOK_TIMEOUT_MS. */
  timeoutMs?: number;
  /** Default WEBHOOK_MAX_RESPONSE_BYTES. */
  maxResponseBytes?: number;
  /** Default WEBHOOK_EXCERPT_BYTES. */
  excerptBytes?: number;
  /** Upper bound for a Retry-After; default WEBHOOK_MAX_RETRY_AFTER_MS (24 h). */
  maxRetryAfterMs?: number;
  /** Aborts the attempt (e.g. the job's own abort); reported as a failure. */
  signal?: AbortSignal;
  /** Replaces the system resolver; for tests and custom DNS. */
  resolve?: Resolver;
  /** Clock for Retry-After dates, in ms. Default Date.now. */
  now?: () => number;
}

/**
 * success: 2xx. gone: 410, the endpoint asks to be disabled. throttled: 429/503 with a
 * readable Retry-After (`retryAfterMs`). refused: the SSRF guard refused the URL or an
 * address it resolves to; permanent. failure: anything else, retry on the schedule.
 */
export type DeliveryOutcome = 'success' | 'failure' | 'gone' | 'throttled' | 'refused';

export interface DeliveryResult {
  outcome: DeliveryOutcome;
  status?: number;
  durationMs: number;
  /** The first WEBHOOK_EXCERPT_BYTES of the response body, as text. */
  responseExcerpt: string;
  /** Response body bytes taken off the connection (at most maxResponseBytes plus one chunk). */
  responseBytes: number;
  /** True when the body was longer than maxResponseBytes and reading stopped there. */
  truncated: boolean;
  retryAfterMs?: number;
  /** What went wrong, in words; never a header, a secret or the request body. */
  error?: string;
  /** The vetted addresses the connection was allowed to use. */
  addresses?: string[];
}

// Headers the caller may not set: they belong to the connection, and Host must stay the URL's host.
const DROPPED_HEADERS = new Set(['host', 'content-length', 'connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'te', 'trailer', 'proxy-connection', 'expect']);

const DEADLINE = Symbol('deadline');

function positive(name: string, v: number | undefined, fallback: number): number {
  const n = v ?? fallback;
  if (!Number.isFinite(n) || n <= 0) throw new OptionsError(name, `must be a positive number, got ${n}`);
  return n;
}

async function systemResolve(hostname: string): Promise<ResolvedAddress[]> {
  return dnsLookup(hostname, { all: true, verbatim: true });
}

// net.connect's lookup, answering only with addresses that were already vetted.
function pinnedLookup(vetted: readonly ResolvedAddress[]): LookupFunction {
  return (_hostname, options, callback) => {
    const want = options.family === 4 || options.family === 6 ? options.family : 0;
    const list = want ? vetted.filter((a) => a.family === want) : [...vetted];
    const first = list[0];
    if (!first) {
      callback(Object.assign(new Error(`no vetted IPv${want} address`), { code: 'ENOTFOUND' }), '', 0);
    } else if (options.all) {
      callback(null, list);
    } else {
      callback(null, first.address, first.family);
    }
  };
}

function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

function errorCode(err: unknown): string | undefined {
  let e: unknown = err;
  for (let depth = 0; depth < 4 && e && typeof e === 'object'; depth++) {
    if (e instanceof AggregateError && e.errors.length) e = e.errors[0];
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && code !== 'UND_ERR_SOCKET' && code !== 'UND_ERR') return code;
    e = (e as { cause?: unknown }).cause;
  }
  const top = (err as { code?: unknown } | null)?.code;
  return typeof top === 'string' ? top : undefined;
}

// Words from error codes only: undici and Node messages are safe today, but a message built
// from codes can never echo a header, a URL's query or a body back into the attempt log.
function describeError(err: unknown, ctx: { deadline: AbortSignal; caller?: AbortSignal; timeoutMs: number; connectTimeoutMs: number }): string {
  if (ctx.deadline.aborted) return `timed out after ${ctx.timeoutMs} ms`;
  if (ctx.caller?.aborted) return 'aborted before the endpoint answered';
  const code = errorCode(err);
  switch (code) {
    case 'UND_ERR_CONNECT_TIMEOUT':
      return `connect timed out after ${ctx.connectTimeoutMs} ms`;
    case 'UND_ERR_HEADERS_TIMEOUT':
    case 'UND_ERR_BODY_TIMEOUT':
      return `timed out after ${ctx.timeoutMs} ms`;
    case 'ECONNREFUSED':
      return 'connection refused (ECONNREFUSED)';
    case 'ECONNRESET':
      return 'connection reset by the endpoint (ECONNRESET)';
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_FAIL':
    case 'ENODATA':
      return `host name did not resolve (${code})`;
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return `endpoint unreachable (${code})`;
    case 'UND_ERR_CLOSED':
    case 'UND_ERR_SOCKET':
      return 'connection closed by the endpoint';
    default:
      if (code && /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_|HOSTNAME_MISMATCH)/.test(code)) return `TLS failed (${code})`;
      return code ? `request failed (${code})` : `request failed (${err instanceof Error ? err.name : typeof err})`;
  }
}

function outgoingHeaders(given: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(given)) {
    const key = k.toLowerCase();
    if (!DROPPED_HEADERS.has(key) && typeof v === 'string') out[key] = v;
  }
  out['content-type'] ??= 'application/json';
  out['user-agent'] ??= WEBHOOK_USER_AGENT;
  return out;
}

function excerptText(bytes: Buffer): string {
  // A cut in the middle of a UTF-8 character decodes to U+FFFD; drop that last half-character.
  // NUL is valid UTF-8 but no text column holds it: storable() makes it U+FFFD too.
  return storable(new TextDecoder('utf-8', { fatal: false }).decode(bytes).replace(/\uFFFD$/, ''));
}

/** Makes one delivery attempt. Never throws for anything the endpoint or the network does. */
export async function deliver(options: DeliverOptions): Promise<DeliveryResult> {
  const started = performance.now();
  const connectTimeoutMs = positive('connectTimeoutMs', options.connectTimeoutMs, WEBHOOK_CONNECT_TIMEOUT_MS);
  const timeoutMs = positive('timeoutMs', options.timeoutMs, WEBHOOK_TIMEOUT_MS);
  const maxResponseBytes = positive('maxResponseBytes', options.maxResponseBytes, WEBHOOK_MAX_RESPONSE_BYTES);
  const excerptBytes = Math.min(positive('excerptBytes', options.excerptBytes, WEBHOOK_EXCERPT_BYTES), maxResponseBytes);
  const maxRetryAfterMs = positive('maxRetryAfterMs', options.maxRetryAfterMs, WEBHOOK_MAX_RETRY_AFTER_MS);
  const policy: AddressPolicy = { allowPrivateNetworks: options.allowPrivateNetworks ?? false, allowlist: options.allowlist ?? [] };
  const elapsed = () => Math.round(performance.now() - started);
  const empty = { responseExcerpt: '', responseBytes: 0, truncated: false };
  const refused = (err: WebhookUrlRefusedError): DeliveryResult => ({ outcome: 'refused', durationMs: elapsed(), ...empty, error: err.message });

  let checked: CheckedUrl;
  try {
    checked = assertUrlAllowed(options.url, policy);
  } catch (err) {
    if (err instanceof WebhookUrlRefusedError) return refused(err);
    throw err; // a bad allowlist entry: the caller's configuration, not the endpoint
  }

  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(DEADLINE), timeoutMs);
  const signal = options.signal ? AbortSignal.any([options.signal, deadline.signal]) : deadline.signal;
  const errCtx = { deadline: deadline.signal, caller: options.signal, timeoutMs, connectTimeoutMs };
  let agent: Undici.Agent | undefined;
  try {
    let vetted: ResolvedAddress[];
    if (checked.literal) {
      vetted = [{ address: checked.literal.address, family: checked.literal.family }];
    } else {
      let answers: readonly ResolvedAddress[];
      try {
        answers = await abortable((options.resolve ?? systemResolve)(checked.hostname), signal);
      } catch (err) {
        return { outcome: 'failure', durationMs: elapsed(), ...empty, error: describeError(err, errCtx) };
      }
      if (answers.length === 0) return { outcome: 'failure', durationMs: elapsed(), ...empty, error: 'host name resolved to no address' };
      vetted = [];
      for (const a of answers) {
        let verdict: ReturnType<typeof checkAddress>;
        try {
          verdict = checkAddress(a.address, { ...policy, host: checked.hostname }, checked.allowlist);
        } catch {
          return { outcome: 'failure', durationMs: elapsed(), ...empty, error: 'resolver returned something that is not an IP address' };
        }
        // One bad address refuses the host: a name that mixes public and internal answers is an attack or a mistake.
        if (!verdict.allowed) {
          return refused(new WebhookUrlRefusedError('address', verdict.reason, checked.url.hostname, verdict.class.address, verdict.class.kind));
        }
        vetted.push({ address: verdict.class.address, family: verdict.class.family });
      }
    }
    const addresses = vetted.map((a) => a.address);

    const { Agent, request } = loadUndici();
    agent = new Agent({
      connect: { timeout: connectTimeoutMs, lookup: pinnedLookup(vetted) },
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      connections: 1,
      pipelining: 0,
    });

    let res: Awaited<ReturnType<typeof Undici.request>>;
    try {
      res = await request(checked.url, {
        method: 'POST',
        headers: outgoingHeaders(options.headers),
        body: typeof options.body === 'string' ? options.body : Buffer.from(options.body),
        dispatcher: agent,
        signal,
      });
    } catch (err) {
      return { outcome: 'failure', durationMs: elapsed(), ...empty, error: describeError(err, errCtx), addresses };
    }

    const status = res.statusCode;
    const kept: Buffer[] = [];
    let keptBytes = 0;
    let responseBytes = 0;
    let truncated = false;
    let bodyError: string | undefined;
    let bodyCut = false;
    const bodyTimer = setTimeout(() => {
      bodyCut = true;
      res.body.destroy(); // ends the loop below; the agent's connection goes with it
    }, WEBHOOK_BODY_READ_MS);
    try {
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        responseBytes += chunk.length;
        if (keptBytes < excerptBytes) {
          const part = chunk.subarray(0, excerptBytes - keptBytes);
          kept.push(part);
          keptBytes += part.length;
        }
        if (responseBytes > maxResponseBytes) {
          truncated = true;
          break; // leaving the loop destroys the body stream and with it the connection
        }
      }
    } catch (err) {
      if (!bodyCut) bodyError = `response body incomplete: ${describeError(err, errCtx)}`;
    } finally {
      clearTimeout(bodyTimer);
    }
    const base = {
      status,
      durationMs: elapsed(),
      responseExcerpt: excerptText(Buffer.concat(kept)),
      responseBytes,
      truncated,
      addresses,
    };

    // The status line is the receiver's answer; a slow or cut body after it (at WEBHOOK_BODY_READ_MS,
    // maxResponseBytes or the timeout) only shortens the excerpt.
    if (status >= 200 && status < 300) return { outcome: 'success', ...base };
    if (status === 410) return { outcome: 'gone', ...base };
    if (status === 429 || status === 503) {
      const retryAfterMs = parseRetryAfter(res.headers['retry-after'], (options.now ?? Date.now)(), maxRetryAfterMs);
      if (retryAfterMs !== undefined) return { outcome: 'throttled', ...base, retryAfterMs };
    }
    const what = status >= 300 && status < 400 ? `redirect (HTTP ${status}) not followed` : `HTTP ${status}`;
    return { outcome: 'failure', ...base, error: bodyError ? `${what}; ${bodyError}` : what };
  } finally {
    clearTimeout(timer);
    if (agent) await agent.destroy().catch(() => {});
  }
}
