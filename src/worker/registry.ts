// What the worker knows about each locally registered handler, options resolved to their defaults.
import type { Backoff } from '../core/backoff.js';
import type { JobLogger } from '../core/logger.js';
import type { Transaction } from '../tx/rea.js';

export interface HandlerContext {
  /** Aborted when the handler's timeout passes or the worker stops. */
  readonly signal: AbortSignal;
  /** 1 on the first try. */
  readonly attempt: number;
  readonly maxAttempts: number;
  /** `eventId:handlerName`: stable across retries, for effects outside the database. */
  readonly idempotencyKey: string;
  readonly jobId: string;
  /** How many events of this subject this job stands for (coalescing handlers); otherwise 1. */
  readonly coalesced: number;
  /** A logger whose lines carry trace_id, event_id, handler and attempt; with OpenTelemetry, the active span's span_id and trace_flags (README: Logs and traces). */
  readonly log: JobLogger;
  /** With `transactional: true`: the transaction holding this job's completion and consume record. */
  readonly tx?: Transaction;
}

export type HandlerFn = (event: any, ctx: HandlerContext) => unknown | Promise<unknown>;

export interface RegisteredHandler {
  name: string;
  patterns: string[];
  fn: HandlerFn;
  maxAttempts: number;
  backoff: Backoff;
  timeoutMs: number;
  concurrency: number;
  coalesceSubject: boolean;
  transactional: boolean;
  priority: number;
}
