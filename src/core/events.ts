// The event catalog: one Standard Schema (zod, valibot, arktype…) per event type. Payload types
// flow from it into record() and into handlers, including handlers subscribed by pattern.
import type { StandardSchemaV1 } from '@standard-schema/spec';
import { OptionsError, PayloadValidationError, type PayloadIssue } from './errors.js';

export type EventSchemas = Record<string, StandardSchemaV1>;

export interface EventCatalog<S extends EventSchemas = EventSchemas> {
  readonly schemas: S;
  readonly types: readonly (keyof S & string)[];
}

const TYPE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$/;
export const EVENT_TYPE_RULE = 'an event type is 1–200 characters of letters, digits, _ . : - and starts with a letter or digit';

/** Whether `type` can be defined in a catalog (and so be subscribed to by a handler). */
export function isEventTypeName(type: string): boolean {
  return TYPE_NAME.test(type);
}

export function defineEvents<S extends EventSchemas>(schemas: S): EventCatalog<S> {
  for (const [type, schema] of Object.entries(schemas)) {
    if (!TYPE_NAME.test(type)) {
      throw new OptionsError(`events['${type}']`, EVENT_TYPE_RULE);
    }
    if (!schema || typeof (schema as StandardSchemaV1)['~standard']?.validate !== 'function') {
      throw new OptionsError(`events['${type}']`, 'is not a Standard Schema (zod ≥ 3.24, valibot ≥ 1, arktype ≥ 2 …)');
    }
  }
  return { schemas, types: Object.keys(schemas) as (keyof S & string)[] };
}

export type EventType<S extends EventSchemas> = keyof S & string;
export type PayloadInput<S extends EventSchemas, T extends EventType<S>> = StandardSchemaV1.InferInput<S[T]>;
export type PayloadOutput<S extends EventSchemas, T extends EventType<S>> = StandardSchemaV1.InferOutput<S[T]>;

/**
 * The event types a subscription pattern matches: 'order.created', 'order.*', '*', and a '*'
 * anywhere ('*.paid', 'order.*.v2'), as patternMatches and the relay's LIKE route them. Only a
 * trailing '*' used to be read: a handler on '*.paid' ran on every '….paid' event, but was typed
 * as receiving none (its event was `never`).
 */
export type MatchingTypes<S extends EventSchemas, P extends string> = P extends EventType<S> ? P : Extract<EventType<S>, PatternShape<P>>;

/**
 * The patterns of P that match none of the catalog's types (a typo, 'order.crated'), or `never`.
 * bus.on() takes its name as `no event type matches '…'` while there is one, so such a pattern
 * does not compile, with a message that names it, as it is an UnknownEventTypeError at run time.
 * Distributes over a union, so each pattern of a list is checked on its own. A plain `string`
 * passes (checked at run time only).
 */
export type UnmatchedPattern<S extends EventSchemas, P extends string> = P extends string ? ([MatchingTypes<S, P>] extends [never] ? P : never) : never;

/**
 * What bus.on() takes as its name for patterns P. For literal patterns: any string, or, while one
 * of them matches no type, only `no event type matches '…'` (the union's second member is then
 * `never`). For a type parameter P (a generic wrapper around bus.on), the conditional types above
 * cannot be resolved and neither member would take a string, but the compiler checks a string
 * against NameSlot[PatternVerdict<S, P>] with P's constraint in its place: any string when every
 * type of the constraint is matched.
 */
export type HandlerName<S extends EventSchemas, P extends string> =
  | `no event type matches '${UnmatchedPattern<S, P>}'`
  | NameSlot[PatternVerdict<S, P>];

/**
 * 'ok' for a pattern that matches a type, `string` for one that does not (so a list with a typo is
 * `string`, a key of NameSlot's `never` only). The emptiness test is a separate alias: written in
 * place (`[…] extends [never] ? …`), the constraint the compiler computes for a type parameter
 * keeps both branches.
 */
type PatternVerdict<S extends EventSchemas, P extends string> = P extends string ? (IsNever<MatchingTypes<S, P>> extends true ? string : 'ok') : never;
type IsNever<X> = [X] extends [never] ? true : false;
type NameSlot = { ok: string } & { [verdict: string]: never };

/** A pattern as a template literal type: each '*' becomes `${string}` (which, like '*', matches ''). */
type PatternShape<P extends string> = P extends `${infer Head}*${infer Tail}` ? `${Head}${string}${PatternShape<Tail>}` : P;

/** An event as a handler receives it; a union over the types its patterns match. */
export type ReaEvent<S extends EventSchemas, T extends EventType<S> = EventType<S>> = T extends EventType<S>
  ? {
      readonly id: string;
      readonly type: T;
      readonly subject: string | null;
      readonly payload: PayloadOutput<S, T>;
      readonly traceId: string | null;
      readonly createdBy: string | null;
      readonly version: number;
      readonly createdAt: Date;
    }
  : never;

export function patternMatches(pattern: string, type: string): boolean {
  if (!pattern.includes('*')) return pattern === type;
  const parts = pattern.split('*');
  let at = 0;
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    if (i === 0) {
      if (!type.startsWith(part)) return false;
      at = part.length;
    } else if (i === parts.length - 1) {
      return type.length - part.length >= at && type.endsWith(part);
    } else {
      const found = type.indexOf(part, at);
      if (found < 0) return false;
      at = found + part.length;
    }
  }
  return true;
}

export async function validatePayload(catalog: EventCatalog, type: string, payload: unknown): Promise<unknown> {
  const schema = catalog.schemas[type]!;
  let result = schema['~standard'].validate(payload);
  if (result instanceof Promise) result = await result;
  if (result.issues) throw new PayloadValidationError(type, result.issues.map(toIssue));
  return result.value;
}

function toIssue(issue: StandardSchemaV1.Issue): PayloadIssue {
  const path = (issue.path ?? [])
    .map((seg) => (typeof seg === 'object' && seg !== null ? (seg as StandardSchemaV1.PathSegment).key : seg))
    .map((key, i) => (typeof key === 'number' ? `[${key}]` : i === 0 ? String(key) : `.${String(key)}`))
    .join('');
  return { path, message: issue.message };
}
