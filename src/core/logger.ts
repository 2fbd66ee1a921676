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
