// Turning anything a handler or the database throws into a bounded, storable description.
import { isPermanent, isRetryAfter } from './errors.js';

const MAX_MESSAGE = 2000;
const MAX_STACK = 4000;
const MAX_NAME = 200;

export function errorMessage(err: unknown): string {
  // Whatever was thrown, describing it must not throw in turn: the failure would go unrecorded
  // and the job would sit 'running' until its lease expired.
  try {
    if (err instanceof Error) return truncate(printable(err.message) || printable(err.name) || 'Error', MAX_MESSAGE);
    if (typeof err === 'string') return truncate(err, MAX_MESSAGE);
    let json: string | undefined;
    try {
      json = JSON.stringify(err);
    } catch {
      // A cycle, a BigInt: as String() prints it, if it can.
      return truncate(`non-Error thrown: ${printable(err) || 'a value that cannot be printed'}`, MAX_MESSAGE);
    }
    return truncate(json === undefined ? printable(err) || typeof err : `non-Error thrown: ${json}`, MAX_MESSAGE);
  } catch {
    return 'non-Error thrown: a value that cannot be printed';
  }
}

/** String(value), or '' when that throws (a null-prototype object, a throwing toString). */
function printable(value: unknown): string {
  try {
    return typeof value === 'string' ? value : value === undefined ? '' : String(value);
  } catch {
    return '';
  }
}

/** `TypeError: x is undefined` for one line of output; a plain Error's message alone. */
export function namedMessage(err: unknown): string {
  return nameAndMessage(err instanceof Error ? printable(err.name) : '', errorMessage(err));
}

/** The same line from a stored error entry's name and message. */
export function nameAndMessage(name: string | undefined, message: string): string {
  return name && name !== 'Error' && !message.startsWith(name) ? `${name}: ${message}` : message;
}

function errorName(err: unknown): string {
  if (err instanceof Error) return truncate(printable(err.name) || 'Error', MAX_NAME);
  return typeof err;
}

function errorStack(err: unknown): string | undefined {
  if (!(err instanceof Error)) return undefined;
  const stack = printable(err.stack);
  return stack ? truncate(stack, MAX_STACK) : undefined;
}

/**
 * The message, name and stack a failed attempt stores. permanent() and retryAfter() only steer the
 * retry: what failed is the reason they wrap, so a TypeError wrapped in permanent() is recorded as
 * a TypeError. A reason that is no Error (a string) has no name or stack of its own: the wrapper's
 * stand for it, and say where it was thrown.
 */
export function describeFailure(err: unknown): { message: string; name: string; stack: string | undefined } {
  const steered = isPermanent(err) || isRetryAfter(err);
  const reason = steered ? err.cause ?? err : err;
  const named = reason instanceof Error ? reason : err;
  return { message: errorMessage(reason), name: errorName(named), stack: errorStack(named) };
}

/**
 * Text PostgreSQL can store in a text or jsonb column: no NUL character (text cannot hold one,
 * jsonb refuses \u0000) and no lone UTF-16 surrogate (not valid UTF-8). Both become U+FFFD, so one
 * odd error message or response body can never make the row that records it unwritable.
 */
export function storable(s: string): string {
  return s.replace(/\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
}

function truncate(text: string, max: number): string {
  const s = storable(text);
  if (s.length <= max) return s;
  // Never cut between the two halves of a surrogate pair (an emoji at the cut).
  const cut = /[\uD800-\uDBFF]/.test(s[max - 2] ?? '') ? max - 2 : max - 1;
  return `${s.slice(0, cut)}…`;
}
