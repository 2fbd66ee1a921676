// Small HTTP plumbing for the admin handler: bounded body reading (JSON or HTML form), typed
// request errors that become JSON error responses, and the security headers every response gets.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { DatabaseError, ReaError } from '../core/errors.js';

export const MAX_BODY_BYTES = 64 * 1024;

/** An error with an HTTP status and, for 400s, the parameter at fault. */
export class HttpError extends Error {
  constructor(readonly status: number, readonly code: string, message: string, readonly parameter?: string) {
    super(message);
    this.name = 'HttpError';
  }
}

export const badRequest = (parameter: string, problem: string) =>
  new HttpError(400, 'ERR_BAD_REQUEST', `invalid parameter ${parameter}: ${problem}`, parameter);
export const notFound = (what: string) => new HttpError(404, 'ERR_NOT_FOUND', `${what} not found`);
export const forbidden = (why: string) => new HttpError(403, 'ERR_FORBIDDEN', why);
export const unauthorized = (why: string) => new HttpError(401, 'ERR_UNAUTHORIZED', why);

export type Body = { kind: 'json'; value: unknown } | { kind: 'form'; value: URLSearchParams } | { kind: 'none' };

export async function readBody(req: IncomingMessage): Promise<Body> {
  // Express with a body parser (or another framework) may have read the stream already.
  const pre = (req as { body?: unknown }).body;
  const type = String(req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (pre !== undefined && (req as { readableEnded?: boolean }).readableEnded) {
    if (type === 'application/x-www-form-urlencoded' && pre && typeof pre === 'object') {
      return { kind: 'form', value: new URLSearchParams(pre as Record<string, string>) };
    }
    return pre === null || (typeof pre === 'object' && Object.keys(pre as object).length === 0)
      ? { kind: 'none' }
      : { kind: 'json', value: pre };
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, 'ERR_BODY_TOO_LARGE', `request body over ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return { kind: 'none' };
  if (type === 'application/x-www-form-urlencoded') return { kind: 'form', value: new URLSearchParams(text) };
  if (type === 'application/json' || type === '') {
    try {
      return { kind: 'json', value: JSON.parse(text) };
    } catch {
      throw badRequest('body', 'is not valid JSON');
    }
  }
  throw new HttpError(415, 'ERR_UNSUPPORTED_MEDIA_TYPE', `send application/json or an HTML form, not ${type}`);
}

/** Headers on every response: nothing is cached, framed, sniffed, or leaks its URL cross-site. */
export function securityHeaders(res: ServerResponse, csp: string | null): void {
  res.setHeader('Cache-Control', 'no-store');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('X-Frame-Options', 'DENY');
  // same-origin keeps Referer on our own form posts (a fallback for the Origin check) and drops it elsewhere.
  res.setHeader('Referrer-Policy', 'same-origin');
  res.setHeader('Cross-Origin-Opener-Policy', 'same-origin');
  res.setHeader('Cross-Origin-Resource-Policy', 'same-origin');
  if (csp) res.setHeader('Content-Security-Policy', csp);
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body, (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(text));
  res.end(text);
}

export function sendText(res: ServerResponse, status: number, contentType: string, text: string): void {
  res.statusCode = status;
  res.setHeader('Content-Type', contentType);
  res.setHeader('Content-Length', Buffer.byteLength(text));
  res.end(text);
}

/**
 * `p` as a path of this host for a Location header, or null when it is none. It is normalized as
 * the browser will read it ('/.//evil.example' and '/a/..//evil.example' are '//evil.example',
 * another host) and percent-encoded (a raw non-ASCII character is no valid header value: Node
 * threw ERR_INVALID_CHAR, a 500), then checked again.
 */
export function localPath(p: string | null | undefined): string | null {
  if (!p || !/^\/(?![/\\])/.test(p)) return null;
  let u: URL;
  try {
    u = new URL(p, 'http://admin.invalid');
  } catch {
    return null;
  }
  const out = u.pathname + u.search;
  return u.origin === 'http://admin.invalid' && /^\/(?![/\\])/.test(out) ? out : null;
}

export function redirect(res: ServerResponse, location: string): void {
  res.statusCode = 303;
  res.setHeader('Location', location);
  res.setHeader('Content-Length', 0);
  res.end();
}

const DATABASE_PROBLEM: Record<DatabaseError['kind'], string> = {
  'unreachable': 'the database does not answer; try again shortly',
  'refused': 'the database refused rea\'s connection',
  'not-migrated': "rea's tables are not in this schema yet: run the migrations",
  'too-new': 'a newer rea migrated this schema in a way this rea must not run against: upgrade it',
  'locked': 'the embedded database is open in another process',
  'pooler': 'a pooler in transaction mode sits between rea and the database, and rea was not told (database.pooler)',
};

/**
 * The bus names an input by its call and place (endpoints.create.eventTypes[0]); the API names
 * the body parameter that carried it (eventTypes), as its own 400s do. Other fields stay as they are.
 */
function parameterOf(field: string | undefined): string | undefined {
  return field === undefined ? undefined : /^[a-z]+\.[A-Za-z]+\.([A-Za-z]+)(\[\d+\])?$/.exec(field)?.[1] ?? field;
}

/** Map anything a route throws to a status and a JSON error body; internals never leak. */
export function errorResponse(err: unknown): { status: number; body: { error: { code: string; message: string; parameter?: string } } } {
  if (err instanceof HttpError) {
    return { status: err.status, body: { error: { code: err.code, message: err.message, ...(err.parameter ? { parameter: err.parameter } : {}) } } };
  }
  if (err instanceof DatabaseError) {
    // Which server and user is the operator's business (the process log has it), not the API's.
    return { status: 503, body: { error: { code: err.code, message: DATABASE_PROBLEM[err.kind] } } };
  }
  if (err instanceof ReaError) {
    const parameter = (err as { parameter?: string }).parameter ?? parameterOf((err as { field?: string }).field);
    const status = err.code === 'ERR_NOT_FOUND' ? 404 : 400;
    return { status, body: { error: { code: err.code, message: err.message, ...(parameter ? { parameter } : {}) } } };
  }
  return { status: 500, body: { error: { code: 'ERR_INTERNAL', message: 'internal error (see the server log)' } } };
}
