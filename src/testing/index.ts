// rea/testing: helpers for the application's own tests. Assert what a transaction recorded, and
// run one handler directly, without the relay or a worker.
import type { Bus } from '../bus.js';
import type { EventSchemas, EventType, PayloadInput, PayloadOutput } from '../core/events.js';
import { OptionsError } from '../core/errors.js';
import { patternMatches } from '../core/events.js';
import { LazyLogger } from '../core/logger.js';
import { jobLogLine, JobTraceScope, runInTrace } from '../core/trace.js';
import { uuidv7 } from '../core/uuid.js';
import type { EventRow } from '../driver/types.js';
import { isReaTransaction } from '../tx/rea.js';
import { JobAbort } from '../worker/abort.js';
import type { HandlerContext } from '../worker/registry.js';
import { HandlerTimeoutError } from '../worker/worker.js';

// What runHandlerNow rejects with at the handler's timeout (also exported by 'rea').
export { HandlerTimeoutError };

/** The events recorded so far in `tx` (still uncommitted), oldest first. */
export async function recordedIn(bus: Bus<any>, tx: unknown): Promise<EventRow[]> {
  return listRecorded(bus, tx, 'recordedIn()');
}

/** recordedIn's list; a handle that is no open transaction is refused naming `caller`, the helper the test called. */
function listRecorded(bus: Bus<any>, tx: unknown, caller: string): Promise<EventRow[]> {
  return bus.driver.executor.eventListInCurrentTransaction(bus.driver.unwrapTransaction(tx, caller));
}

/**
 * What expectRecorded matches a payload against: any part of it, at any depth, as the match is
 * made (an object's properties may be left out, nested ones too; an array's items are matched
 * from its first).
 */
export type PartialPayload<T> = T extends readonly (infer U)[]
  ? readonly PartialPayload<U>[]
  : T extends object ? { [K in keyof T]?: PartialPayload<T[K]> } : T;

/**
 * Throws unless `tx` recorded an event of `type` whose payload contains `payload` (a partial match).
 * Returns the matching event.
 */
export async function expectRecorded<S extends EventSchemas, T extends EventType<S>>(
  bus: Bus<S>, tx: unknown, type: T, payload?: PartialPayload<PayloadOutput<S, T>>,
): Promise<EventRow> {
  const rows = await listRecorded(bus, tx, 'expectRecorded()');
  const found = rows.find((r) => r.type === type && (payload === undefined || containsPartial(r.payload, payload)));
  if (!found) {
    const seen = rows.map((r) => `${r.type} ${JSON.stringify(r.payload)}`).join('\n  ') || '(none)';
    throw new Error(`expected this transaction to record '${type}'${payload ? ` with ${JSON.stringify(payload)}` : ''}; it recorded:\n  ${seen}`);
  }
  return found;
}

/**
 * An event for runHandlerNow, typed as record() takes one: a type of the bus's catalog and a
 * payload of that type's schema (its input, before defaults and transforms).
 */
export type TestEvent<S extends EventSchemas> = {
  [T in EventType<S>]: { type: T; payload: PayloadInput<S, T>; id?: string; subject?: string | null; traceId?: string | null };
}[EventType<S>];

/**
 * Run the handler registered as `name` on `event` now, in-process, as a worker would: the event
 * must be of a type it subscribes to, its payload is checked and stored as record() would (a
 * schema's defaults and transforms applied, read back from JSON), it gets a new id if it has none,
 * it runs inside the event's trace (so events it records inherit the trace id; ctx.log carries it,
 * to the bus's logger), and ctx.signal aborts at the handler's timeoutMs, when the run fails with
 * HandlerTimeoutError. With `transactional`, pass a transaction as `tx` (bus.transaction gives
 * one). Throws what the handler throws.
 */
export async function runHandlerNow<S extends EventSchemas>(
  bus: Bus<S>,
  name: string,
  event: TestEvent<S>,
  options: { attempt?: number; tx?: unknown; signal?: AbortSignal } = {},
): Promise<void> {
  const handler = bus.handler(name);
  if (!handler) throw new OptionsError('runHandlerNow(name)', `no handler named '${name}' is registered on this bus`);
  if (handler.transactional && !isReaTransaction(options.tx)) {
    throw new OptionsError('runHandlerNow(options).tx', `handler '${name}' is transactional: pass { tx } from bus.transaction()`);
  }
  // A worker gives a plain handler no ctx.tx: handed one here, a handler that writes through
  // ctx.tx when it has one passed its test and took another path in production.
  if (!handler.transactional && options.tx !== undefined) {
    throw new OptionsError('runHandlerNow(options).tx', `handler '${name}' is not transactional: a worker runs it with no ctx.tx, so runHandlerNow takes no { tx } for it (register it with { transactional: true } to run it in one)`);
  }
  if (!handler.patterns.some((p) => patternMatches(p, event.type))) {
    throw new OptionsError('runHandlerNow(event).type', `handler '${name}' does not subscribe to '${event.type}' (its patterns: ${handler.patterns.join(', ')}): no worker would run it on this event`);
  }
  const payload = await bus.deliveredPayload(event.type, event.payload);
  // A new id for each event, as record() gives: with one fixed id, every call without an id or a
  // trace id ran in the same trace (made from the id), and so did the events its handler recorded.
  const id = event.id ?? uuidv7();
  const attempt = options.attempt ?? 1;
  const scope = new JobTraceScope(event.traceId ?? null, id, name, attempt);
  const jobId = nextTestJobId();
  const log = new LazyLogger(bus.logger, () => ({ event_id: id, handler: name, attempt, job_id: jobId }), jobLogLine(scope));
  const abort = new JobAbort();
  const timer = setTimeout(() => abort.abort(new HandlerTimeoutError(handler.timeoutMs)), handler.timeoutMs);
  const given = options.signal;
  const onGivenAbort = () => abort.abort(given!.reason);
  if (given?.aborted) onGivenAbort();
  else given?.addEventListener('abort', onGivenAbort, { once: true });
  const ctx: HandlerContext = {
    get signal() {
      return abort.signal;
    },
    attempt,
    maxAttempts: handler.maxAttempts,
    idempotencyKey: `${id}:${name}`,
    jobId,
    coalesced: 1,
    get log() {
      return log;
    },
    tx: options.tx as HandlerContext['tx'],
  };
  // The event's traceId is the trace the handler runs in, as record() would have stored it: given
  // none, it was null, while its ctx.log lines and the events it recorded carried one made from the id.
  const full = { id, createdBy: null, version: 1, createdAt: new Date(), ...event, subject: event.subject ?? null, traceId: scope.traceId, payload };
  try {
    await runInTrace(scope, () => abort.race((async () => handler.fn(full, ctx))()));
  } finally {
    clearTimeout(timer);
    given?.removeEventListener('abort', onGivenAbort);
  }
}

/**
 * A job id for one runHandlerNow call: digits, as a worker's are (a bigint as a string), so a
 * handler that stores or parses ctx.jobId works in its test as in production (every call had
 * 'test'), and new at each call. Counted down from the top of bigint's range, far above any id
 * the jobs table's sequence hands out, so it never names a real job.
 */
let testJobIds = 9_223_372_036_854_775_807n;
function nextTestJobId(): string {
  return String(testJobIds--);
}

function containsPartial(actual: unknown, expected: unknown): boolean {
  if (expected === null || typeof expected !== 'object') return Object.is(actual, expected);
  if (actual === null || typeof actual !== 'object') return false;
  return Object.entries(expected).every(([k, v]) => containsPartial((actual as Record<string, unknown>)[k], v));
}
