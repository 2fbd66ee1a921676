// The in-process handler channel: call the user's function with its context; with
// `transactional`, inside one transaction with the consume record and the job's completion.
import type { Clock } from '../../core/clock.js';
import type { LazyLogger, Logger } from '../../core/logger.js';
import type { ClaimedJob, Driver } from '../../driver/types.js';
import { makeTransaction, type Transaction } from '../../tx/rea.js';
import type { JobAbort } from '../../worker/abort.js';
import type { HandlerContext, RegisteredHandler } from '../../worker/registry.js';

export type HandlerOutcome = 'succeeded' | 'committed' | 'already-consumed';

/** A handler's ctx. signal and log are getters: made only for handlers that use them. */
class JobContext implements HandlerContext {
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly jobId: string;
  readonly coalesced: number;
  readonly tx?: Transaction;
  readonly #abort: JobAbort;
  readonly #log: LazyLogger;
  readonly #eventId: string;
  readonly #handler: string;

  constructor(job: ClaimedJob, handler: string, abort: JobAbort, log: LazyLogger, tx: Transaction | undefined) {
    this.attempt = job.attempt;
    this.maxAttempts = job.maxAttempts;
    this.#eventId = job.event.id;
    this.#handler = handler;
    this.jobId = job.id;
    this.coalesced = job.coalesced;
    if (tx) this.tx = tx;
    this.#abort = abort;
    this.#log = log;
  }

  get idempotencyKey(): string {
    return `${this.#eventId}:${this.#handler}`;
  }

  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  get log(): Logger {
    return this.#log.real;
  }
}

export async function runHandler(
  driver: Driver,
  handler: RegisteredHandler,
  job: ClaimedJob,
  abort: JobAbort,
  log: LazyLogger,
  clock: Clock,
): Promise<HandlerOutcome> {
  if (!handler.transactional) {
    await abort.race(call(handler, job, new JobContext(job, handler.name, abort, log, undefined)));
    return 'succeeded';
  }
  const context = (tx: Transaction): HandlerContext => new JobContext(job, handler.name, abort, log, tx);
  return driver.transaction(async (q, raw) => {
    const fresh = await driver.executor.consumeInsert(q, { eventId: job.event.id, handler: handler.name });
    if (fresh) {
      const state = { open: true };
      try {
        await abort.race(call(handler, job, context(makeTransaction(q, raw, state))));
      } finally {
        state.open = false;
      }
    }
    await driver.executor.jobCompleteMany(q, { jobs: [{ id: job.id, attempt: job.attempt }], now: clock.now() });
    return fresh ? 'committed' : 'already-consumed';
  }, { aborted: () => abort.aborted });
}

/** The user's function, through an async wrapper so a synchronous throw becomes a rejection like any other. */
async function call(handler: RegisteredHandler, job: ClaimedJob, ctx: HandlerContext): Promise<unknown> {
  return handler.fn(job.event, ctx);
}
