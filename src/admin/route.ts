// What a route is: method, path pattern, who may call it, and a handler from a request context
// to a result. Input is validated with zod; a failure is a 400 naming the parameter.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { z } from 'zod';
import type { Bus } from '../bus.js';
import type { EventSchemas } from '../core/events.js';
import type { Authenticator, Principal } from './auth.js';
import { badRequest, type Body } from './http.js';
import type { PageContext } from './html.js';
import type { AdminMetrics } from './metrics.js';

/**
 * The bus as the admin sees it: everything but the calls typed by the event catalog (record,
 * recordMany, on), which make Bus<S> invariant in S. Any bus, whatever its events, is one.
 */
export type AdminBus = Omit<Bus<EventSchemas>, 'on' | 'record' | 'recordMany'>;

export interface RouteContext {
  req: IncomingMessage;
  res: ServerResponse;
  bus: AdminBus;
  params: Record<string, string>;
  query: URLSearchParams;
  body: Body;
  /** The mount path links start with ('' or '/admin'). */
  base: string;
  /** The path inside the mount ('/events/…'). */
  path: string;
  principal: Principal | null;
  auth: Authenticator;
  page: PageContext;
  metrics: AdminMetrics;
  /** Leader lease older than this (after expiry) fails /healthz. */
  leaderGraceMs: number;
}

export type RouteResult =
  // A panel form post is answered with a redirect back (with the notice), or, with `formPage`, with
  // that page instead: for answers a redirect would lose, such as a secret shown once.
  | { json: unknown; status?: number; notice?: string; formPage?: (returnTo: string) => string }
  | { html: string; status?: number }
  | { redirect: string; setCookie?: string }
  | { text: string; contentType: string; status?: number };

export interface Route {
  method: 'GET' | 'POST';
  /** Segments starting with ':' capture a parameter. */
  path: string;
  /** 'public' routes answer without credentials (health check, login). */
  access: 'public' | 'user';
  /** 'page' answers HTML and sends the unauthenticated to the login form; 'api' answers JSON and 401. */
  kind: 'api' | 'page';
  handle(ctx: RouteContext): Promise<RouteResult>;
}

export function defineRoute(route: Route): Route {
  return route;
}

/** The body's fields as a plain object: JSON as sent; form fields with repeated names as arrays. */
export function bodyFields(body: Body): Record<string, unknown> {
  if (body.kind === 'none') return {};
  if (body.kind === 'json') {
    if (body.value === null || typeof body.value !== 'object' || Array.isArray(body.value)) throw badRequest('body', 'must be a JSON object');
    // The handler takes a session's CSRF token from a JSON body too: transport, not input (the
    // strict schemas refused it as an unknown parameter after the check had let it pass).
    const { _csrf: _, ...fields } = body.value as Record<string, unknown>;
    return fields;
  }
  const out: Record<string, unknown> = {};
  for (const key of new Set(body.value.keys())) {
    if (key.startsWith('_')) continue; // _csrf, _return: transport, not input
    const all = body.value.getAll(key);
    out[key] = all.length > 1 || key.endsWith('[]') ? all : all[0];
  }
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k.replace(/\[\]$/, ''), v]));
}

/**
 * Query parameters as an object; empty values are absent (an empty filter field means "any"). A
 * filter takes one value: a second one (?state=discarded&state=cancelled) is refused by name, where
 * it was dropped and the answer looked like the list of both.
 */
export function queryFields(query: URLSearchParams): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of query) {
    if (v === '') continue;
    if (Object.hasOwn(out, k)) throw badRequest(k, 'is given more than once: a filter takes one value');
    out[k] = v;
  }
  return out;
}

export function parse<T extends z.ZodType>(schema: T, input: unknown): z.output<T> {
  const r = schema.safeParse(input);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  // An unknown parameter is named itself, so a typo (?stat=…) is not silently ignored.
  if (issue.code === 'unrecognized_keys') throw badRequest(String(issue.keys[0]), 'is not a known parameter');
  // The parameter is the top-level name (ids), the message says where inside it (ids.0).
  const parameter = issue.path.length ? String(issue.path[0]) : 'body';
  const where = issue.path.length > 1 ? ` (at ${issue.path.map(String).join('.')})` : '';
  throw badRequest(parameter, `${issue.message}${where}`);
}
