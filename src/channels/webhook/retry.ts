// When to try a failed webhook delivery again: attempt n waits n⁴ seconds ±10 % (about
// 3–4 days over 18 attempts); a receiver's Retry-After can push an attempt later, within a bound.
import { OptionsError } from '../../core/errors.js';

/** Total attempts, the first included; after the last failure the delivery is discarded. */
export const WEBHOOK_MAX_ATTEMPTS = 18;
/** Delay after attempt n is n^WEBHOOK_BACKOFF_EXPONENT seconds. */
export const WEBHOOK_BACKOFF_EXPONENT = 4;
/** Each delay is moved by up to this fraction either way, so retries of many deliveries spread out. */
export const WEBHOOK_JITTER_RATIO = 0.1;
/** The longest wait a Retry-After header may ask for. */
export const WEBHOOK_MAX_RETRY_AFTER_MS = 24 * 60 * 60 * 1000;

export interface WebhookRetryOptions {
  /** Default WEBHOOK_MAX_ATTEMPTS. */
  maxAttempts?: number;
  /** Default WEBHOOK_JITTER_RATIO. */
  jitterRatio?: number;
  /** A number in [0, 1); default Math.random. Tests pass a fixed one. */
  random?: () => number;
}

/**
 * The delay in ms before the next attempt, after `attempt` (1-based) has failed, or null
 * when that was the last attempt allowed.
 */
export function webhookRetryDelayMs(attempt: number, options: WebhookRetryOptions = {}): number | null {
  const maxAttempts = options.maxAttempts ?? WEBHOOK_MAX_ATTEMPTS;
  const jitter = options.jitterRatio ?? WEBHOOK_JITTER_RATIO;
  if (!Number.isInteger(attempt) || attempt < 1) throw new OptionsError('attempt', `must be an integer ≥ 1, got ${attempt}`);
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1) throw new OptionsError('maxAttempts', `must be an integer ≥ 1, got ${maxAttempts}`);
  if (!(jitter >= 0 && jitter < 1)) throw new OptionsError('jitterRatio', `must be in [0, 1), got ${jitter}`);
  if (attempt >= maxAttempts) return null;
  const r = (options.random ?? Math.random)();
  const base = attempt ** WEBHOOK_BACKOFF_EXPONENT * 1000;
  return Math.round(base * (1 + (2 * r - 1) * jitter));
}

/**
 * Reads a Retry-After value (delay seconds or an HTTP date) as ms from `nowMs`, clamped to
 * [0, maxMs]. Returns undefined when the header is absent or unreadable. The channel waits the
 * longer of this and webhookRetryDelayMs, so a small value never hurries a retry.
 */
export function parseRetryAfter(value: string | string[] | undefined, nowMs: number, maxMs = WEBHOOK_MAX_RETRY_AFTER_MS): number | undefined {
  const v = (Array.isArray(value) ? value[0] : value)?.trim();
  if (!v) return undefined;
  let ms: number;
  if (/^\d+$/.test(v)) ms = Number(v) * 1000;
  else if (/[a-z]/i.test(v)) {
    const at = Date.parse(v);
    if (Number.isNaN(at)) return undefined;
    ms = at - nowMs;
  } else return undefined;
  return Math.min(Math.max(ms, 0), maxMs);
}
