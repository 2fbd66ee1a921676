// OpenTelemetry for tests: a context manager on AsyncLocalStorage (what the SDK's
// @opentelemetry/context-async-hooks does), a tracer that starts spans as the SDK's does under
// its default sampler (ParentBased: a child takes its parent's trace and sampled flag; a root is
// sampled unless sampleRoots is false), keeping each span's parent for the test to read, and the
// log correlation of @opentelemetry/instrumentation-pino. Not the SDK nor that instrumentation
// themselves: no release of them accepts @opentelemetry/api 1.10 on Node 20 (the SDK's 2.x
// packages, and instrumentation-pino up to 0.69 through them, want api < 1.10; the SDK's 3.x ones
// and instrumentation-pino 0.70 want Node >= 22.15).
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomBytes } from 'node:crypto';
import {
  context, isSpanContextValid, ROOT_CONTEXT, trace, TraceFlags,
  type Context, type ContextManager, type Span, type SpanContext, type SpanOptions, type Tracer,
} from '@opentelemetry/api';
import { pino, type Logger as PinoLogger } from 'pino';

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

/**
 * What @opentelemetry/instrumentation-pino (0.70, its default options) does to each pino logger
 * it makes, for log correlation: a mixin on the root logger, so on its children too, that adds
 * the active span's trace_id, span_id and trace_flags (`0` and its flags in hex) to every line,
 * before the logger's own mixin. pino merges a mixin's object under the line's own object (whose
 * keys win), and writes a child's bindings apart from both: a binding and a mixin key of one
 * name were both written.
 */
export function instrumentPino(logger: PinoLogger): PinoLogger {
  const otelMixin = (): Record<string, string> => {
    const span = trace.getSpan(context.active());
    if (!span) return {};
    const spanContext = span.spanContext();
    if (!isSpanContextValid(spanContext)) return {};
    return { trace_id: spanContext.traceId, span_id: spanContext.spanId, trace_flags: `0${spanContext.traceFlags.toString(16)}` };
  };
  const holder = logger as unknown as Record<symbol, ((...args: unknown[]) => object) | undefined>;
  const own = holder[pino.symbols.mixinSym];
  holder[pino.symbols.mixinSym] = own === undefined
    ? otelMixin
    : (ctx: unknown, level: unknown, ...rest: unknown[]) => Object.assign(otelMixin(), own(ctx, level, ...rest));
  return logger;
}

/** A pino logger at `level` whose lines (the JSON text, as written) go to `lines`. */
export function pinoLines(lines: string[], level = 'info'): PinoLogger {
  return pino({ name: 'rea', level }, { write: (line: string) => void lines.push(line) });
}

/** The keys of one JSON log line as written, in order: a key written twice is there twice (JSON.parse keeps the last). */
export function keysOf(line: string): string[] {
  return [...line.matchAll(/[{,]"([^"]+)":/g)].map((m) => m[1]!);
}
