// The logger seam: any pino-compatible logger. rea's default is pino at REA_LOG_LEVEL (default 'warn').
import { pino } from 'pino';
import { OptionsError } from './errors.js';

export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  child(bindings: Record<string, unknown>): Logger;
}

export function defaultLogger(): Logger {
  // Unset or empty: 'warn'. A level pino does not know (warning, verbose) made createBus throw
  // pino's own "default level:warning must be included in custom levels", naming no variable.
  const level = process.env.REA_LOG_LEVEL?.trim() || 'warn';
  const levels = [...Object.keys(pino.levels.values), 'silent'];
  if (!levels.includes(level)) throw new OptionsError('REA_LOG_LEVEL', `'${level}' is not a log level; one of ${levels.join(', ')}`);
  return pino({ name: 'rea', level }) as unknown as Logger;
}

/**
 * A child logger made on its first use. A job's logger carries its trace and job ids, and most
 * jobs never log: building pino's child (it serializes the bindings) for every job is wasted
 * work. `real` is the child itself (what handlers get as ctx.log).
 */
export class LazyLogger implements Logger {
  #child: Logger | undefined;

  /** bindings: or a function that makes them, called on first use (most jobs never log). */
  constructor(private readonly parent: Logger, private readonly bindings: Record<string, unknown> | (() => Record<string, unknown>)) {}

  get real(): Logger {
    return (this.#child ??= this.parent.child(typeof this.bindings === 'function' ? this.bindings() : this.bindings));
  }

  debug(obj: object, msg?: string): void {
    this.real.debug(obj, msg);
  }

  info(obj: object, msg?: string): void {
    this.real.info(obj, msg);
  }

  warn(obj: object, msg?: string): void {
    this.real.warn(obj, msg);
  }

  error(obj: object, msg?: string): void {
    this.real.error(obj, msg);
  }

  child(bindings: Record<string, unknown>): Logger {
    return this.real.child(bindings);
  }
}
