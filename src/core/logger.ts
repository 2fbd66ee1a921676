// The logger seam: any pino-compatible logger. rea's default is pino at REA_LOG_LEVEL (default
// 'warn'), writing to stderr.
import { pino } from 'pino';
import { OptionsError } from './errors.js';

export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  child(bindings: Record<string, unknown>): Logger;
}

let stderr: ReturnType<typeof pino.destination> | undefined;

/**
 * pino at REA_LOG_LEVEL (`fallback` when unset or empty), to stderr. rea is a library inside
 * someone's program, whose stdout may be its output (`rea migrate --json`, a script's JSON):
 * pino's default, stdout, put a warning line in front of it. Written synchronously, one shared
 * destination, so no line is lost when the process exits right after it.
 */
export function defaultLogger(fallback = 'warn'): Logger {
  // A level pino does not know (warning, verbose) made createBus throw pino's own
  // "default level:warning must be included in custom levels", naming no variable.
  const level = process.env.REA_LOG_LEVEL?.trim() || fallback;
  const levels = [...Object.keys(pino.levels.values), 'silent'];
  if (!levels.includes(level)) throw new OptionsError('REA_LOG_LEVEL', `'${level}' is not a log level; one of ${levels.join(', ')}`);
  stderr ??= pino.destination({ dest: 2, sync: true });
  return pino({ name: 'rea', level }, stderr) as unknown as Logger;
}

const LOGGER_METHODS = ['debug', 'info', 'warn', 'error', 'child'] as const;

/**
 * The `logger` option as given: a logger with pino's methods. Pino's options (`{ level: 'info' }`)
 * were taken for one, and the first warning, from a timer, threw a TypeError that ended the process.
 */
export function checkLogger(logger: unknown): Logger {
  if (typeof logger !== 'object' && typeof logger !== 'function') {
    throw new OptionsError('logger', `takes a pino-compatible logger (an object with ${LOGGER_METHODS.join(', ')}), not ${logger === null ? 'null' : typeof logger}`);
  }
  const missing = LOGGER_METHODS.filter((m) => typeof (logger as Record<string, unknown> | null)?.[m] !== 'function');
  if (logger === null || missing.length > 0) {
    throw new OptionsError('logger', `takes a pino-compatible logger (an object with ${LOGGER_METHODS.join(', ')}); this one has no ${missing.join(', ')}: `
      + 'for pino\'s options (a level, say), pass pino(options), or set REA_LOG_LEVEL');
  }
  return logger as Logger;
}

/**
 * A handler's ctx.log: rea's Logger and pino's two other levels. A handler written against pino
 * (plain JavaScript, or from before ctx.log was rea's wrapper) calls ctx.log.trace or .fatal: with
 * a logger that has no such method, trace writes at debug and fatal at error. `level` is the
 * logger's own, where it has one (pino's), else undefined.
 */
export interface JobLogger extends Logger {
  trace(obj: object, msg?: string): void;
  fatal(obj: object, msg?: string): void;
  readonly level: string | undefined;
  child(bindings: Record<string, unknown>): JobLogger;
}

/** Writes one line (`write`, given fields to add to it), in a context of its choosing. */
export type LineWriter = (write: (fields: Record<string, unknown>) => void) => void;

type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal';

/** A level's method on a logger that may not have it (trace, fatal): the nearest it has. */
const FALLBACK: Record<Level, 'debug' | 'info' | 'warn' | 'error'> = { trace: 'debug', debug: 'debug', info: 'info', warn: 'warn', error: 'error', fatal: 'error' };

/**
 * A child logger made on its first use. A job's logger carries its job's ids, and most jobs
 * never log: building pino's child (it serializes the bindings) for every job is wasted work.
 * `line`, when given, writes each line, adding the fields that change from line to line (a job's
 * trace: see jobLogLine); children made from this logger write theirs through it too.
 */
export class LazyLogger implements JobLogger {
  #child: Logger | undefined;

  /** bindings: or a function that makes them, called on first use (most jobs never log). */
  constructor(
    private readonly parent: Logger,
    private readonly bindings: Record<string, unknown> | (() => Record<string, unknown>),
    private readonly line?: LineWriter,
  ) {}

  /** The child itself. */
  get real(): Logger {
    return (this.#child ??= this.parent.child(typeof this.bindings === 'function' ? this.bindings() : this.bindings));
  }

  get level(): string | undefined {
    const level = (this.real as { level?: unknown }).level;
    return typeof level === 'string' ? level : undefined;
  }

  trace(obj: object, msg?: string): void {
    this.#write('trace', obj, msg);
  }

  fatal(obj: object, msg?: string): void {
    this.#write('fatal', obj, msg);
  }

  debug(obj: object, msg?: string): void {
    this.#write('debug', obj, msg);
  }

  info(obj: object, msg?: string): void {
    this.#write('info', obj, msg);
  }

  warn(obj: object, msg?: string): void {
    this.#write('warn', obj, msg);
  }

  error(obj: object, msg?: string): void {
    this.#write('error', obj, msg);
  }

  child(bindings: Record<string, unknown>): JobLogger {
    return new LazyLogger(this.real, bindings, this.line);
  }

  #write(wanted: Level, obj: object, msg: string | undefined): void {
    const real = this.real as Logger & Partial<Record<Level, (obj: object, msg?: string) => void>>;
    const level = typeof real[wanted] === 'function' ? wanted : FALLBACK[wanted];
    if (!this.line) {
      real[level]!(obj, msg);
      return;
    }
    // The line's own keys win over the added fields, as they win over pino's bindings. A message
    // given alone, or an Error, as pino takes them (a handler's code may be plain JavaScript):
    // the fields go in front of the message, and the error under pino's key for it.
    this.line((fields) => {
      if (typeof obj === 'string') real[level]!(fields, obj);
      else if (obj instanceof Error) real[level]!({ ...fields, err: obj }, msg);
      else real[level]!({ ...fields, ...obj }, msg);
    });
  }
}
