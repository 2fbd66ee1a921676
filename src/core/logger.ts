// The logger seam: any pino-compatible logger. rea's default is pino at REA_LOG_LEVEL (default 'warn').
import { pino } from 'pino';

export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  child(bindings: Record<string, unknown>): Logger;
}

export function defaultLogger(): Logger {
  return pino({ name: 'rea', level: process.env.REA_LOG_LEVEL ?? 'warn' }) as unknown as Logger;
}

/** A child logger made on its first use; `real` is the child itself (what handlers get as ctx.log). */
export interface LazyLogger extends Logger {
  readonly real: Logger;
}

/**
 * A job's logger carries its trace and job ids, and most jobs never log: building pino's child
 * (it serializes the bindings) for every job is wasted work, so it is made on the first line.
 */
export function lazyChild(parent: Logger, bindings: Record<string, unknown>): LazyLogger {
  let child: Logger | undefined;
  const get = () => (child ??= parent.child(bindings));
  return {
    get real() {
      return get();
    },
    debug: (...a: [object, string?]) => get().debug(...a),
    info: (...a: [object, string?]) => get().info(...a),
    warn: (...a: [object, string?]) => get().warn(...a),
    error: (...a: [object, string?]) => get().error(...a),
    child: (more) => get().child(more),
  };
}
