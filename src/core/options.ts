// Bus and handler options: every option has a named default here, and validate() names the field.
import { z } from 'zod';
import type { Backoff } from './backoff.js';
import { OptionsError } from './errors.js';

export const DEFAULTS = {
  schema: 'rea',
  maxPayloadBytes: 256 * 1024,
  poolSize: 10,
  relay: {
    /** Events claimed per relay round: the bulk-import bound. */
    batchSize: 200,
    /** Poll interval right after a round that found events. */
    minPollMs: 2,
    /** Poll interval once idle; also the fallback when a wake-up is missed. */
    maxPollMs: 1000,
    /** A row that fails fan-out this many times is poisoned. */
    maxFanAttempts: 5,
  },
  worker: {
    /** Handlers running at once in this process. */
    concurrency: 16,
    minPollMs: 2,
    maxPollMs: 1000,
    /** Completions are written in one statement per this window (or per 200 jobs). */
    completionFlushMs: 1,
    completionBatchSize: 200,
    /** Added to a handler's timeout to form its lease, so live work is never rescued. */
    leaseMarginMs: 5000,
  },
  /** Debounce for the cross-process NOTIFY sent after rea sees a commit. */
  notifyDebounceMs: 3,
  leader: { ttlMs: 15_000, renewMs: 5_000 },
  rescuer: { intervalMs: 5_000, batchSize: 1000 },
  handler: {
    maxAttempts: 5,
    timeoutMs: 30_000,
    priority: 0,
  },
} as const;

const positiveInt = z.number().int().positive();
const nonNegInt = z.number().int().nonnegative();

export const busOptionsSchema = z.object({
  schema: z.string().regex(/^[a-z_][a-z0-9_]{0,62}$/, 'a plain lower-case identifier (letters, digits, _; at most 63)').optional(),
  maxPayloadBytes: positiveInt.optional(),
  poolSize: positiveInt.optional(),
  instanceId: z.string().min(1).max(200).optional(),
  relay: z.object({
    enabled: z.boolean().optional(),
    batchSize: positiveInt.max(10_000).optional(),
    minPollMs: nonNegInt.optional(),
    maxPollMs: positiveInt.optional(),
    maxFanAttempts: positiveInt.optional(),
  }).strict().optional(),
  worker: z.object({
    enabled: z.boolean().optional(),
    concurrency: positiveInt.max(10_000).optional(),
    minPollMs: nonNegInt.optional(),
    maxPollMs: positiveInt.optional(),
    completionFlushMs: nonNegInt.optional(),
    completionBatchSize: positiveInt.optional(),
    leaseMarginMs: nonNegInt.optional(),
  }).strict().optional(),
  notifyDebounceMs: nonNegInt.optional(),
  leader: z.object({ ttlMs: positiveInt.optional(), renewMs: positiveInt.optional() }).strict().optional(),
  rescuer: z.object({ intervalMs: positiveInt.optional(), batchSize: positiveInt.optional() }).strict().optional(),
});

export const handlerOptionsSchema = z.object({
  maxAttempts: positiveInt.max(1000).optional(),
  timeoutMs: positiveInt.max(24 * 3600_000).optional(),
  concurrency: positiveInt.optional(),
  coalesce: z.literal('subject').optional(),
  transactional: z.boolean().optional(),
  priority: z.number().int().min(-32768).max(32767).optional(),
  backoff: z.function().optional(),
}).strict();

export interface HandlerOptions {
  /** Attempts before the job is discarded (default 5). */
  maxAttempts?: number;
  /** Delay before the next attempt, given the attempt that failed (default 5 s × 5^(n-1) + 0–30 s jitter). */
  backoff?: Backoff;
  /** The handler is aborted through ctx.signal after this long (default 30 s). */
  timeoutMs?: number;
  /** At most this many jobs of this handler at once in one process (default: the worker's concurrency). */
  concurrency?: number;
  /** 'subject': one job per subject per relay round, for the newest event of that subject. */
  coalesce?: 'subject';
  /** Run in a transaction with ctx.tx: writes, consume record and completion commit together. */
  transactional?: boolean;
  /** Lower runs first (default 0). */
  priority?: number;
}

/** Parse with zod and turn the first issue into an OptionsError that names the field. */
export function validateWith<T>(schema: z.ZodType<T>, value: unknown, prefix: string): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const path = issue.path.map(String).join('.');
  const field = path ? `${prefix}.${path}` : prefix;
  throw new OptionsError(field, issue.code === 'unrecognized_keys' ? `unknown option(s) ${(issue as { keys: string[] }).keys.join(', ')}` : issue.message);
}
