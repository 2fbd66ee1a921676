// A logger that keeps every line (level, bindings, fields, message) for a test to read.
import type { Logger } from '../../src/index.js';

export function captureLogger(lines: Record<string, unknown>[], bindings: Record<string, unknown> = {}): Logger {
  const write = (level: string) => (obj: object, msg?: string) => lines.push({ level, ...bindings, ...obj, msg });
  return {
    debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error'),
    child: (b) => captureLogger(lines, { ...bindings, ...b }),
  };
}
