// OpenTelemetry for tests: a context manager on AsyncLocalStorage (what the SDK's
// @opentelemetry/context-async-hooks does) and a tracer that starts spans as the SDK's does under
// its default sampler (ParentBased: a child takes its parent's trace and sampled flag; a root is
// sampled unless sampleRoots is false), keeping each span's parent for the test to read. Not the
// SDK itself: no release of it accepts @opentelemetry/api 1.10 on Node 20 (the 2.x packages want
// api < 1.10, the 3.x ones Node >= 22.15).
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomBytes } from 'node:crypto';
import {
  context, isSpanContextValid, ROOT_CONTEXT, trace, TraceFlags,
  type Context, type ContextManager, type Span, type SpanContext, type SpanOptions, type Tracer,
} from '@opentelemetry/api';

/** The smallest context manager there is: AsyncLocalStorage, as the SDK's own. */
export class AlsContextManager implements ContextManager {
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

export class TestSpan implements Span {
  ended = false;
  constructor(readonly name: string, private readonly context: SpanContext, readonly parent: SpanContext | undefined) {}
  spanContext(): SpanContext {
    return this.context;
  }
  setAttribute(): this {
    return this;
  }
  setAttributes(): this {
    return this;
  }
  addEvent(): this {
    return this;
  }
  addLink(): this {
    return this;
  }
  addLinks(): this {
    return this;
  }
  setStatus(): this {
    return this;
  }
  updateName(): this {
    return this;
  }
  end(): void {
    this.ended = true;
  }
  isRecording(): boolean {
    return (this.context.traceFlags & TraceFlags.SAMPLED) !== 0 && !this.ended;
  }
  recordException(): void {}
}

export class TestTracer implements Tracer {
  readonly spans: TestSpan[] = [];
  /** Whether a root span is sampled (a head sampler's decision); a child follows its parent. */
  sampleRoots = true;

  startSpan(name: string, options: SpanOptions = {}, ctx: Context = context.active()): TestSpan {
    const given = options.root ? undefined : trace.getSpanContext(ctx);
    const parent = given && isSpanContextValid(given) ? given : undefined;
    const sampled = parent ? (parent.traceFlags & TraceFlags.SAMPLED) !== 0 : this.sampleRoots;
    const span = new TestSpan(name, {
      traceId: parent?.traceId ?? randomBytes(16).toString('hex'),
      spanId: randomBytes(8).toString('hex'),
      traceFlags: sampled ? TraceFlags.SAMPLED : TraceFlags.NONE,
    }, parent);
    this.spans.push(span);
    return span;
  }

  startActiveSpan<F extends (span: Span) => unknown>(name: string, fn: F): ReturnType<F>;
  startActiveSpan<F extends (span: Span) => unknown>(name: string, options: SpanOptions, fn: F): ReturnType<F>;
  startActiveSpan<F extends (span: Span) => unknown>(name: string, options: SpanOptions, ctx: Context, fn: F): ReturnType<F>;
  startActiveSpan<F extends (span: Span) => unknown>(name: string, ...rest: unknown[]): ReturnType<F> {
    const fn = rest.pop() as F;
    const [options, ctx = context.active()] = rest as [SpanOptions | undefined, Context | undefined];
    const span = this.startSpan(name, options, ctx);
    return context.with(trace.setSpan(ctx, span), () => fn(span)) as ReturnType<F>;
  }
}
