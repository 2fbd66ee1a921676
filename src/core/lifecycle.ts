// Typed lifecycle signals. Services emit them; tests and operators wait on them instead of sleeping.
import { EventEmitter } from 'node:events';
import type { DatabaseError } from './errors.js';

export interface LifecycleEvents {
  'relay:batch:fanned': { eventIds: string[]; jobs: number; handedOff: number };
  'relay:event:poisoned': { eventId: string; error: string };
  'relay:error': { error: Error };
  // `handler` is the job's target: a handler name, or an endpoint id when kind is 'webhook'.
  'job:completed': { jobId: string; handler: string; eventId: string; attempt: number; durationMs: number; kind?: JobKindName };
  // errorName: the failed attempt's error class as stored (TypeError, HandlerTimeoutError; the one a permanent() or retryAfter() wraps).
  'job:failed': { jobId: string; handler: string; eventId: string; attempt: number; error: string; errorName?: string; retryAt: Date | null; kind?: JobKindName };
  'job:discarded': { jobId: string; handler: string; eventId: string; attempt: number; error: string; errorName?: string; kind?: JobKindName };
  'job:skipped': { jobId: string; handler: string; eventId: string; reason: 'already-consumed' };
  'jobs:rescued': { rescued: number; discarded: number };
  /** The leader vacuumed rea's tables (autovacuum is off, or vacuum.mode is 'always'). */
  'tables:vacuumed': { tables: string[] };
  /**
   * Claimed ahead by the prefetch but not started in time (or at stop): back in the queue. Only the
   * jobs the release changed (one rescued meanwhile is left out; none changed, no signal).
   */
  'jobs:released': { jobIds: string[] };
  /** Inserted by this process's relay already claimed for its worker, with no claim statement. */
  'jobs:handed-off': { jobIds: string[] };
  /** One retention delete statement (at most retention.batchSize rows). */
  'retention:batch': { rule: string; table: string; removed: number; batch: number };
  /** One retention rule's pass, or its dry run. */
  'retention:pass': { rule: string; table: string; olderThanMs: number; removed: number; batches: number; archived: boolean; dryRun: boolean };
  'leader:elected': { leaderId: string };
  'leader:lost': { leaderId: string };
  /**
   * A started bus found a newer rea's breaking migration in its schema (migrations.checkIntervalMs):
   * it takes no more work and its record() refuses; upgrade the process. `error`: what start() would
   * have thrown (DatabaseError 'too-new'); `breaking`: those migrations.
   */
  'schema:too-new': { error: DatabaseError; breaking: number[] };
  'transaction:committed': { events: number };
  /** A claim failed, or a batched write of outcomes (completions, failures, releases) did; the worker retries. */
  'worker:error': { error: Error };
  /** One webhook HTTP attempt finished (jobId null for an endpoints test delivery). */
  'webhook:attempt': {
    jobId: string | null; endpointId: string; eventId: string; webhookId: string; attempt: number;
    outcome: 'success' | 'failure' | 'gone' | 'throttled' | 'refused'; status: number | null; durationMs: number; error: string | null;
  };
  /** An endpoint changed state: after a delivery, by the health pass, or by its owner. */
  'endpoint:state': { endpointId: string; state: 'enabled' | 'failing' | 'disabled'; reason: string | null };
  'webhook:attempts:deleted': { deleted: number };
}

type JobKindName = 'handler' | 'webhook' | 'forward';

export type LifecycleName = keyof LifecycleEvents;

/** Told of a listener that threw, or returned a promise that rejected. */
export type ListenerErrorReport = (err: unknown, name: LifecycleName) => void;

export class Lifecycle {
  private readonly emitter = new EventEmitter();

  /**
   * Signals are emitted from inside rea's work: after a commit, in the middle of a batch of
   * completions, on winning the lease. A listener's failure is reported to `onListenerError` and
   * goes no further, so it cannot make a committed transaction look failed, stop a batch half
   * way or cost the lease; and an async listener's rejection is caught, not left to end the process.
   */
  constructor(private readonly onListenerError: ListenerErrorReport = () => {}) {
    this.emitter.setMaxListeners(0);
  }

  on<K extends LifecycleName>(name: K, fn: (e: LifecycleEvents[K]) => unknown): () => void {
    const guarded = (e: LifecycleEvents[K]) => {
      try {
        const returned: unknown = fn(e);
        if (typeof (returned as PromiseLike<unknown> | undefined)?.then === 'function') {
          (returned as PromiseLike<unknown>).then(undefined, (err: unknown) => this.onListenerError(err, name));
        }
      } catch (err) {
        this.onListenerError(err, name);
      }
    };
    this.emitter.on(name, guarded);
    return () => this.emitter.off(name, guarded);
  }

  /** Whether anything listens to `name`: a signal's payload need not be built otherwise. */
  listened(name: LifecycleName): boolean {
    return this.emitter.listenerCount(name) > 0;
  }

  emit<K extends LifecycleName>(name: K, e: LifecycleEvents[K]): void {
    if (this.listened(name)) this.emitter.emit(name, e);
  }

  /** Resolve with the first signal that satisfies `match`, or reject after timeoutMs. */
  waitFor<K extends LifecycleName>(name: K, match: (e: LifecycleEvents[K]) => boolean = () => true, timeoutMs = 10_000): Promise<LifecycleEvents[K]> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for lifecycle signal '${name}'`));
      }, timeoutMs);
      const off = this.on(name, (e) => {
        if (!match(e)) return;
        clearTimeout(timer);
        off();
        resolve(e);
      });
    });
  }
}
