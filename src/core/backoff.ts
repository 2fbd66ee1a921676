// Retry schedules. Handlers default to 5 s × 5^(n-1) plus 0–30 s of jitter, counted from the failure.

/** Delay in ms before the next attempt, given the attempt that just failed (1-based). */
export type Backoff = (attempt: number) => number;

export const DEFAULT_HANDLER_BACKOFF_BASE_MS = 5_000;
export const DEFAULT_HANDLER_BACKOFF_FACTOR = 5;
export const DEFAULT_HANDLER_JITTER_MS = 30_000;

export function exponentialBackoff(options: { baseMs?: number; factor?: number; jitterMs?: number; maxMs?: number; random?: () => number } = {}): Backoff {
  const base = options.baseMs ?? DEFAULT_HANDLER_BACKOFF_BASE_MS;
  const factor = options.factor ?? DEFAULT_HANDLER_BACKOFF_FACTOR;
  const jitter = options.jitterMs ?? DEFAULT_HANDLER_JITTER_MS;
  const max = options.maxMs ?? 7 * 24 * 3600_000;
  const random = options.random ?? Math.random;
  const backoff: Backoff = (attempt) => Math.min(max, base * factor ** Math.max(0, attempt - 1)) + Math.floor(random() * jitter);
  upperBounds.set(backoff, (attempt) => Math.min(max, base * factor ** Math.max(0, attempt - 1)) + jitter);
  return backoff;
}

// Retention keeps consume records as long as a redelivery is possible, so it needs the longest
// delay a backoff can produce; the schedules built here know theirs exactly.
const upperBounds = new WeakMap<Backoff, Backoff>();

/**
 * The longest delay `backoff` can return after `attempt`. Exact for exponentialBackoff(); for
 * any other function, the largest of several calls, doubled to cover jitter the calls missed.
 */
export function backoffUpperBound(backoff: Backoff, attempt: number): number {
  const known = upperBounds.get(backoff);
  if (known) return known(attempt);
  let most = 0;
  for (let i = 0; i < 16; i++) most = Math.max(most, Number(backoff(attempt)) || 0);
  return most * 2;
}

export const defaultHandlerBackoff: Backoff = exponentialBackoff();
