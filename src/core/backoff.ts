// Retry schedules. Handlers default to 5 s × 5^(n-1) plus 0–30 s of jitter, counted from the failure.
import { OptionsError } from './errors.js';

/** Delay in ms before the next attempt, given the attempt that just failed (1-based). */
export type Backoff = (attempt: number) => number;

/**
 * Which attempt of its current allowance a job is on: the `n` its schedule is given. A job that
 * an operator retried (bus.jobs.retry) keeps its attempt count, so a late completion of an old
 * attempt never matches, and gets `allowance` more attempts on top (max_attempts = attempt +
 * allowance), so its schedule starts again from the first delay. Counted on, a retried webhook
 * delivery's first failure waited 19⁴ s (36 h), and a retried handler job's 5 s × 5^5 (4.3 h),
 * its later ones days: beyond the schedule the consume records of transactional handlers are
 * kept for. A job made under a larger allowance than the one given reads as retried part way;
 * its waits then restart early, they never grow.
 */
export function attemptInAllowance(job: { attempt: number; maxAttempts: number }, allowance: number): number {
  const before = job.maxAttempts - allowance;
  return before > 0 && job.attempt > before ? job.attempt - before : job.attempt;
}

export const DEFAULT_HANDLER_BACKOFF_BASE_MS = 5_000;
export const DEFAULT_HANDLER_BACKOFF_FACTOR = 5;
export const DEFAULT_HANDLER_JITTER_MS = 30_000;

export function exponentialBackoff(options: { baseMs?: number; factor?: number; jitterMs?: number; maxMs?: number; random?: () => number } = {}): Backoff {
  checkBackoffOptions(options);
  const base = options.baseMs ?? DEFAULT_HANDLER_BACKOFF_BASE_MS;
  const factor = options.factor ?? DEFAULT_HANDLER_BACKOFF_FACTOR;
  const jitter = options.jitterMs ?? DEFAULT_HANDLER_JITTER_MS;
  const max = options.maxMs ?? 7 * 24 * 3600_000;
  const random = options.random ?? Math.random;
  const backoff: Backoff = (attempt) => Math.min(max, base * factor ** Math.max(0, attempt - 1)) + Math.floor(random() * jitter);
  upperBounds.set(backoff, (attempt) => Math.min(max, base * factor ** Math.max(0, attempt - 1)) + jitter);
  return backoff;
}

/**
 * A schedule that would give a negative or non-numeric delay is refused where it is made: at
 * every failure the worker would otherwise log it and fall back to the default schedule.
 */
function checkBackoffOptions(options: Record<string, unknown>): void {
  if (options === null || typeof options !== 'object') throw new OptionsError('exponentialBackoff(options)', 'pass an object, e.g. { baseMs: 1000, factor: 2 }');
  const known = new Set(['baseMs', 'factor', 'jitterMs', 'maxMs', 'random']);
  for (const key of Object.keys(options)) {
    if (!known.has(key)) throw new OptionsError(`exponentialBackoff.${key}`, `unknown option; known: ${[...known].join(', ')}`);
  }
  const number = (key: string, ok: (n: number) => boolean, want: string) => {
    const v = options[key];
    if (v !== undefined && !(typeof v === 'number' && Number.isFinite(v) && ok(v))) {
      throw new OptionsError(`exponentialBackoff.${key}`, `${want}, not ${typeof v === 'number' ? v : JSON.stringify(v) ?? String(v)}`);
    }
  };
  number('baseMs', (n) => n >= 0, 'a number of ms ≥ 0');
  number('factor', (n) => n >= 1, 'a number ≥ 1 (1: the same delay every time)');
  number('jitterMs', (n) => n >= 0, 'a number of ms ≥ 0');
  number('maxMs', (n) => n >= 0, 'a number of ms ≥ 0');
  if (options.random !== undefined && typeof options.random !== 'function') {
    throw new OptionsError('exponentialBackoff.random', 'a function returning a number in [0, 1)');
  }
}

// Retention keeps consume records as long as a redelivery is possible, so it needs the longest
// delay a backoff can produce; the schedules built here know theirs exactly.
const upperBounds = new WeakMap<Backoff, Backoff>();

/** The longest wait before a retry; the worker cuts a longer backoff or retryAfter() to it. */
export const MAX_RETRY_DELAY_MS = 365 * 24 * 3600_000;

/**
 * The longest delay `backoff` can return after `attempt`, in whole ms, as the worker would wait
 * it: at most MAX_RETRY_DELAY_MS, and the default schedule's bound where the function throws or
 * gives no number ≥ 0 (the worker then uses the default). Exact for exponentialBackoff(); for any
 * other function, the largest of several calls, doubled to cover jitter the calls missed.
 */
export function backoffUpperBound(backoff: Backoff, attempt: number): number {
  const known = upperBounds.get(backoff)?.(attempt);
  if (known !== undefined && known >= 0) return Math.ceil(Math.min(known, MAX_RETRY_DELAY_MS));
  let most = 0;
  for (let i = 0; i < 16; i++) {
    let delay: unknown;
    try {
      delay = backoff(attempt);
    } catch {
      delay = undefined;
    }
    const usable = typeof delay === 'number' && delay >= 0;
    if (!usable) return Math.max(most * 2, backoffUpperBound(defaultHandlerBackoff, attempt));
    most = Math.max(most, Math.min(delay as number, MAX_RETRY_DELAY_MS));
  }
  return Math.ceil(Math.min(most * 2, MAX_RETRY_DELAY_MS));
}

export const defaultHandlerBackoff: Backoff = exponentialBackoff();
