// OpenTelemetry: a handler runs with its event's trace as the remote parent span context when an
// OpenTelemetry context manager is registered (an SDK), including one registered after rea
// started; without one rea makes no span context (it could go nowhere), and its own trace scope
// still carries the trace id.
import { AsyncLocalStorage } from 'node:async_hooks';
import { context, ROOT_CONTEXT, trace, type Context, type ContextManager } from '@opentelemetry/api';
import { afterEach, describe, expect, it } from 'vitest';
import { currentTraceId, JobTraceScope, runInTrace, type TraceScope } from '../src/core/trace.js';

/** The smallest context manager there is: AsyncLocalStorage, as the SDK's own. */
class AlsContextManager implements ContextManager {
  private readonly als = new AsyncLocalStorage<Context>();
  active(): Context {
    return this.als.getStore() ?? ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(ctx: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
    return this.als.run(ctx, () => fn.apply(thisArg, args));
  }
  bind<T>(_ctx: Context, target: T): T {
    return target;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    return this;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const TRACE = 'ab'.repeat(16);

/** What a handler inside runInTrace would see. */
async function seen(scope: TraceScope = { traceId: TRACE, eventId: 'e1', handler: 'h', attempt: 1 }) {
  return runInTrace(scope, async () => {
    await sleep(1); // across an await, as a handler's own instrumentation would be
    const span = trace.getSpanContext(context.active());
    return { traceId: currentTraceId(), parent: span && { traceId: span.traceId, isRemote: span.isRemote, spanId: span.spanId } };
  });
}

describe('trace context for OpenTelemetry', () => {
  afterEach(() => {
    context.disable();
  });

  it('with no context manager there is no span context, and the trace id still comes from the event', async () => {
    expect(await seen()).toEqual({ traceId: TRACE, parent: undefined });
  });

  it('with a context manager, even one registered after jobs ran, handlers see the event trace as their remote parent', async () => {
    await seen(); // rea has already asked whether there is one
    expect(context.setGlobalContextManager(new AlsContextManager())).toBe(true);
    await sleep(150); // past the time rea keeps its answer
    const inside = await seen();
    expect(inside.traceId).toBe(TRACE);
    expect(inside.parent).toMatchObject({ traceId: TRACE, isRemote: true });
    expect(inside.parent!.spanId).toMatch(/^[0-9a-f]{16}$/);
  });

  it('a W3C trace id in upper case links as the parent, lower-cased; any other trace id is rea\'s alone, with no parent', async () => {
    expect(context.setGlobalContextManager(new AlsContextManager())).toBe(true);
    await sleep(150); // past the time rea keeps its answer (an earlier test may have asked)
    // An upper-case id was kept as the handler's trace and never made its parent: its spans began a trace of their own.
    const upper = await seen(new JobTraceScope(TRACE.toUpperCase(), 'e1', 'h', 1));
    expect(upper.traceId).toBe(TRACE);
    expect(upper.parent).toMatchObject({ traceId: TRACE, isRemote: true });
    // Not a W3C trace id: logs and the events the handler records carry it; OpenTelemetry has nothing to link.
    for (const traceId of ['order-42', '0'.repeat(32), `${TRACE.slice(0, 30)}xy`]) {
      expect(await seen(new JobTraceScope(traceId, 'e1', 'h', 1)), traceId).toEqual({ traceId, parent: undefined });
    }
  });
});

describe('a job\'s trace scope', () => {
  it('is its event\'s trace; for an event stored without one, its id as the trace id, the same for every run', async () => {
    expect(new JobTraceScope(TRACE, 'e1', 'h', 1).traceId).toBe(TRACE);
    const eventId = '0190a3c4-5b6d-7e8f-9a0b-1c2d3e4f5a6b';
    const scope = new JobTraceScope(null, eventId, 'h', 1);
    const seenInside = await runInTrace(scope, async () => {
      const first = currentTraceId();
      await sleep(1);
      return [first, currentTraceId()];
    });
    expect(seenInside).toEqual(['0190a3c45b6d7e8f9a0b1c2d3e4f5a6b', '0190a3c45b6d7e8f9a0b1c2d3e4f5a6b']);
    // Another attempt, another handler: the same trace.
    expect(new JobTraceScope(null, eventId, 'other', 2).traceId).toBe(scope.traceId);
    // An id that is no UUID still gives a valid trace id, one per run.
    const odd = new JobTraceScope(null, 'e3', 'h', 1).traceId;
    expect(odd).toMatch(/^[0-9a-f]{32}$/);
    expect(new JobTraceScope(null, 'e3', 'h', 1).traceId).not.toBe(odd);
  });
});

