// The in-process handler channel: call the user's function with its context; with
// `transactional`, inside one transaction with the consume record and the job's completion.
import type { Clock } from '../../core/clock.js';
import type { JobLogger, LazyLogger } from '../../core/logger.js';
import type { ClaimedJob, Driver } from '../../driver/types.js';
import { makeTransaction, type Transaction, type TransactionState } from '../../tx/rea.js';
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

  get log(): JobLogger {
    return this.#log;
  }
}

/**
 * A plain handler's run. Not an async function: the handler's promise and the race are all it
 * makes (a job's run is the worker's hot path; see Worker.execute).
 */
export function runPlainHandler(handler: RegisteredHandler, job: ClaimedJob, abort: JobAbort, log: LazyLogger): Promise<HandlerOutcome> {
  if (abort.aborted) return Promise.reject(abort.reason);
  return abort.race(call(handler, job, new JobContext(job, handler.name, abort, log, undefined)), 0, SUCCEEDED);
}

const SUCCEEDED: HandlerOutcome = 'succeeded';

/** A transactional handler's run: in one transaction with its consume record and its job's completion. */
export async function runTransactionalHandler(
  driver: Driver,
  handler: RegisteredHandler,
  job: ClaimedJob,
  abort: JobAbort,
  log: LazyLogger,
  clock: Clock,
  /** The job's lease (its timeout and the margin): its transaction may idle on the server no longer. */
  leaseMs: number,
  onRecorded: (events: number) => void = () => {},
): Promise<HandlerOutcome> {
  const context = (tx: Transaction): HandlerContext => new JobContext(job, handler.name, abort, log, tx);
  // Events recorded through ctx.tx: once they commit, the relay is told, as for bus.transaction.
  const state: TransactionState = { open: true };
  const outcome = await driver.transaction(async (q, raw) => {
    // On a server (not PGlite, one connection and no other worker), the transaction is bounded
    // there too: a worker that froze or lost its network left its backend idle in transaction,
    // holding the consume row's lock until TCP gave up (hours), and every later attempt of the job
    // waited on it until its timeout and failed, to the last attempt: discarded, never run.
    const bounds = driver.capabilities.concurrentTransactions ? { idleMs: leaseMs, lockMs: handler.timeoutMs } : undefined;
    const fresh = await driver.executor.consumeInsert(q, { eventId: job.event.id, handler: handler.name, bounds });
    if (fresh) {
      // The job may have been aborted (its timeout, a stop) while this waited for a connection:
      // the handler must not start then, or its effects outside the database would come on an
      // attempt recorded as failed, and again on the retry.
      if (abort.aborted) throw abort.reason;
      try {
        await abort.race(call(handler, job, context(makeTransaction(q, raw, state))));
      } finally {
        state.open = false;
      }
    }
    const { consumed, completed } = await driver.executor.jobCompleteConsumed(q, {
      id: job.id, attempt: job.attempt, eventId: job.event.id, handler: handler.name, now: clock.now(),
    });
    if (!consumed) throw new HandlerTransactionEndedError(handler.name);
    if (!completed) throw new LeaseLostError();
    return fresh ? 'committed' : 'already-consumed';
  }, { aborted: () => abort.aborted });
  if (state.recorded) onRecorded(state.recorded);
  return outcome;
}

/** A transactional handler rolled back rea's transaction through ctx.tx: nothing of the attempt was kept. */
export class HandlerTransactionEndedError extends Error {
  constructor(handler: string) {
    super(`handler ${handler} rolled back its transaction (ctx.tx): its writes and the consume record are gone, so the job is not completed; `
      + 'throw instead of rolling back, and rea rolls back and retries');
    this.name = 'HandlerTransactionEndedError';
  }
}

/** The job's lease expired while it ran and the rescuer returned it to the queue: this attempt's writes are rolled back. */
export class LeaseLostError extends Error {
  constructor() {
    super('the job\'s lease expired while it ran and it went back to the queue; this attempt\'s writes were rolled back and the job runs again');
    this.name = 'LeaseLostError';
  }
}

/**
 * The user's function, its synchronous throw turned into a rejection like any other. Not an async
 * wrapper: that made a promise more per job around the one an async handler already returns.
 */
function call(handler: RegisteredHandler, job: ClaimedJob, ctx: HandlerContext): Promise<unknown> {
  try {
    return Promise.resolve(handler.fn(job.event, ctx));
  } catch (err) {
    return Promise.reject(err);
  }
}
